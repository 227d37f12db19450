#include "run/StatsWorker.h"

#include "run/TorchStats.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace hookscope {

StatsWorker::StatsWorker(std::shared_ptr<CaptureStore> store)
    : m_store(std::move(store)), m_thread([this] { run(); }) {}

StatsWorker::~StatsWorker() {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_all();
  m_thread.join();
}

void StatsWorker::submit(std::int64_t step, SeriesKey key, const at::Tensor& tensor, int bins, bool mayShare) {
  const std::size_t bytes = std::size_t(tensor.numel()) * tensor.element_size();
  std::vector<at::Tensor> released;  // let go of after the lock, on this thread
  std::unique_lock<std::mutex> lock(m_mutex);
  released.swap(m_released);
  if (m_queuedBytes + bytes > kMaxQueuedBytes) {
    // Queue full: no copy, no wait. Both cores are busy (the model here, the worker), so the
    // statistics stay on this one.
    lock.unlock();
    m_store->add(step, key, computeTensorStats(tensor, bins, StatsCores::One));
    return;
  }
  const c10::VariableVersion& counter = tensor.unsafeGetTensorImpl()->version_counter();
  // Inference tensors have no version counter: nothing could tell that they changed.
  const bool watched = counter.enabled();
  const auto known = m_share.find(key);
  const bool share = mayShare && watched && known != m_share.end() && known->second;
  if (watched) m_watches.push_back({step, key, counter, counter.current_version(), share});
  m_queuedBytes += bytes;
  ++(share ? m_sharedCount : m_copied);
  lock.unlock();  // the worker goes on while this thread copies
  at::Tensor snapshot;
  try {
    c10::NoGradGuard noGrad;
    snapshot = share ? tensor.detach() : tensor.detach().clone(at::MemoryFormat::Contiguous);
  } catch (...) {
    lock.lock();
    m_queuedBytes -= bytes;
    throw;
  }
  lock.lock();
  m_jobs.push_back({step, std::move(key), std::move(snapshot), bins, bytes, share});
  lock.unlock();
  m_wake.notify_one();
}

StatsWorker::StepEnd StatsWorker::endStep() {
  StepEnd end;
  std::lock_guard<std::mutex> lock(m_mutex);
  end.copied = std::exchange(m_copied, 0);
  end.shared = std::exchange(m_sharedCount, 0);
  for (Watch& watch : m_watches) {
    const bool touched = watch.counter.current_version() != watch.version;
    if (touched && watch.shared) end.suspect.emplace_back(watch.step, watch.key);
    // A series touched once is copied for good; one never touched is shared.
    auto [it, inserted] = m_share.try_emplace(std::move(watch.key), !touched);
    if (!inserted) it->second = it->second && !touched;
  }
  m_watches.clear();
  return end;
}

void StatsWorker::drain() {
  std::unique_lock<std::mutex> lock(m_mutex);
  // The caller would only wait here, so it takes queued captures too: at the end of a step
  // both cores work through the backlog.
  while (!m_jobs.empty()) process(lock, false);
  m_idle.wait(lock, [this] { return m_jobs.empty() && m_busy == 0; });
  std::vector<at::Tensor> released;
  released.swap(m_released);
  lock.unlock();
}

void StatsWorker::process(std::unique_lock<std::mutex>& lock, bool onWorker) {
  Job job = std::move(m_jobs.front());
  m_jobs.pop_front();
  ++m_busy;
  lock.unlock();
  try {
    // One core: the other one runs the model, or works through the same queue.
    m_store->add(job.step, job.key, computeTensorStats(job.snapshot, job.bins, StatsCores::One));
  } catch (const std::exception&) {
    // A tensor whose statistics cannot be computed yields no capture; the step goes on.
  }
  // A copy is the worker's own to free. A shared tensor goes back to the engine thread, which
  // drops it at its next submit or drain: the engine frees it later in LibTorch, whose
  // reference counts ThreadSanitizer cannot see, so the hand-over must go through this mutex.
  if (!onWorker || !job.shared) job.snapshot = at::Tensor();
  lock.lock();
  if (job.snapshot.defined()) m_released.push_back(std::move(job.snapshot));
  --m_busy;
  m_queuedBytes -= job.bytes;
  if (m_jobs.empty() && m_busy == 0) m_idle.notify_all();
}

void StatsWorker::run() {
  std::unique_lock<std::mutex> lock(m_mutex);
  for (;;) {
    m_wake.wait(lock, [this] { return m_stop || !m_jobs.empty(); });
    if (m_jobs.empty() && m_stop) return;
    process(lock, true);
  }
}

} // namespace hookscope
