#pragma once
// Just enough of CUDA to run python/hookscope/stats_kernels.cu as host C++: a block's threads are
// real threads (each kernel call one of them), with a barrier for __syncthreads, a barrier per
// warp for the shuffles, a shared-memory buffer per block, and the compiler's atomic builtins. Blocks
// run one after the other, so the last one to take a ticket is the last block. Slow, and
// exact: the arithmetic is the kernels' own source.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#define HS_EMULATION 1

struct uint4 {
  unsigned int x, y, z, w;
};

struct HsDim3 {
  unsigned int x = 0, y = 1, z = 1;
};

inline thread_local HsDim3 threadIdx;
inline thread_local HsDim3 blockIdx;
inline HsDim3 blockDim;
inline HsDim3 gridDim;

namespace hs_emulation {

/// Threads that wait for one another, again and again.
class Barrier {
public:
  explicit Barrier(int count) : m_count(count) {}
  void wait() {
    std::unique_lock<std::mutex> lock(m_mutex);
    const long generation = m_generation;
    if (++m_arrived == m_count) {
      m_arrived = 0;
      ++m_generation;
      m_changed.notify_all();
      return;
    }
    m_changed.wait(lock, [&] { return m_generation != generation; });
  }

private:
  std::mutex m_mutex;
  std::condition_variable m_changed;
  int m_count;
  int m_arrived = 0;
  long m_generation = 0;
};

/// One block while it runs: its shared memory and its barriers.
struct Block {
  std::vector<double> shared;  // doubles: 8-byte aligned, as the kernels' uses need
  std::unique_ptr<Barrier> all;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<double> lanes;   // a shuffle's values, 32 a warp
};

inline thread_local Block* current = nullptr;

/// Loads the read kernels took through their common path (stats_kernels.cu counts them here).
inline std::atomic<long long> commonLoads{0};

inline unsigned char* sharedMemory() { return reinterpret_cast<unsigned char*>(current->shared.data()); }

/// Runs kernel() in `threads` threads of each of `blocks` blocks (threads a multiple of 32): one
/// block after the other, or all at once (concurrent: as a cooperative launch, whose blocks may
/// wait for one another).
inline void launch(unsigned int blocks, unsigned int threads, std::size_t sharedBytes,
                   const std::function<void()>& kernel, bool concurrent = false) {
  gridDim.x = blocks;
  blockDim.x = threads;
  std::vector<std::unique_ptr<Block>> all;
  std::vector<std::thread> running;
  auto finish = [&] {
    for (auto& thread : running) thread.join();
    running.clear();
  };
  for (unsigned int b = 0; b < blocks; ++b) {
    all.push_back(std::make_unique<Block>());
    Block& block = *all.back();
    block.shared.assign((sharedBytes + 7) / 8, 0.0);
    block.all = std::make_unique<Barrier>(int(threads));
    for (unsigned int w = 0; w < threads / 32; ++w) block.warps.push_back(std::make_unique<Barrier>(32));
    block.lanes.assign(threads, 0.0);
    for (unsigned int t = 0; t < threads; ++t) {
      running.emplace_back([&block, &kernel, t, b] {
        current = &block;
        threadIdx.x = t;
        blockIdx.x = b;
        kernel();
      });
    }
    if (!concurrent) finish();
  }
  finish();
}

} // namespace hs_emulation

inline void __syncthreads() { hs_emulation::current->all->wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

inline double __shfl_down_sync(unsigned int, double v, int delta) {
  hs_emulation::Block& block = *hs_emulation::current;
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double* lanes = block.lanes.data() + warp * 32;
  lanes[lane] = v;
  block.warps[warp]->wait();
  const double out = lane + unsigned(delta) < 32 ? lanes[lane + delta] : v;
  block.warps[warp]->wait();
  return out;
}

// The kernels' atomics are on unsigned integers: the compiler's atomic builtins serve.
template <typename T>
T atomicAdd(T* at, T v) {
  return __atomic_fetch_add(at, v, __ATOMIC_SEQ_CST);
}

template <typename T>
T atomicExch(T* at, T v) {
  return __atomic_exchange_n(at, v, __ATOMIC_SEQ_CST);
}

// Round-to-nearest arithmetic that a GPU compiler may not contract into FMA; the host build
// makes no FMA of them either (no -mfma, -ffp-contract=off for this test).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
