#include "TensorStatistics.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace hookscope {

namespace {

constexpr std::int64_t kGrain = 1 << 16;

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

// float32 fast path: assumes every value is finite, so it needs no selects and runs about
// seven times faster than the careful scan. A NaN or Inf anywhere in a block makes its
// results non-finite; such a block is scanned again carefully. Float sums run over blocks of
// 256 values (64 per SIMD lane) and are added up in double: the relative rounding error of
// a block's sum of squares is below 64 * 2^-24 = 4e-6 even in the worst case, inside the
// 1e-5 parity tolerance, and about 1e-8 typically.
void scanRangeFast(const float* data, std::int64_t begin, std::int64_t end, double shift, Partial& p) {
  constexpr std::int64_t kBlock = 256;
  const float fshift = float(shift);
  for (std::int64_t first = begin; first < end; first += kBlock) {
    const std::int64_t n = std::min(kBlock, end - first);
    const float* block = data + first;
    float lo = std::numeric_limits<float>::max(), hi = -std::numeric_limits<float>::max();
    float s1 = 0, s2 = 0, sq = 0;
    std::int32_t zeros = 0;
#pragma omp simd reduction(min : lo) reduction(max : hi) reduction(+ : s1, s2, sq, zeros)
    for (std::int64_t j = 0; j < n; ++j) {
      const float v = block[j];
      const float d = v - fshift;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      s1 += d;
      s2 += d * d;
      sq += v * v;
      zeros += v == 0.0f;
    }
    if (!(std::isfinite(s1) && std::isfinite(s2) && std::isfinite(sq) && std::isfinite(lo) && std::isfinite(hi))) {
      scanRange(data, first, first + n, shift, p);  // NaN, Inf or float overflow in this block
      continue;
    }
    // min/max of NaN-free blocks: std::min/max would hide a NaN, but then s1 is NaN too.
    p.min = std::min(p.min, double(lo));
    p.max = std::max(p.max, double(hi));
    p.shiftedSum += double(s1);
    p.shiftedSumSq += double(s2);
    p.sumSq += double(sq);
    p.finite += n;
    p.zeros += zeros;
  }
}

template <typename T>
void scanChunk(const T* data, std::int64_t begin, std::int64_t end, double shift, Partial& p) {
  if constexpr (std::is_same_v<T, float>) {
    scanRangeFast(data, begin, end, shift, p);
  } else {
    scanRange(data, begin, end, shift, p);
  }
}

// Two passes per block: bin indices computed branch-free (vectorized; non-finite values go
// to a spare slot past the last bin), then increments spread over four copies of the counts
// so consecutive increments of one bin rarely wait on each other.
template <typename T>
void histogramRange(const T* data, std::int64_t begin, std::int64_t end, double low, double scale,
                    std::int64_t bins, std::int64_t* counts) {
  constexpr std::int64_t kBlock = 2048;
  constexpr double inf = std::numeric_limits<double>::infinity();
  const std::int64_t stride = bins + 1;
  std::vector<std::int64_t> lanes(std::size_t(4 * stride), 0);
  std::int32_t index[kBlock];
  const double top = double(bins - 1);
  const auto spare = std::int32_t(bins);
  for (std::int64_t first = begin; first < end; first += kBlock) {
    const std::int64_t n = std::min(kBlock, end - first);
    const T* block = data + first;
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) {
      const double v = double(block[j]);
      const bool ok = v == v && std::fabs(v) != inf;
      // Written so that NaN (0 * inf on a degenerate range) lands in bin 0, never outside.
      double at = (ok ? v - low : 0.0) * scale;
      at = at > 0.0 ? at : 0.0;
      at = at < top ? at : top;
      index[j] = ok ? std::int32_t(at) : spare;
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

std::int64_t chunkCount(std::int64_t n) {
  return std::max<std::int64_t>(1, std::min<std::int64_t>(at::get_num_threads(), n / kGrain));
}

// Splits [0, n) into chunkCount(n) chunks so partial results can be kept per chunk.
template <typename Fn>
void forEachChunk(std::int64_t n, Fn&& fn) {
  const std::int64_t chunks = chunkCount(n);
  const std::int64_t size = (n + chunks - 1) / chunks;
  at::parallel_for(0, chunks, 1, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t c = first; c < last; ++c) {
      fn(c, c * size, std::min(n, (c + 1) * size));
    }
  });
}

template <typename T>
void fillStats(const at::Tensor& contiguous, int bins, TensorStats& s) {
  const T* data = contiguous.data_ptr<T>();
  const std::int64_t n = contiguous.numel();
  double shift = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isfinite(double(data[i]))) {
      shift = double(data[i]);
      break;
    }
  }
  const auto chunks = static_cast<std::size_t>(chunkCount(n));
  std::vector<Partial> partials(chunks);
  forEachChunk(n, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
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
  std::vector<std::vector<std::int64_t>> counts(chunks,
                                                std::vector<std::int64_t>(std::size_t(bins), 0));
  forEachChunk(n, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
    histogramRange(data, b, e, s.histLow, scale, bins, counts[std::size_t(c)].data());
  });
  for (const auto& chunk : counts) {
    for (int i = 0; i < bins; ++i) s.histogram[std::size_t(i)] += chunk[std::size_t(i)];
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

TensorStats computeTensorStats(const at::Tensor& tensor, int bins) {
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
    fillStats<float>(values, bins, s);
  } else {
    fillStats<double>(values, bins, s);
  }
  return s;
}

} // namespace hookscope
