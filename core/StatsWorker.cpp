#include "StatsWorker.h"

#include "TensorStatistics.h"

#include <ATen/ATen.h>

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

void StatsWorker::submit(std::int64_t step, SeriesKey key, const at::Tensor& tensor, int bins) {
  const std::size_t bytes = std::size_t(tensor.numel()) * tensor.element_size();
  {
    std::unique_lock<std::mutex> lock(m_mutex);
    if (m_queuedBytes + bytes <= kMaxQueuedBytes) {
      at::NoGradGuard noGrad;
      at::Tensor snapshot = tensor.detach().clone(at::MemoryFormat::Contiguous);
      m_queuedBytes += bytes;
      m_jobs.push_back({step, std::move(key), std::move(snapshot), bins, bytes});
      lock.unlock();
      m_wake.notify_one();
      return;
    }
  }
  // Queue full: no copy, no wait. Both cores are busy (the model here, the worker), so the
  // statistics stay on this one.
  m_store->add(step, key, computeTensorStats(tensor, bins, StatsCores::One));
}

void StatsWorker::drain() {
  std::unique_lock<std::mutex> lock(m_mutex);
  // The caller would only wait here, so it takes queued captures too: at the end of a step
  // both cores work through the backlog.
  while (!m_jobs.empty()) process(lock);
  m_idle.wait(lock, [this] { return m_jobs.empty() && m_busy == 0; });
}

void StatsWorker::process(std::unique_lock<std::mutex>& lock) {
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
  job.snapshot = at::Tensor();
  lock.lock();
  --m_busy;
  m_queuedBytes -= job.bytes;
  if (m_jobs.empty() && m_busy == 0) m_idle.notify_all();
}

void StatsWorker::run() {
  std::unique_lock<std::mutex> lock(m_mutex);
  for (;;) {
    m_wake.wait(lock, [this] { return m_stop || !m_jobs.empty(); });
    if (m_jobs.empty() && m_stop) return;
    process(lock);
  }
}

} // namespace hookscope
