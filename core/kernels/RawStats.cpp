#include "kernels/RawStats.h"

#include "kernels/CorePool.h"
#include "kernels/StatsKernels.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

namespace hookscope {

namespace {

// Tensors at least this large are split over the idle cores (CorePool); below it, waking a
// helper costs more than it saves.
constexpr std::int64_t kParallelMin = std::int64_t(1) << 18;

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
  const std::int64_t size = (n / parts + kernels::kPartAlign - 1) / kernels::kPartAlign * kernels::kPartAlign;
  const std::function<void(int)> part = [&](int c) { fn(c, std::min(n, c * size), std::min(n, (c + 1) * size)); };
  if (parts > 1 && CorePool::instance().tryRun(int(parts), part)) return;
  for (int c = 0; c < int(parts); ++c) part(c);
}

// The first pass's parts as one (in a fixed order, so the sums do not depend on the cores).
kernels::Partial mergePartials(const std::vector<kernels::Partial>& partials) {
  kernels::Partial total;
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
  return total;
}

// The second pass: the histogram between s's edges and the low-precision counts, read in slices
// that stay in the cache.
// The fp8 counts scale by `scaleAmax`: the tensor's own amax, or a whole sharded tensor's.
template <typename T>
void histogramPass(const T* data, std::int64_t n, std::int64_t parts, bool allFinite, double scaleAmax,
                   TensorStats& s) {
  const auto bins = std::int64_t(s.histogram.size());
  // A tiny float range whose scale overflows float32, or a float64 span past its range, is
  // binned by the wide plan: never a NaN or out-of-range position (docs/export-format.md).
  const kernels::BinPlan plan = kernels::binPlan(s.histLow, s.histHigh, bins, std::is_same_v<T, float>);
  std::vector<std::vector<std::int64_t>> counts(std::size_t(parts), std::vector<std::int64_t>(std::size_t(bins), 0));
  kernels::PrecisionScan<T> scan;
  scan.e4m3Below = kernels::flushBelow<T>(scaleAmax, kernels::kE4M3);
  scan.e5m2Below = kernels::flushBelow<T>(scaleAmax, kernels::kE5M2);
  scan.amax = scaleAmax;
  std::vector<kernels::PrecisionScan<T>> scans(std::size_t(parts), scan);
  forEachPart(n, parts, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
    std::int64_t* partCounts = counts[std::size_t(c)].data();
    kernels::PrecisionScan<T>& partScan = scans[std::size_t(c)];
    if (plan.own) {
      kernels::histogramValues(data, b, e, s.histLow, plan.scale, bins, allFinite, partCounts,
                               kernels::HistogramKernel::Best, &partScan);
      return;
    }
    for (std::int64_t first = b; first < e; first += kernels::kCountSlice) {  // counted while in the cache
      const std::int64_t last = std::min(e, first + kernels::kCountSlice);
      kernels::histogramWide(data, first, last, s.histLow, plan.scale, plan.k, bins, partCounts);
      kernels::countPrecision(data, first, last, partScan);
    }
  });
  for (const auto& part : counts) {
    for (std::int64_t i = 0; i < bins; ++i) s.histogram[std::size_t(i)] += part[std::size_t(i)];
  }
  for (const auto& part : scans) {
    s.f16Overflow += part.counts.f16Overflow;
    s.f16Underflow += part.counts.f16Underflow;
    s.e4m3Underflow += part.counts.e4m3Underflow;
    s.e5m2Underflow += part.counts.e5m2Underflow;
  }
}

} // namespace

namespace {

// The first pass and everything it gives: moments, counts, min, max and amax; the histogram's
// edges are the finite min and max, widened around a single value. Returns the finite count.
template <typename T>
std::int64_t momentsPass(const T* data, std::int64_t n, int bins, std::int64_t parts, TensorStats& s) {
  double shift = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isfinite(double(data[i]))) {
      shift = double(data[i]);
      break;
    }
  }
  std::vector<kernels::Partial> partials(std::size_t(parts), kernels::Partial{});
  forEachPart(n, parts, [&](std::int64_t c, std::int64_t b, std::int64_t e) {
    kernels::scanValues(data, b, e, shift, partials[std::size_t(c)]);
  });
  const kernels::Partial total = mergePartials(partials);
  s.nanCount = total.nans;
  s.infCount = total.infs;
  s.zeroFraction = n ? double(total.zeros) / double(n) : 0.0;
  s.l2norm = std::sqrt(total.sumSq);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  s.histogram.assign(std::size_t(bins), 0);
  s.f16Overflow = s.f16Underflow = s.e4m3Underflow = s.e5m2Underflow = 0;
  if (total.finite == 0) {
    // Values, none of them finite: no spread and no norm to show (0 would read as a vanishing
    // gradient). An empty tensor has std 0 and norm 0.
    s.min = s.max = s.mean = s.amax = nan;
    s.std = n > 0 ? nan : 0.0;
    s.l2norm = n > 0 ? nan : 0.0;
    s.histLow = s.histHigh = 0;
    return 0;
  }
  const double count = double(total.finite);
  s.min = total.min;
  s.max = total.max;
  s.amax = std::max(std::fabs(total.min), std::fabs(total.max));
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
  return total.finite;
}

} // namespace

template <typename T>
void computeRawStats(const T* data, std::int64_t n, int bins, StatsCores cores, TensorStats& s) {
  bins = std::max(1, bins);
  const std::int64_t parts = partCount(n, cores);
  const std::int64_t finite = momentsPass(data, n, bins, parts, s);
  if (finite > 0) histogramPass(data, n, parts, finite == n, s.amax, s);
}

template <typename T>
void computeRawStatsInRange(const T* data, std::int64_t n, int bins, StatsCores cores, const SharedRange& range,
                            TensorStats& s) {
  bins = std::max(1, bins);
  const std::int64_t parts = partCount(n, cores);
  const std::int64_t finite = momentsPass(data, n, bins, parts, s);
  s.histLow = range.low;
  s.histHigh = range.high;
  if (finite > 0) histogramPass(data, n, parts, finite == n, range.amax, s);
}

template void computeRawStats<float>(const float*, std::int64_t, int, StatsCores, TensorStats&);
template void computeRawStats<double>(const double*, std::int64_t, int, StatsCores, TensorStats&);
template void computeRawStatsInRange<float>(const float*, std::int64_t, int, StatsCores, const SharedRange&,
                                            TensorStats&);
template void computeRawStatsInRange<double>(const double*, std::int64_t, int, StatsCores, const SharedRange&,
                                             TensorStats&);

} // namespace hookscope
