#include "TensorStatistics.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

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

template <typename T>
void scanRange(const T* data, std::int64_t begin, std::int64_t end, double shift, Partial& p) {
  for (std::int64_t i = begin; i < end; ++i) {
    const double v = double(data[i]);
    if (std::isfinite(v)) {
      p.min = std::min(p.min, v);
      p.max = std::max(p.max, v);
      const double d = v - shift;
      p.shiftedSum += d;
      p.shiftedSumSq += d * d;
      p.sumSq += v * v;
      ++p.finite;
      p.zeros += v == 0.0;
    } else if (std::isnan(v)) {
      ++p.nans;
    } else {
      ++p.infs;
    }
  }
}

template <typename T>
void histogramRange(const T* data, std::int64_t begin, std::int64_t end, double low, double scale,
                    std::int64_t bins, std::int64_t* counts) {
  for (std::int64_t i = begin; i < end; ++i) {
    const double v = double(data[i]);
    if (!std::isfinite(v)) continue;
    auto bin = std::int64_t((v - low) * scale);
    bin = std::clamp<std::int64_t>(bin, 0, bins - 1);
    ++counts[bin];
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
    scanRange(data, b, e, shift, partials[std::size_t(c)]);
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
    s.histLow -= 0.5;
    s.histHigh += 0.5;
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
