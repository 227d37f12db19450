#include "common/ProgressLine.h"

#include "common/PrintableText.h"

#include <cmath>

#include <unistd.h>

namespace hookscope {

namespace {

using Clock = std::chrono::steady_clock;

Clock::duration secondsOf(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

} // namespace

ProgressLine::ProgressLine(std::string program, const std::string& stage, std::FILE* out, double quietSeconds)
    : m_program(std::move(program)), m_stage(printableText(stage, false)), m_out(out), m_terminal(::isatty(::fileno(out)) == 1),
      m_start(Clock::now()) {
  // A terminal's line is redrawn each second; a log gets a line every 10 s, not hundreds.
  const auto every = secondsOf(m_terminal ? 1.0 : 10.0);
  m_thread = std::thread([this, quiet = secondsOf(quietSeconds), every] {
    std::unique_lock<std::mutex> lock(m_mutex);
    auto next = m_start + quiet;
    while (!m_finished) {
      if (m_changed.wait_until(lock, next, [this] { return m_finished; })) break;
      say(false);
      next = Clock::now() + every;
    }
  });
}

ProgressLine::~ProgressLine() { stop(); }

void ProgressLine::stage(const std::string& stage) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_stage = printableText(stage, false);  // a path or a name: never something that drives the terminal
  // A log shows each stage once it is said at all; a terminal's line shows it at the next second.
  if (m_said && !m_terminal) say(false);
}

bool ProgressLine::end() {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    if (m_finished) return false;
    m_finished = true;
    m_changed.notify_all();
  }
  m_thread.join();
  return true;
}

void ProgressLine::finish() {
  if (!end()) return;
  std::lock_guard<std::mutex> lock(m_mutex);
  if (m_said) say(true);
}

void ProgressLine::stop() {
  if (!end()) return;
  std::lock_guard<std::mutex> lock(m_mutex);
  if (m_said && m_terminal) {
    std::fputs("\r\033[K", m_out);
    std::fflush(m_out);
  }
}

void ProgressLine::say(bool last) {
  const double seconds = std::chrono::duration<double>(Clock::now() - m_start).count();
  const long whole = std::lround(seconds);
  const std::string line = m_program + ": " + (last ? std::string("done in ") : m_stage + "... ") + std::to_string(whole) + " s";
  // \033[K: nothing of a longer line before stays.
  if (m_terminal) {
    std::fprintf(m_out, "\r\033[K%s%s", line.c_str(), last ? "\n" : "");
  } else {
    std::fprintf(m_out, "%s\n", line.c_str());
  }
  std::fflush(m_out);
  m_said = true;
}

} // namespace hookscope
