#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace hookscope::cli {

/// Text for standard error, written by a thread of its own: when whatever reads the recorder's
/// standard error stops reading (a pipe read only at the end), the text waits, never the steps
/// (a recorder blocked in a write stops reading the scripts, which then drop their captures).
/// Past `limit` pieces waiting, new ones are left out, and how many is said when writing goes on.
class StderrLines {
public:
  explicit StderrLines(std::size_t limit = 10000);
  /// Writes what waits, then stops.
  ~StderrLines();
  StderrLines(const StderrLines&) = delete;
  StderrLines& operator=(const StderrLines&) = delete;

  /// Queues `text` as it is (with its own "\n" or "\r").
  void post(std::string text);
  /// Returns once everything posted before it is written.
  void flush();

private:
  void run();

  const std::size_t m_limit;
  std::mutex m_mutex;
  std::condition_variable m_wake;  ///< text posted, or stopping
  std::condition_variable m_idle;  ///< the queue emptied and written
  std::deque<std::string> m_waiting;
  std::size_t m_skipped = 0;
  bool m_writing = false;
  bool m_stop = false;
  std::thread m_thread;
};

} // namespace hookscope::cli
