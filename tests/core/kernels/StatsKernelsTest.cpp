// The statistics loops on raw values: the AVX-512 one-hot histogram must count exactly like
// the portable one and like the float formula, whatever the data and the number of bins.
#include "kernels/RawStats.h"
#include "kernels/StatsKernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace hookscope::kernels;

namespace {

struct Range {
  float low = 0;
  float scale = 0;
};

// The bin range as TorchStats sets it: [min, max], or a pad around a single value.
Range rangeOf(const std::vector<float>& values, int bins) {
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  double low = *lo, high = *hi;
  if (high <= low) {
    low -= 0.5;
    high += 0.5;
  }
  return {float(low), float(double(bins) / (high - low))};
}

// bin = min((v - low) * scale, bins - 1), each step rounded in float.
std::vector<std::int64_t> byFormula(const std::vector<float>& values, Range r, int bins) {
  std::vector<std::int64_t> counts(std::size_t(bins), 0);
  const float top = float(bins - 1);
  for (const float v : values) {
    const float at = (v - r.low) * r.scale;
    ++counts[std::size_t(std::min(at, top))];
  }
  return counts;
}

std::vector<std::int64_t> byKernel(const std::vector<float>& values, Range r, int bins, HistogramKernel kernel) {
  std::vector<std::int64_t> counts(std::size_t(bins), 0);
  histogramValues(values.data(), 0, std::int64_t(values.size()), r.low, r.scale, bins, true, counts.data(), kernel);
  return counts;
}

// Normal values, ReLU-like values (half exact zeros, so half land in bin 0), one value
// repeated (every count in one bin, the carries of the bit planes at their longest), and
// values spread evenly with the maximum repeated (the top bin full).
std::vector<std::pair<std::string, std::vector<float>>> datasets(std::size_t n) {
  std::mt19937 random(7);
  std::normal_distribution<float> normal(1.0f, 3.0f);
  std::vector<float> gaussian(n), relu(n), equal(n, 0.25f), even(n);
  for (auto& v : gaussian) v = normal(random);
  for (auto& v : relu) v = std::max(0.0f, normal(random) - 1.0f);
  for (std::size_t i = 0; i < n; ++i) even[i] = i % 5 == 0 ? 100.0f : float(i % 1000) / 10.0f;
  return {{"gaussian", gaussian}, {"relu", relu}, {"equal", equal}, {"even", even}};
}

} // namespace

TEST(StatsKernelsTest, OneHotHistogramCountsLikeThePortableOneAndTheFormula) {
  if (!hasOneHotKernel()) GTEST_SKIP() << "this CPU has no AVX-512; the portable histogram is the only one";
  // 100 values (the tail loop only), one step and a tail, and 3.5 flushes of the bit planes
  // (255 steps of 256 values each) with a ragged tail.
  for (const std::size_t n : {std::size_t(100), std::size_t(256 + 17), std::size_t(255 * 256 * 3 + 128 * 256 + 99)}) {
    for (const auto& [name, values] : datasets(n)) {
      for (const int bins : {1, 7, 32, 33, 64}) {
        const Range r = rangeOf(values, bins);
        const auto expected = byFormula(values, r, bins);
        EXPECT_EQ(byKernel(values, r, bins, HistogramKernel::OneHot), expected)
            << name << ", " << n << " values, " << bins << " bins";
        EXPECT_EQ(byKernel(values, r, bins, HistogramKernel::Best), expected)
            << name << ", " << n << " values, " << bins << " bins (best)";
        EXPECT_EQ(byKernel(values, r, bins, HistogramKernel::Portable), expected)
            << name << ", " << n << " values, " << bins << " bins (portable)";
      }
    }
  }
}

TEST(StatsKernelsTest, HistogramOfPartsAddsUpToTheWhole) {
  // The parts TorchStats hands to the cores: counts add up across any cut.
  const auto values = datasets(300001)[0].second;
  const Range r = rangeOf(values, 64);
  const auto whole = byKernel(values, r, 64, HistogramKernel::Best);
  std::vector<std::int64_t> parts(64, 0);
  const std::int64_t cut = 4 * kPartAlign + 13;
  histogramValues(values.data(), 0, cut, r.low, r.scale, 64, true, parts.data());
  histogramValues(values.data(), cut, std::int64_t(values.size()), r.low, r.scale, 64, true, parts.data());
  EXPECT_EQ(parts, whole);
  EXPECT_EQ(whole, byFormula(values, r, 64));
}

// Ranges the values' own precision cannot bin (docs/export-format.md): a float range so tiny
// that its scale overflows float32 (the one-hot kernel turned 0 x inf into the last bin, the
// torch ops into an index of INT64_MIN), a float span past float32's range, and a double span
// past float64's range. Each lands where the wide plan puts it, counted once, in range.
TEST(StatsKernelsTest, RangesTooTinyOrTooWideForTheirPrecisionFollowTheWidePlan) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  std::vector<float> tinyValues = {0.0f, tiny, 2 * tiny};
  hookscope::TensorStats s;
  hookscope::computeRawStats(tinyValues.data(), 3, 64, hookscope::StatsCores::One, s);
  EXPECT_FALSE(binPlan(s.histLow, s.histHigh, 64, true).own);
  std::vector<std::int64_t> expected(64, 0);
  expected[0] = expected[32] = expected[63] = 1;  // (v - 0) * 64 / (2 * tiny), in double
  EXPECT_EQ(s.histogram, expected);

  std::vector<float> wideFloats = {-3e38f, 0.0f, 2e38f, 3e38f};
  hookscope::computeRawStats(wideFloats.data(), 4, 64, hookscope::StatsCores::One, s);
  EXPECT_FALSE(binPlan(s.histLow, s.histHigh, 64, true).own);
  expected.assign(64, 0);
  expected[0] = 1;
  expected[std::size_t((3e38 + 0.0) * 64 / 6e38)] += 1;  // 32 (in float32, 3e38 - -3e38 is inf)
  expected[std::size_t((3e38 + double(2e38f)) * 64 / 6e38)] += 1;
  expected[63] += 1;
  EXPECT_EQ(s.histogram, expected);

  std::vector<double> wideDoubles = {-1e308, 0.0, 1e308};
  hookscope::computeRawStats(wideDoubles.data(), 3, 64, hookscope::StatsCores::One, s);
  const BinPlan plan = binPlan(s.histLow, s.histHigh, 64, false);
  EXPECT_FALSE(plan.own);
  EXPECT_EQ(plan.k, 0.5);
  expected.assign(64, 0);
  expected[0] = expected[32] = expected[63] = 1;
  EXPECT_EQ(s.histogram, expected);

  // Ranges every precision holds keep their own plan (and the kernels they had).
  EXPECT_TRUE(binPlan(-1.0, 1.0, 64, true).own);
  EXPECT_TRUE(binPlan(-1e300, 1e300, 64, false).own);
}

// The float fast path sums squares in float: squares below float's normal range (|v| < 2^-63)
// vanished, and 5,000 values of 1e-30 had an L2 norm 57% short. Such blocks are scanned in double.
TEST(StatsKernelsTest, TinyValuesKeepTheirNormAndSpread) {
  std::mt19937 random(3);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const double size : {1e-30, 1e-21, 1e-12}) {
    std::vector<float> values(5000);
    for (auto& v : values) v = float(size * (2.0 + normal(random)));
    double sum = 0, squares = 0;
    for (const float v : values) {
      sum += v;
      squares += double(v) * v;
    }
    const double mean = sum / double(values.size());
    double m2 = 0;
    for (const float v : values) m2 += (v - mean) * (v - mean);
    hookscope::TensorStats s;
    hookscope::computeRawStats(values.data(), std::int64_t(values.size()), 64, hookscope::StatsCores::One, s);
    EXPECT_NEAR(s.l2norm, std::sqrt(squares), 1e-6 * std::sqrt(squares)) << size;
    EXPECT_NEAR(s.mean, mean, 1e-6 * std::fabs(mean)) << size;
    const double std = std::sqrt(m2 / double(values.size() - 1));
    EXPECT_NEAR(s.std, std, 1e-6 * std) << size;
  }
  // A block of zeros is no tiny value: still the fast path's result, exactly zero.
  std::vector<float> zeros(5000, 0.0f);
  hookscope::TensorStats s;
  hookscope::computeRawStats(zeros.data(), 5000, 64, hookscope::StatsCores::One, s);
  EXPECT_EQ(s.l2norm, 0.0);
  EXPECT_EQ(s.zeroFraction, 1.0);
}

// A tensor shorter than one scan block, or a block's worth left at the end, is scanned padded with
// copies of one of its values (the fast path): nothing of the padding may reach the statistics.
// Each case against the same sums in double, value by value: ordinary values, ReLU-like ones with
// lanes of nothing but zeros, zeros only, a NaN and an Inf in the tail, and tiny values.
TEST(StatsKernelsTest, ShortTensorsAndTailsAreScannedWithoutTheirPadding) {
  std::mt19937 random(11);
  std::normal_distribution<float> normal(0.5f, 2.0f);
  for (const std::size_t n : {std::size_t(128), std::size_t(300), std::size_t(512), std::size_t(1023),
                              std::size_t(1024 + 200), std::size_t(4096 + 1000)}) {
    std::vector<std::pair<std::string, std::vector<float>>> cases;
    std::vector<float> plain(n), relu(n), nonFinite(n), tiny(n);
    for (auto& v : plain) v = normal(random);
    for (std::size_t i = 0; i < n; ++i) relu[i] = i % 64 < 40 ? 0.0f : std::max(0.0f, normal(random));
    nonFinite = plain;
    nonFinite[n - 3] = std::numeric_limits<float>::quiet_NaN();
    nonFinite[n - 1] = -std::numeric_limits<float>::infinity();
    for (auto& v : tiny) v = 1e-30f * normal(random);
    cases = {{"plain", plain}, {"relu", relu}, {"zeros", std::vector<float>(n, 0.0f)}, {"nan and inf", nonFinite},
             {"tiny", tiny}};
    for (const auto& [name, values] : cases) {
      double lo = INFINITY, hi = -INFINITY, sum = 0, squares = 0;
      std::int64_t finite = 0, zeros = 0, nans = 0, infs = 0;
      for (const float v : values) {
        if (std::isnan(v)) { ++nans; continue; }
        if (std::isinf(v)) { ++infs; continue; }
        lo = std::min(lo, double(v));
        hi = std::max(hi, double(v));
        sum += v;
        squares += double(v) * v;
        ++finite;
        zeros += v == 0.0f;
      }
      const double mean = sum / double(finite);
      double m2 = 0;
      for (const float v : values) {
        if (std::isfinite(v)) m2 += (v - mean) * (v - mean);
      }
      hookscope::TensorStats s;
      hookscope::computeRawStats(values.data(), std::int64_t(n), 64, hookscope::StatsCores::One, s);
      const std::string what = name + ", " + std::to_string(n) + " values";
      EXPECT_EQ(s.min, lo) << what;
      EXPECT_EQ(s.max, hi) << what;
      EXPECT_EQ(s.zeroFraction, double(zeros) / double(n)) << what;
      EXPECT_EQ(s.nanCount, nans) << what;
      EXPECT_EQ(s.infCount, infs) << what;
      EXPECT_NEAR(s.mean, mean, 1e-6 * std::max(std::fabs(mean), std::sqrt(m2 / double(finite)))) << what;
      EXPECT_NEAR(s.l2norm, std::sqrt(squares), 1e-6 * std::sqrt(squares)) << what;
      EXPECT_NEAR(s.std, std::sqrt(m2 / double(finite - 1)), 1e-6 * std::sqrt(m2 / double(finite - 1))) << what;
      std::int64_t counted = 0;
      for (const auto c : s.histogram) counted += c;
      EXPECT_EQ(counted, finite) << what;
    }
  }
}

namespace {

// What docs/export-format.md says, value by value in float64, without the thresholds the
// kernel derives: a finite non-zero value underflows a format when |v| * largest < amax * smallest.
template <typename T>
PrecisionCounts precisionByDefinition(const std::vector<T>& values) {
  double amax = 0;
  for (const T v : values) {
    if (std::isfinite(double(v))) amax = std::max(amax, std::fabs(double(v)));
  }
  PrecisionCounts c;
  for (const T v : values) {
    const double a = std::fabs(double(v));
    if (!std::isfinite(a) || a == 0) continue;
    c.f16Overflow += a > 65504.0;
    c.f16Underflow += a < 0x1p-24;
    c.e4m3Underflow += a * 448.0 < amax * 0x1p-9;
    c.e5m2Underflow += a * 57344.0 < amax * 0x1p-16;
  }
  return c;
}

template <typename T>
void expectPrecision(const std::vector<T>& values, hookscope::StatsCores cores, const char* what) {
  hookscope::TensorStats s;
  hookscope::computeRawStats(values.data(), std::int64_t(values.size()), 64, cores, s);
  const PrecisionCounts expected = precisionByDefinition(values);
  EXPECT_EQ(s.f16Overflow, expected.f16Overflow) << what;
  EXPECT_EQ(s.f16Underflow, expected.f16Underflow) << what;
  EXPECT_EQ(s.e4m3Underflow, expected.e4m3Underflow) << what;
  EXPECT_EQ(s.e5m2Underflow, expected.e5m2Underflow) << what;
}

// Each value at a threshold and one unit in the last place either side of it.
template <typename T>
void addAround(std::vector<T>& values, T edge) {
  const T inf = std::numeric_limits<T>::infinity();
  for (const T v : {std::nextafter(std::nextafter(edge, T(0)), T(0)), std::nextafter(edge, T(0)), edge,
                    std::nextafter(edge, inf), std::nextafter(std::nextafter(edge, inf), inf)}) {
    values.push_back(v);
    values.push_back(-v);
  }
}

} // namespace

// The low-precision counts at and around every threshold, in float32 and float64: values a
// unit in the last place from an edge decide whether the thresholds are exact.
TEST(StatsKernelsTest, LowPrecisionCountsAtAndAroundEachThreshold) {
  for (const double amax : {1000.0, 3.0e38, 1e-3, 7.0, 1e-35}) {
    std::vector<float> values = {float(amax), 0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN(),
                                 std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                 std::numeric_limits<float>::denorm_min(), 1.0f};
    addAround(values, 65504.0f);
    addAround(values, 0x1p-24f);
    addAround(values, flushBelow<float>(amax, kE4M3));
    addAround(values, flushBelow<float>(amax, kE5M2));
    values.erase(std::remove_if(values.begin(), values.end(), [&](float v) { return std::fabs(v) > float(amax); }),
                 values.end());
    expectPrecision(values, hookscope::StatsCores::One, "float32");
    std::vector<double> wide(values.begin(), values.end());
    addAround(wide, flushBelow<double>(amax, kE4M3));
    addAround(wide, flushBelow<double>(amax, kE5M2));
    addAround(wide, 65504.0);
    expectPrecision(wide, hookscope::StatsCores::One, "float64");
  }
  // The thresholds are what their formulas say: 1000 * 2^-9 / 448 lies between two floats.
  const float w = flushBelow<float>(1000.0, kE4M3);
  EXPECT_GE(double(w) * 448.0, 1000.0 * 0x1p-9);
  EXPECT_LT(double(std::nextafter(w, 0.0f)) * 448.0, 1000.0 * 0x1p-9);
  EXPECT_EQ(flushBelow<float>(0.0, kE4M3), 0.0f);
  EXPECT_EQ(flushBelow<float>(std::numeric_limits<double>::quiet_NaN(), kE5M2), 0.0f);
}

// Counted slice by slice and part by part, over the cores or on one: the same counts as the
// definition, with NaN and Inf blocks and both histogram plans.
TEST(StatsKernelsTest, LowPrecisionCountsOverPartsAndSlices) {
  std::mt19937 random(5);
  std::lognormal_distribution<double> magnitude(-6.0, 6.0);
  std::vector<float> values(std::size_t(1) << 20);
  for (auto& v : values) v = float((random() % 2 ? 1 : -1) * magnitude(random));
  for (std::size_t i = 0; i < values.size(); i += 4099) values[i] = 0.0f;
  values[77777] = std::numeric_limits<float>::quiet_NaN();
  expectPrecision(values, hookscope::StatsCores::Idle, "float32 over the cores");
  expectPrecision(values, hookscope::StatsCores::One, "float32 on one core");
  std::vector<double> wide(values.begin(), values.end());
  wide[5] = 1e300;  // a span past float32: another histogram plan, the same counts
  expectPrecision(wide, hookscope::StatsCores::Idle, "float64");
}

// Where almost every block has nothing to count (the kernel passes over those after one test a
// value): a lone value to count at the first and last place of a block, in the tail, after a
// run of blocks full of tiny values; and a lone overflow among values no threshold reaches.
TEST(StatsKernelsTest, LowPrecisionCountsOfRareValuesAmongOrdinaryOnes) {
  std::mt19937 random(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const std::size_t n : {std::size_t(1000), std::size_t(70001), std::size_t(1) << 19}) {
    std::vector<float> values(n);
    for (auto& v : values) {
      do v = float(normal(random));
      while (std::fabs(v) < 1e-3f);  // nothing any format flushes, at first
    }
    const float tiny = 1e-30f;
    for (const std::size_t at : {std::size_t(0), std::size_t(255), std::size_t(256), std::size_t(511), n / 2, n - 1}) {
      if (at < n) values[at] = at % 2 ? -tiny : tiny;
    }
    for (std::size_t i = n / 4; i < n / 4 + 600 && i < n; ++i) values[i] = 1e-9f;  // a dense run
    // Every value finite: the one-hot histogram (on a CPU with AVX-512) tests as it bins.
    expectPrecision(values, hookscope::StatsCores::One, "float32, all finite");
    values[n / 3] = std::numeric_limits<float>::quiet_NaN();
    values[n / 3 + 1] = -std::numeric_limits<float>::infinity();
    expectPrecision(values, hookscope::StatsCores::One, "float32, amax below 65504");
    expectPrecision(values, hookscope::StatsCores::Idle, "float32 over the cores");
    std::vector<double> wide(values.begin(), values.end());
    wide[n / 2] = 1e-300;
    expectPrecision(wide, hookscope::StatsCores::One, "float64");
    // Values from 0.5 to 2 and one at 70000: no value under any threshold (E4M3's is 0.3), so
    // only the overflow's test finds its block.
    std::uniform_real_distribution<double> magnitude(0.5, 2.0);
    for (auto& v : values) v = float((random() % 2 ? 1 : -1) * magnitude(random));
    values[n / 5 + 100] = 70000.0f;
    expectPrecision(values, hookscope::StatsCores::One, "float32, one overflow");
    std::vector<double> wideOver(values.begin(), values.end());
    expectPrecision(wideOver, hookscope::StatsCores::One, "float64, one overflow");
  }
}
