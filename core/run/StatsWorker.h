#pragma once
// Internal to core: computes capture statistics on a second thread.

#include "store/CaptureStore.h"

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace hookscope {

/// Takes snapshots of captured tensors and computes their statistics on its own thread, so
/// the engine thread pays at most for a copy. LibTorch often runs a step on one core; this
/// puts the statistics on another. drain() waits until every submitted capture is stored.
///
/// A snapshot is a copy only where one is needed. Every capture's version counter is
/// watched until the end of its step (endStep). A series whose tensor no in-place op
/// touched during a step is shared, not copied, from then on (most outputs and gradients);
/// one that was touched (BatchNorm's output, which ReLU(inplace=True) overwrites) stays
/// copied. Should a shared tensor be touched after all, endStep names that capture, since
/// its statistics may have seen the new values, and the series is copied from then on.
/// Changes PyTorch itself does not count (in-place ops on `.data`) are not seen: the caller
/// keeps tensors that may see them copied.
class StatsWorker {
public:
  explicit StatsWorker(std::shared_ptr<CaptureStore> store);
  ~StatsWorker();
  StatsWorker(const StatsWorker&) = delete;
  StatsWorker& operator=(const StatsWorker&) = delete;

  /// Stores the statistics of `tensor` as it is now: later in-place changes do not matter.
  /// `mayShare` false keeps it copied however it behaved, for tensors that can change without
  /// their version counter knowing (parameters, which LibTorch's optimizers update through
  /// .data). Computes inline when the queue already holds too much.
  void submit(std::int64_t step, SeriesKey key, const at::Tensor& tensor, int bins, bool mayShare = true);
  /// Returns once every capture submitted so far is in the store, computing queued ones on
  /// the calling thread meanwhile.
  void drain();
  struct StepEnd {
    /// Shared captures that an in-place op touched (step and key): their statistics may not
    /// be those of the tensor the hook saw.
    std::vector<std::pair<std::int64_t, SeriesKey>> suspect;
    int copied = 0;  ///< captures of the step that were copied
    int shared = 0;  ///< and shared
  };
  /// After drain(), at the end of a step: learns which series were touched in place since
  /// they were submitted.
  StepEnd endStep();
  /// Bytes of snapshots the queue may hold before submit() computes inline.
  static constexpr std::size_t kMaxQueuedBytes = std::size_t(256) << 20;

private:
  struct Job {
    std::int64_t step;
    SeriesKey key;
    at::Tensor snapshot;
    int bins;
    std::size_t bytes;
    bool shared;  // the captured tensor itself, not a copy
  };
  /// A submitted tensor's version counter, compared again at the end of the step.
  struct Watch {
    std::int64_t step;
    SeriesKey key;
    c10::VariableVersion counter;
    std::uint32_t version;
    bool shared;
  };
  void run();
  /// Takes the oldest job and stores its statistics; the lock is released meanwhile.
  void process(std::unique_lock<std::mutex>& lock, bool onWorker);

  std::shared_ptr<CaptureStore> m_store;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  std::condition_variable m_idle;
  std::deque<Job> m_jobs;
  std::size_t m_queuedBytes = 0;
  int m_busy = 0;  // jobs being computed, by the worker or a draining caller
  bool m_stop = false;
  std::vector<Watch> m_watches;       // this step's captures
  std::vector<at::Tensor> m_released;  // shared tensors the worker is done with
  int m_copied = 0;
  int m_sharedCount = 0;
  std::map<SeriesKey, bool> m_share;  // series seen untouched through a whole step
  std::thread m_thread;
};

} // namespace hookscope
