#pragma once
// Internal to core: spreads one computation over the machine's idle cores.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hookscope {

/// A fixed set of helper threads (one per core beyond the first) that run the parts of one
/// job beside the calling thread. One caller at a time: a second concurrent caller is told
/// the pool is taken and computes alone, so no caller ever waits for another's job.
class CorePool {
public:
  /// The process-wide pool, sized to std::thread::hardware_concurrency().
  static CorePool& instance();

  /// Threads a job may use: the caller plus the helpers.
  int width() const { return int(m_helpers.size()) + 1; }

  /// Runs part(i) for every i in [0, parts), part 0 on the calling thread, and returns once
  /// all are done. parts must not exceed width(). Returns false, running nothing, when
  /// another thread is using the pool. part must not throw.
  bool tryRun(int parts, const std::function<void(int)>& part);

private:
  explicit CorePool(int helpers);
  void helperLoop(int index);

  std::mutex m_callerMutex;  // held by the one caller whose job is running
  std::mutex m_mutex;
  std::condition_variable m_wake;
  const std::function<void(int)>* m_part = nullptr;
  int m_parts = 0;
  std::uint64_t m_generation = 0;
  std::atomic<std::uint64_t> m_published{0};  // m_generation, readable without the lock
  std::atomic<int> m_pending{0};
  std::vector<std::thread> m_helpers;
};

} // namespace hookscope
