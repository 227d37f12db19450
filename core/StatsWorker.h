#pragma once
// Internal to core: computes capture statistics on a second thread.

#include "CaptureStore.h"

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

namespace hookscope {

/// Takes snapshots of captured tensors and computes their statistics on its own thread, so
/// the engine thread only pays for the copy. LibTorch often runs a step on one core; this
/// puts the statistics on another. drain() waits until every submitted capture is stored.
class StatsWorker {
public:
  explicit StatsWorker(std::shared_ptr<CaptureStore> store);
  ~StatsWorker();
  StatsWorker(const StatsWorker&) = delete;
  StatsWorker& operator=(const StatsWorker&) = delete;

  /// Stores the statistics of `tensor` as it is now (it is copied first, so later in-place
  /// changes do not matter). Computes inline when the queue already holds too much.
  void submit(std::int64_t step, SeriesKey key, const at::Tensor& tensor, int bins);
  /// Returns once every capture submitted so far is in the store, computing queued ones on
  /// the calling thread meanwhile.
  void drain();
  /// Bytes of snapshots the queue may hold before submit() computes inline.
  static constexpr std::size_t kMaxQueuedBytes = std::size_t(256) << 20;

private:
  struct Job {
    std::int64_t step;
    SeriesKey key;
    at::Tensor snapshot;
    int bins;
    std::size_t bytes;
  };
  void run();
  /// Takes the oldest job and stores its statistics; the lock is released meanwhile.
  void process(std::unique_lock<std::mutex>& lock);

  std::shared_ptr<CaptureStore> m_store;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  std::condition_variable m_idle;
  std::deque<Job> m_jobs;
  std::size_t m_queuedBytes = 0;
  int m_busy = 0;  // jobs being computed, by the worker or a draining caller
  bool m_stop = false;
  std::thread m_thread;
};

} // namespace hookscope
