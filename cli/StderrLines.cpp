#include "cli/StderrLines.h"

#include "cli/CliSupport.h"

#include <iostream>
#include <utility>

namespace hookscope::cli {

StderrLines::StderrLines(std::size_t limit) : m_limit(limit), m_thread([this] { run(); }) {}

StderrLines::~StderrLines() {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_all();
  m_thread.join();
}

void StderrLines::post(std::string text) {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    if (m_waiting.size() >= m_limit) {
      ++m_skipped;
      return;
    }
    m_waiting.push_back(std::move(text));
  }
  m_wake.notify_one();
}

void StderrLines::flush() {
  std::unique_lock<std::mutex> lock(m_mutex);
  m_idle.wait(lock, [this] { return m_waiting.empty() && !m_writing; });
}

void StderrLines::run() {
  std::unique_lock<std::mutex> lock(m_mutex);
  for (;;) {
    m_wake.wait(lock, [this] { return m_stop || !m_waiting.empty(); });
    if (m_waiting.empty()) return;  // stopping, everything written
    std::deque<std::string> batch;
    batch.swap(m_waiting);
    const std::size_t skipped = std::exchange(m_skipped, 0);
    m_writing = true;
    lock.unlock();
    for (const auto& text : batch) std::cerr << text;
    if (skipped) {
      std::cerr << noteText(std::to_string(skipped) + " lines were left out here: standard error was not being read");
    }
    std::cerr << std::flush;
    lock.lock();
    m_writing = false;
    if (m_waiting.empty()) m_idle.notify_all();
  }
}

} // namespace hookscope::cli
