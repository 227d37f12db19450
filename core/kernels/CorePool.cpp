#include "kernels/CorePool.h"

#include <algorithm>
#include <chrono>

namespace hookscope {

namespace {
// A helper that just finished keeps polling this long before it sleeps: a histogram pass
// follows its scan pass within microseconds, and waking a sleeping thread costs tens of them.
constexpr auto kSpin = std::chrono::microseconds(200);
} // namespace

CorePool& CorePool::instance() {
  // Never destroyed: helper threads may still be parked when static destructors run.
  static CorePool* pool = new CorePool(int(std::max(1u, std::thread::hardware_concurrency())) - 1);
  return *pool;
}

CorePool::CorePool(int helpers) {
  for (int i = 0; i < helpers; ++i) {
    m_helpers.emplace_back([this, i] { helperLoop(i + 1); });
    m_helpers.back().detach();
  }
}

bool CorePool::tryRun(int parts, const std::function<void(int)>& part) {
  std::unique_lock<std::mutex> caller(m_callerMutex, std::try_to_lock);
  if (!caller.owns_lock()) return false;
  parts = std::clamp(parts, 1, width());
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_part = &part;
    m_parts = parts;
    m_pending.store(parts - 1, std::memory_order_relaxed);
    ++m_generation;
    m_published.store(m_generation, std::memory_order_release);
  }
  m_wake.notify_all();
  part(0);
  while (m_pending.load(std::memory_order_acquire) > 0) std::this_thread::yield();
  return true;
}

void CorePool::helperLoop(int index) {
  std::uint64_t seen = 0;
  for (;;) {
    const auto spinUntil = std::chrono::steady_clock::now() + kSpin;
    while (m_published.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < spinUntil) {
      std::this_thread::yield();
    }
    const std::function<void(int)>* part = nullptr;
    int parts = 0;
    {
      std::unique_lock<std::mutex> lock(m_mutex);
      m_wake.wait(lock, [&] { return m_generation != seen; });
      seen = m_generation;
      part = m_part;
      parts = m_parts;
    }
    if (index < parts) {
      (*part)(index);
      m_pending.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
}

} // namespace hookscope
