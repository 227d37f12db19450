#pragma once
// A line on stderr for work that may take seconds (reading a long export, scoring it, drawing a
// report): nothing when the work ends within a second; past it "<program>: <stage>... N s",
// redrawn in place each second on a terminal and written every 10 s otherwise, then what it
// took once the work is done.

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace hookscope {

class ProgressLine {
public:
  /// Starts timing `stage` ("reading run/"); says nothing before `quietSeconds` have passed.
  ProgressLine(std::string program, const std::string& stage, std::FILE* out = stderr, double quietSeconds = 1.0);
  /// stop().
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  /// What the work does from now on ("scoring 152 series over 2,000 steps").
  void stage(const std::string& stage);
  /// Ends the line: "<program>: done in N s" when anything was said, else nothing.
  void finish();
  /// Ends the line without a word (before an error message): a terminal's line is cleared.
  void stop();

private:
  bool end();  // true when this call ended it
  void say(bool last);  // under m_mutex

  const std::string m_program;
  std::string m_stage;
  std::FILE* const m_out;
  const bool m_terminal;
  const std::chrono::steady_clock::time_point m_start;
  bool m_said = false;
  bool m_finished = false;
  std::mutex m_mutex;
  std::condition_variable m_changed;
  std::thread m_thread;
};

} // namespace hookscope
