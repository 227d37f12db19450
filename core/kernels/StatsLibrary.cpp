// libhookscope_stats.so: the C entry point that the hookscope Python package loads into a
// training script's process (ctypes) to compute a capture's statistics on the CPU. It is the
// engine's own computeRawStats, with no LibTorch: nothing is compiled against the user's PyTorch.

#include "kernels/RawStats.h"
#include "kernels/RowLayout.h"

#include <cmath>
#include <cstdint>

namespace {

// range: null for the tensor's own edges, else a shared {low, high, amax} (a shard of a tensor).
template <typename T>
void fill(const void* data, std::int64_t n, int bins, int cores, const double* range, double* out) {
  hookscope::TensorStats s;
  const auto use = cores ? hookscope::StatsCores::Idle : hookscope::StatsCores::One;
  if (range) {
    hookscope::computeRawStatsInRange(static_cast<const T*>(data), n, bins, use,
                                      hookscope::SharedRange{range[0], range[1], range[2]}, s);
  } else {
    hookscope::computeRawStats(static_cast<const T*>(data), n, bins, use, s);
  }
  using namespace hookscope::row;
  out[kMin] = s.min;
  out[kMax] = s.max;
  out[kMean] = s.mean;
  out[kStd] = s.std;
  out[kL2] = s.l2norm;
  out[kZeros] = s.zeroFraction;
  out[kNan] = double(s.nanCount);
  out[kInf] = double(s.infCount);
  out[kLo] = s.histLow;
  out[kHi] = s.histHigh;
  out[kAmax] = s.amax;
  out[kF16Overflow] = double(s.f16Overflow);
  out[kF16Underflow] = double(s.f16Underflow);
  out[kE4m3Underflow] = double(s.e4m3Underflow);
  out[kE5m2Underflow] = double(s.e5m2Underflow);
  for (int i = 0; i < bins; ++i) out[kHeader + i] = double(s.histogram[std::size_t(i)]);
}

} // namespace

extern "C" {

/// The layout of hookscope_stats's output; the Python package refuses another.
/// 2: the header grew from 10 values to 15 (amax and the low-precision counts).
__attribute__((visibility("default"))) int hookscope_stats_abi() { return 2; }

/// Statistics of n contiguous values (dtype 0: float32, 1: float64) into out[15 + bins]: min,
/// max, mean, std (n-1), L2 norm, zero fraction, NaN count, Inf count, the histogram's low and
/// high edges, amax, the float16 overflow and underflow, E4M3 and E5M2 underflow counts, then
/// its bins' counts. cores 0: the calling thread only; 1: idle cores too.
/// Returns 0, or -1 for arguments it cannot take.
__attribute__((visibility("default"))) int hookscope_stats(const void* data, std::int64_t n, int dtype, int bins,
                                                           int cores, double* out) {
  if (n < 0 || (n > 0 && !data) || !out || bins < 1 || bins > 4096 || (dtype != 0 && dtype != 1)) return -1;
  try {
    if (dtype == 0) {
      fill<float>(data, n, bins, cores, nullptr, out);
    } else {
      fill<double>(data, n, bins, cores, nullptr, out);
    }
  } catch (...) {  // no exception may cross into the caller's C frames
    return -1;
  }
  return 0;
}

/// As hookscope_stats for one shard of a sharded tensor: range[3] = {low, high, amax} of the
/// whole tensor (finite, low <= high, every finite value of the shard inside): the histogram
/// is binned between them and the fp8 counts scale by that amax, so shards' rows add up.
/// Optional: a package that finds no such symbol computes a shard's row with torch ops.
__attribute__((visibility("default"))) int hookscope_stats_in_range(const void* data, std::int64_t n, int dtype,
                                                                    int bins, int cores, const double* range,
                                                                    double* out) {
  if (n < 0 || (n > 0 && !data) || !out || !range || bins < 1 || bins > 4096 || (dtype != 0 && dtype != 1)) return -1;
  if (!std::isfinite(range[0]) || !std::isfinite(range[1]) || !(range[0] <= range[1]) || !(range[2] >= 0)) return -1;
  try {
    if (dtype == 0) {
      fill<float>(data, n, bins, cores, range, out);
    } else {
      fill<double>(data, n, bins, cores, range, out);
    }
  } catch (...) {
    return -1;
  }
  return 0;
}

/// The rows of `count` float32 tensors copied one after another into one buffer (a step's small
/// CPU captures, read together at its end rather than one call a hook: a call from the training
/// loop cost several times the kernel's own work, its caches shared with PyTorch's). items[2k] is
/// tensor k's offset in bytes from `base`, items[2k + 1] its number of values; its row goes to
/// out + k * (15 + bins) and status[k] is hookscope_stats's result for it. Returns how many were
/// refused (-1: the arguments as a whole). Optional: a package that finds no such symbol reads
/// each capture in its hook, as before.
__attribute__((visibility("default"))) int hookscope_stats_many(const char* base, const std::int64_t* items, int count,
                                                                int bins, int cores, double* out, int* status) {
  if (count < 0 || (count > 0 && (!base || !items || !out || !status)) || bins < 1 || bins > 4096) return -1;
  const std::int64_t width = hookscope::row::kHeader + bins;
  int refused = 0;
  for (int k = 0; k < count; ++k) {
    const std::int64_t offset = items[2 * k], n = items[2 * k + 1];
    status[k] = offset < 0 ? -1 : hookscope_stats(base + offset, n, 0, bins, cores, out + k * width);
    refused += status[k] != 0;
  }
  return refused;
}

}  // extern "C"
