#include "store/BandTracker.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hookscope {

const char* const kBandStatisticNames[kBandStatistics] = {"l2norm", "std", "amax", "zero_frac"};

BandMeasure bandMeasureOf(int statistic) { return statistic == 3 ? BandMeasure::Fraction : BandMeasure::Magnitude; }

std::optional<double> bandMeasure(BandMeasure measure, double value) {
  if (!std::isfinite(value)) return std::nullopt;
  if (measure == BandMeasure::Fraction) return value;
  if (value == 0) return std::nullopt;
  // Below float32's smallest normal number a magnitude is a few subnormal steps of rounding
  // (1.4e-45 is one): each step a 0.3-decade jump, which read as a 12-sigma excursion of a
  // gradient that had simply vanished. They are all that smallest normal number on the band.
  return std::log10(std::max(std::fabs(value), double(std::numeric_limits<float>::min())));
}

int furthestOf(const std::array<double, kBandStatistics>& scores) {
  int worst = -1;
  for (int i = 0; i < kBandStatistics; ++i) {
    const double score = scores[std::size_t(i)];
    if (!std::isnan(score) && (worst < 0 || std::fabs(score) > std::fabs(scores[std::size_t(worst)]))) worst = i;
  }
  return worst;
}

double bandFloor(BandMeasure measure) { return measure == BandMeasure::Fraction ? 0.01 : 0.025; }

namespace {

/// std::lower_bound without a branch to mispredict (the band's values come in no order).
std::size_t lowerBound(const std::vector<double>& sorted, double x) {
  const double* base = sorted.data();
  std::size_t n = sorted.size();
  while (n > 1) {
    const std::size_t half = n / 2;
    base = base[half] < x ? base + half : base;
    n -= half;
  }
  return std::size_t(base - sorted.data()) + (n > 0 && *base < x);
}

double medianOf(const std::vector<double>& sorted) {
  const std::size_t n = sorted.size(), middle = n / 2;
  return n % 2 ? sorted[middle] : 0.5 * (sorted[middle - 1] + sorted[middle]);
}

} // namespace

// The median of |v - median| over the sorted values, without sorting them: the values below
// the middle give deviations that grow leftwards, those from the middle on grow rightwards,
// so the deviations are two sorted runs and their k-th smallest is a binary search.
double RunningBand::madOf(double median) const {
  const std::vector<double>& a = m_sorted;
  const std::size_t n = a.size(), left = n / 2, right = n - left;
  // The i-th smallest deviation of the left run and of the right run.
  const auto low = [&](std::size_t i) { return std::fabs(a[left - 1 - i] - median); };
  const auto high = [&](std::size_t j) { return std::fabs(a[left + j] - median); };
  // The k-th smallest (from 0) of both runs: take i from the left and k + 1 - i from the right;
  // with `next`, the (k+1)-th too: the smaller of the first of each run not taken.
  const auto kth = [&](std::size_t k, double* next) {
    std::size_t lo = k + 1 > right ? k + 1 - right : 0, hi = std::min(k + 1, left);
    while (true) {
      const std::size_t i = lo + (hi - lo) / 2, j = k + 1 - i;  // j values from the right
      if (i < hi && j > 0 && high(j - 1) > low(i)) {
        lo = i + 1;  // the right's largest taken beats a left one not taken: take more from the left
      } else if (i > lo && j < right && low(i - 1) > high(j)) {
        hi = i - 1;
      } else {
        double best = -1;
        if (i > 0) best = std::max(best, low(i - 1));
        if (j > 0) best = std::max(best, high(j - 1));
        if (next) {
          *next = std::numeric_limits<double>::infinity();
          if (i < left) *next = std::min(*next, low(i));
          if (j < right) *next = std::min(*next, high(j));
        }
        return best;
      }
    }
  };
  if (n % 2) return kth(n / 2, nullptr);
  double upper = 0;
  const double lower = kth(n / 2 - 1, &upper);
  return 0.5 * (lower + upper);
}

double RunningBand::push(std::optional<double> value, BandMeasure measure, const BandSettings& settings) {
  constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  if (!value || settings.window < 1) return kNone;  // not measured: no score, nothing added
  const auto x = bandMeasure(measure, *value);
  const bool warm = m_seen >= std::max(settings.warmup, 1);  // a band of no values has no median
  double score = kNone;
  if (x && warm) {
    const double median = medianOf(m_sorted);
    score = (*x - median) / std::max(madOf(median) * 1.4826, bandFloor(measure));
  } else if (!x && !std::isfinite(*value) && warm) {
    score = std::numeric_limits<double>::infinity();  // NaN or Inf where the band had numbers
  }
  if (!x) return score;
  ++m_seen;
  const std::size_t window = std::size_t(settings.window);
  if (m_ring.size() < window) {
    m_ring.push_back(*x);
    m_sorted.insert(std::upper_bound(m_sorted.begin(), m_sorted.end(), *x), *x);
    return score;
  }
  // Full: the oldest value leaves as the new one comes, moving only the values between them.
  const double old = m_ring[m_next];
  m_ring[m_next] = *x;
  m_next = (m_next + 1) % window;
  const auto out = m_sorted.begin() + std::ptrdiff_t(lowerBound(m_sorted, old));
  const auto in = m_sorted.begin() + std::ptrdiff_t(lowerBound(m_sorted, *x));
  if (in > out) {
    std::move(out + 1, in, out);
    *(in - 1) = *x;
  } else {
    std::move_backward(in, out, out + 1);
    *in = *x;
  }
  return score;
}

} // namespace hookscope
