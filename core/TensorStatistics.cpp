#include "TensorStatistics.h"

#include "CorePool.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>

namespace hookscope {

namespace {

// Tensors at least this large are split over the idle cores (CorePool); below it, waking a
// helper costs more than it saves.
constexpr std::int64_t kParallelMin = std::int64_t(1) << 18;

// The float32 loops get AVX-512 (x86-64-v4) and AVX2 with FMA (x86-64-v3) versions, chosen at
// run time by what the CPU has, beside the baseline x86-64 one (LibTorch's own kernels
// dispatch the same way).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define HOOKSCOPE_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HOOKSCOPE_SIMD_CLONES
#endif

struct Partial {
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double shiftedSum = 0;    // sum of (x - shift)
  double shiftedSumSq = 0;  // sum of (x - shift)^2, for a stable variance
  double sumSq = 0;         // sum of x^2, for the norm
  std::int64_t finite = 0;
  std::int64_t zeros = 0;
  std::int64_t nans = 0;
  std::int64_t infs = 0;
};

// The careful scan: non-finite values are selected away and counted. Branch-free, with
// reductions that may be reassociated (omp simd, built with -fopenmp-simd).
template <typename T>
void scanRange(const T* data, std::int64_t begin, std::int64_t end, double shift, Partial& p) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  double lo = inf, hi = -inf, s1 = 0, s2 = 0, sq = 0;
  std::int64_t finite = 0, zeros = 0, nans = 0, infs = 0;
#pragma omp simd reduction(min : lo) reduction(max : hi) reduction(+ : s1, s2, sq, finite, zeros, nans, infs)
  for (std::int64_t i = begin; i < end; ++i) {
    const double v = double(data[i]);
    const bool isNan = v != v;
    const bool isInf = std::fabs(v) == inf;
    const bool ok = !isNan && !isInf;
    const double f = ok ? v : 0.0;
    const double d = ok ? v - shift : 0.0;
    lo = std::min(lo, ok ? v : inf);
    hi = std::max(hi, ok ? v : -inf);
    s1 += d;
    s2 += d * d;
    sq += f * f;
    finite += ok;
    zeros += v == 0.0;
    nans += isNan;
    infs += isInf;
  }
  p.min = std::min(p.min, lo);
  p.max = std::max(p.max, hi);
  p.shiftedSum += s1;
  p.shiftedSumSq += s2;
  p.sumSq += sq;
  p.finite += finite;
  p.zeros += zeros;
  p.nans += nans;
  p.infs += infs;
}

// float32 fast path: assumes every value is finite, so it needs no selects and runs several
// times faster than the careful scan. Each quantity is kept in 16 lanes (one AVX-512 or two
// AVX2 registers, written with GCC's vector extensions), so the loop has no horizontal
// reduction: blocks of 1024 values (64 per lane) are summed in float, then their lanes are
// added to double lanes. The relative rounding error of a block's sum of squares is below
// 64 * 2^-24 = 4e-6 even in the worst case, inside the 1e-5 parity tolerance, and about
// 1e-8 typically. A NaN or Inf in a block makes its sums or bounds non-finite; that block
// is scanned again carefully.
typedef float FloatLanes __attribute__((vector_size(64)));
typedef std::int32_t IntLanes __attribute__((vector_size(64)));
constexpr int kLanes = 16;
constexpr std::int64_t kScanBlock = 64 * kLanes;

HOOKSCOPE_SIMD_CLONES void scanRangeFast(const float* data, std::int64_t begin, std::int64_t end, double shift, Partial& p) {
  const FloatLanes shifts = FloatLanes{} + float(shift);
  const FloatLanes zero = FloatLanes{};
  FloatLanes lo = FloatLanes{} + std::numeric_limits<float>::infinity();
  FloatLanes hi = -lo;
  IntLanes zeros = IntLanes{};
  double s1Lanes[kLanes] = {}, s2Lanes[kLanes] = {}, sqLanes[kLanes] = {};
  std::int64_t fastValues = 0;
  std::int64_t first = begin;
  for (; first + kScanBlock <= end; first += kScanBlock) {
    const float* block = data + first;
    FloatLanes blockLo = lo, blockHi = hi, s1 = zero, s2 = zero, sq = zero;
    IntLanes blockZeros = IntLanes{};
    for (std::int64_t j = 0; j < kScanBlock; j += kLanes) {
      FloatLanes v;
      std::memcpy(&v, block + j, sizeof v);  // an unaligned load
      const FloatLanes d = v - shifts;
      blockLo = v < blockLo ? v : blockLo;
      blockHi = v > blockHi ? v : blockHi;
      s1 += d;
      s2 += d * d;
      sq += v * v;
      blockZeros -= v == zero;  // true is -1
    }
    // x - x is 0 for finite x, NaN for NaN and Inf: one probe for every lane and quantity.
    const FloatLanes probe = (s1 - s1) + (s2 - s2) + (sq - sq) + (blockLo - blockLo) + (blockHi - blockHi);
    bool finite = true;
    for (int k = 0; k < kLanes; ++k) finite &= probe[k] == 0.0f;
    if (!finite) {
      scanRange(data, first, first + kScanBlock, shift, p);
      continue;
    }
    lo = blockLo;
    hi = blockHi;
    zeros += blockZeros;
    fastValues += kScanBlock;
    for (int k = 0; k < kLanes; ++k) {
      s1Lanes[k] += double(s1[k]);
      s2Lanes[k] += double(s2[k]);
      sqLanes[k] += double(sq[k]);
    }
  }
  for (int k = 0; k < kLanes; ++k) {
    p.min = std::min(p.min, double(lo[k]));
    p.max = std::max(p.max, double(hi[k]));
    p.shiftedSum += s1Lanes[k];
    p.shiftedSumSq += s2Lanes[k];
    p.sumSq += sqLanes[k];
    p.zeros += zeros[k];
  }
  p.finite += fastValues;
  if (first < end) scanRange(data, first, end, shift, p);  // fewer than one block left
}

template <typename T>
void scanChunk(const T* data, std::int64_t begin, std::int64_t end, double shift, Partial& p) {
  if constexpr (std::is_same_v<T, float>) {
    scanRangeFast(data, begin, end, shift, p);
  } else {
    scanRange(data, begin, end, shift, p);
  }
}

// Where a value falls, clamped to [0, top]: written so that NaN lands at 0, never outside.
template <typename T>
inline T binPosition(T v, T low, T scale, T top) {
  T at = (v - low) * scale;
  at = at > T(0) ? at : T(0);
  return at < top ? at : top;
}

// The bin of a value, or `spare` (one past the last bin) for NaN and Inf.
template <typename T>
inline std::int32_t binIndex(T v, T low, T scale, T top, std::int32_t spare) {
  return std::fabs(v) <= std::numeric_limits<T>::max() ? std::int32_t(binPosition(v, low, scale, top)) : spare;
}

// Bin indices are computed branch-free and vectorized in the value's own precision (as
// torch.histc does); non-finite values go to a spare slot past the last bin. Then the
// increments are spread over four copies of the counts, so consecutive increments of one
// bin rarely wait on each other.
template <typename T>
void histogramLanes(const T* data, std::int64_t begin, std::int64_t end, T low, T scale, std::int64_t bins,
                    std::int64_t* counts) {
  constexpr std::int64_t kBlock = 2048;
  const std::int64_t stride = bins + 1;
  std::vector<std::int64_t> lanes(std::size_t(4 * stride), 0);
  std::int32_t index[kBlock];
  const T top = T(bins - 1);
  const auto spare = std::int32_t(bins);
  for (std::int64_t first = begin; first < end; first += kBlock) {
    const std::int64_t n = std::min(kBlock, end - first);
    const T* block = data + first;
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) {
      index[j] = binIndex(block[j], low, scale, top, spare);
    }
    std::int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      ++lanes[std::size_t(index[j])];
      ++lanes[std::size_t(stride + index[j + 1])];
      ++lanes[std::size_t(2 * stride + index[j + 2])];
      ++lanes[std::size_t(3 * stride + index[j + 3])];
    }
    for (; j < n; ++j) ++lanes[std::size_t(index[j])];
  }
  for (std::int64_t b = 0; b < bins; ++b) {
    counts[b] += lanes[std::size_t(b)] + lanes[std::size_t(stride + b)] + lanes[std::size_t(2 * stride + b)] +
                 lanes[std::size_t(3 * stride + b)];
  }
}

// The float32 histogram for up to 64 bins, which is what captures use. The scalar count
// increments are the cost, so each block's value k is paired with value k + half, and one
// increment of a (bin, bin) cell counts both: half the increments, in a table of 65 x 65
// cells (two copies, 33 KB, within L1) that is folded into bin counts at the end.
constexpr std::int64_t kPairMaxBins = 64;
constexpr std::int64_t kPairBlock = 4096;

HOOKSCOPE_SIMD_CLONES void histogramPairs(const float* data, std::int64_t begin, std::int64_t end, float low,
                                          float scale, std::int64_t bins, bool allFinite, std::int64_t* counts) {
  constexpr std::int64_t kHalf = kPairBlock / 2;
  constexpr std::int64_t kFlushBlocks = std::int64_t(1) << 20;  // keeps each uint32 cell below 2^30
  const auto stride = std::int32_t(bins + 1);
  const std::size_t cells = std::size_t(stride) * std::size_t(stride);
  std::vector<std::uint32_t> table(2 * cells, 0);
  std::vector<std::int64_t> folded(cells, 0);
  std::int32_t pair[kHalf];
  const float top = float(bins - 1);
  const std::int32_t spare = stride - 1;
  auto flush = [&] {
    for (std::size_t c = 0; c < cells; ++c) {
      folded[c] += std::int64_t(table[c]) + std::int64_t(table[cells + c]);
      table[c] = table[cells + c] = 0;
    }
  };
  std::int64_t first = begin;
  for (std::int64_t blocks = 1; first + kPairBlock <= end; first += kPairBlock, ++blocks) {
    const float* a = data + first;
    const float* b = a + kHalf;
    if (allFinite) {
      // Every value is finite and at least low, so v - low >= 0 needs no lower clamp.
#pragma omp simd
      for (std::int64_t j = 0; j < kHalf; ++j) {
        pair[j] = std::int32_t(std::min((a[j] - low) * scale, top)) * stride +
                  std::int32_t(std::min((b[j] - low) * scale, top));
      }
    } else {
#pragma omp simd
      for (std::int64_t j = 0; j < kHalf; ++j) {
        pair[j] = binIndex(a[j], low, scale, top, spare) * stride + binIndex(b[j], low, scale, top, spare);
      }
    }
    std::uint32_t* second = table.data() + cells;
    for (std::int64_t j = 0; j < kHalf; j += 2) {
      ++table[std::size_t(pair[j])];
      ++second[pair[j + 1]];
    }
    if (blocks % kFlushBlocks == 0) flush();
  }
  flush();
  for (std::int64_t x = 0; x < bins; ++x) {
    std::int64_t total = 0;
    for (std::int64_t y = 0; y < stride; ++y) {
      total += folded[std::size_t(x * stride + y)] + folded[std::size_t(y * stride + x)];
    }
    counts[x] += total;
  }
  if (first < end) histogramLanes(data, first, end, low, scale, bins, counts);
}

template <typename T>
void histogramChunk(const T* data, std::int64_t begin, std::int64_t end, double low, double scale,
                    std::int64_t bins, bool allFinite, std::int64_t* counts) {
  if constexpr (std::is_same_v<T, float>) {
    if (bins <= kPairMaxBins && end - begin >= 8 * kPairBlock) {
      histogramPairs(data, begin, end, float(low), float(scale), bins, allFinite, counts);
      return;
    }
  }
  histogramLanes(data, begin, end, T(low), T(scale), bins, counts);
}

// How many parts [0, n) is cut into: one per core for large tensors. It depends only on n
// and the machine, so results do not depend on whether the cores were free.
std::int64_t partCount(std::int64_t n, StatsCores cores) {
  if (n < kParallelMin || cores == StatsCores::One) return 1;
  return std::min<std::int64_t>(CorePool::instance().width(), n / (kParallelMin / 2));
}

// Runs fn(part, begin, end) over the parts of [0, n): on the idle cores when the pool is
// free, else one after the other on this thread.
template <typename Fn>
void forEachPart(std::int64_t n, std::int64_t parts, Fn&& fn) {
  // Parts start on whole blocks, so float block sums group values as on one core.
  const std::int64_t size = (n / parts + kPairBlock - 1) / kPairBlock * kPairBlock;
  const std::function<void(int)> part = [&](int c) { fn(c, std::min(n, c * size), std::min(n, (c + 1) * size)); };
  if (parts > 1 && CorePool::instance().tryRun(int(parts), part)) return;
  for (int c = 0; c < int(parts); ++c) part(c);
}

template <typename T>
void fillStats(const at::Tensor& contiguous, int bins, StatsCores cores, TensorStats& s) {
  const T* data = contiguous.data_ptr<T>();
  const std::int64_t n = contiguous.numel();
  double shift = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isfinite(double(data[i]))) {
      shift = double(data[i]);
      break;
    }
  }
  const std::int64_t parts = partCount(n, cores);
  std::vector<Partial> partials(std::size_t(parts), Partial{});
  forEachPart(n, parts, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
    scanChunk(data, b, e, shift, partials[std::size_t(c)]);
  });
  Partial total;
  for (const auto& p : partials) {
    total.min = std::min(total.min, p.min);
    total.max = std::max(total.max, p.max);
    total.shiftedSum += p.shiftedSum;
    total.shiftedSumSq += p.shiftedSumSq;
    total.sumSq += p.sumSq;
    total.finite += p.finite;
    total.zeros += p.zeros;
    total.nans += p.nans;
    total.infs += p.infs;
  }
  s.nanCount = total.nans;
  s.infCount = total.infs;
  s.zeroFraction = n ? double(total.zeros) / double(n) : 0.0;
  s.l2norm = std::sqrt(total.sumSq);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  s.histogram.assign(std::size_t(bins), 0);
  if (total.finite == 0) {
    s.min = s.max = s.mean = nan;
    s.std = 0;
    s.histLow = s.histHigh = 0;
    return;
  }
  const double count = double(total.finite);
  s.min = total.min;
  s.max = total.max;
  const double shiftedMean = total.shiftedSum / count;
  s.mean = shift + shiftedMean;
  if (total.finite > 1) {
    const double var = (total.shiftedSumSq - total.shiftedSum * shiftedMean) / (count - 1.0);
    s.std = std::sqrt(std::max(0.0, var));
  }
  s.histLow = total.min;
  s.histHigh = total.max;
  if (s.histHigh <= s.histLow) {
    // One value: a bin range around it, wide enough to survive rounding at any magnitude.
    const double pad = std::max(0.5, std::fabs(s.histLow) * 1e-6);
    s.histLow -= pad;
    s.histHigh += pad;
  }
  const double scale = double(bins) / (s.histHigh - s.histLow);
  const bool allFinite = total.finite == n;
  std::vector<std::vector<std::int64_t>> counts(std::size_t(parts), std::vector<std::int64_t>(std::size_t(bins), 0));
  forEachPart(n, parts, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
    histogramChunk(data, b, e, s.histLow, scale, bins, allFinite, counts[std::size_t(c)].data());
  });
  for (const auto& part : counts) {
    for (int i = 0; i < bins; ++i) s.histogram[std::size_t(i)] += part[std::size_t(i)];
  }
}

} // namespace

std::string dtypeName(const at::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kBool: return "bool";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    default: return c10::toString(tensor.scalar_type());
  }
}

TensorStats computeTensorStats(const at::Tensor& tensor, int bins, StatsCores cores) {
  TensorStats s;
  bins = std::max(1, bins);
  s.shape = tensor.sizes().vec();
  s.dtype = dtypeName(tensor);
  s.numel = tensor.numel();
  at::NoGradGuard noGrad;
  at::Tensor values = tensor.detach();
  if (values.is_complex()) values = values.abs();  // statistics of the magnitudes
  if (values.device().type() != at::kCPU) values = values.cpu();
  if (values.scalar_type() != at::kFloat && values.scalar_type() != at::kDouble) {
    values = values.to(values.is_floating_point() ? at::kFloat : at::kDouble);
  }
  values = values.contiguous();
  if (values.scalar_type() == at::kFloat) {
    fillStats<float>(values, bins, cores, s);
  } else {
    fillStats<double>(values, bins, cores, s);
  }
  return s;
}

} // namespace hookscope
