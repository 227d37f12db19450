// Statistics against values computed by hand, including NaN, Inf, integers and bools.
#include "TestSupport.h"

#include "run/TorchStats.h"

#include <ATen/ATen.h>

#include <limits>
#include <numeric>

using namespace hookscope;
using namespace hookscope::test;

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::int64_t total(const std::vector<std::int64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), std::int64_t(0));
}

TEST(TorchStatsTest, SmallFloatTensorByHand) {
  const auto s = computeTensorStats(at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).reshape({2, 2}), 4);
  EXPECT_EQ(s.shape, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(s.shapeString(), "2x2");
  EXPECT_EQ(s.dtype, "float32");
  EXPECT_EQ(s.numel, 4);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.std, std::sqrt(5.0 / 3.0));  // sample std: sum of squared deviations 5, n-1 = 3
  EXPECT_DOUBLE_EQ(s.l2norm, std::sqrt(30.0));
  EXPECT_DOUBLE_EQ(s.zeroFraction, 0);
  EXPECT_EQ(s.nanCount, 0);
  EXPECT_EQ(s.infCount, 0);
  EXPECT_EQ(s.histogram, (std::vector<std::int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(s.edges(), (std::vector<double>{1, 1.75, 2.5, 3.25, 4}));
}

TEST(TorchStatsTest, NonFiniteValuesAreCountedNotFoldedIn) {
  const auto s = computeTensorStats(at::tensor({0.0, kNan, kInf, -kInf, 2.0}), 2);
  EXPECT_EQ(s.dtype, "float64");
  EXPECT_EQ(s.numel, 5);
  EXPECT_EQ(s.nanCount, 1);
  EXPECT_EQ(s.infCount, 2);
  EXPECT_TRUE(s.hasNonFinite());
  EXPECT_DOUBLE_EQ(s.min, 0);
  EXPECT_DOUBLE_EQ(s.max, 2);
  EXPECT_DOUBLE_EQ(s.mean, 1);
  EXPECT_DOUBLE_EQ(s.std, std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(s.l2norm, 2);
  EXPECT_DOUBLE_EQ(s.zeroFraction, 0.2);
  EXPECT_EQ(total(s.histogram), 2);  // only the finite values
}

TEST(TorchStatsTest, AllNanStillYieldsACapture) {
  const auto s = computeTensorStats(at::full({3, 2}, kNan, at::kFloat));
  EXPECT_EQ(s.numel, 6);
  EXPECT_EQ(s.nanCount, 6);
  EXPECT_TRUE(std::isnan(s.min));
  EXPECT_TRUE(std::isnan(s.max));
  EXPECT_TRUE(std::isnan(s.mean));
  // No spread and no norm to show, not 0 (which read as a vanishing gradient).
  EXPECT_TRUE(std::isnan(s.std));
  EXPECT_TRUE(std::isnan(s.l2norm));
  EXPECT_TRUE(std::isnan(s.amax));
  EXPECT_EQ(s.f16Overflow + s.f16Underflow + s.e4m3Underflow + s.e5m2Underflow, 0);
  EXPECT_EQ(s.histogram.size(), std::size_t(kDefaultHistogramBins));
  EXPECT_EQ(total(s.histogram), 0);
  // An empty tensor keeps a norm of 0.
  const auto empty = computeTensorStats(at::zeros({0, 3}));
  EXPECT_EQ(empty.std, 0.0);
  EXPECT_EQ(empty.l2norm, 0.0);
}

TEST(TorchStatsTest, IntegerAndBoolTensors) {
  const auto ints = computeTensorStats(at::tensor({1, 1, 2, 0}, at::kLong), 2);
  EXPECT_EQ(ints.dtype, "int64");
  EXPECT_DOUBLE_EQ(ints.mean, 1);
  EXPECT_DOUBLE_EQ(ints.max, 2);
  EXPECT_DOUBLE_EQ(ints.zeroFraction, 0.25);
  EXPECT_DOUBLE_EQ(ints.l2norm, std::sqrt(6.0));
  const auto bools = computeTensorStats(at::tensor({1, 0, 1}).to(at::kBool), 2);
  EXPECT_EQ(bools.dtype, "bool");
  EXPECT_DOUBLE_EQ(bools.mean, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(bools.zeroFraction, 1.0 / 3.0);
  EXPECT_EQ(bools.histogram, (std::vector<std::int64_t>{1, 2}));
}

TEST(TorchStatsTest, NonFiniteValuesInsideLargeTensorsFallBackToTheCarefulScan) {
  at::manual_seed(4);
  at::Tensor t = at::randn({300000});
  t[1000] = kNan;
  t[200000] = kInf;
  t[250000] = -kInf;
  const auto s = computeTensorStats(t, 16);
  const at::Tensor finite = t.index({at::isfinite(t)}).to(at::kDouble);
  EXPECT_EQ(s.nanCount, 1);
  EXPECT_EQ(s.infCount, 2);
  EXPECT_DOUBLE_EQ(s.min, finite.min().item<double>());
  EXPECT_DOUBLE_EQ(s.max, finite.max().item<double>());
  EXPECT_TRUE(closeRel(s.mean, finite.mean().item<double>(), 1e-6, 1.0));
  EXPECT_TRUE(closeRel(s.l2norm, finite.norm().item<double>(), 1e-7));
  EXPECT_EQ(total(s.histogram), finite.numel());
  // Values whose squares overflow float are still summed (in double).
  const auto big = computeTensorStats(at::full({2048}, 1e30f), 4);
  EXPECT_TRUE(closeRel(big.l2norm, 1e30 * std::sqrt(2048.0), 1e-6));
  EXPECT_EQ(big.infCount, 0);
}

TEST(TorchStatsTest, ConstantTensorGetsAUnitWideHistogram) {
  const auto s = computeTensorStats(at::full({10}, 3.0f), 4);
  EXPECT_DOUBLE_EQ(s.std, 0);
  EXPECT_DOUBLE_EQ(s.histLow, 2.5);
  EXPECT_DOUBLE_EQ(s.histHigh, 3.5);
  EXPECT_EQ(total(s.histogram), 10);
}

TEST(TorchStatsTest, LargeNonContiguousTensorMatchesTorch) {
  at::manual_seed(3);
  // Large enough for the parallel path, with an offset that punishes naive variance.
  const at::Tensor base = at::randn({1000, 2000}) * 0.01 + 1000.0;
  const at::Tensor t = base.t();
  ASSERT_FALSE(t.is_contiguous());
  const auto s = computeTensorStats(t, 64);
  const at::Tensor d = t.to(at::kDouble);
  EXPECT_TRUE(closeRel(s.mean, d.mean().item<double>(), 1e-12));
  EXPECT_TRUE(closeRel(s.std, d.std().item<double>(), 1e-9));
  // float32 is summed in float over blocks of 1024, then in double (see scanRangeFast in StatsKernels.cpp).
  EXPECT_TRUE(closeRel(s.l2norm, d.norm().item<double>(), 1e-7));
  EXPECT_DOUBLE_EQ(s.min, d.min().item<double>());
  EXPECT_DOUBLE_EQ(s.max, d.max().item<double>());
  EXPECT_EQ(total(s.histogram), t.numel());
  // Same counts as torch.histc over [min, max].
  const at::Tensor histc = at::histc(d, 64, s.min, s.max).to(at::kLong);
  for (int i = 0; i < 64; ++i) {
    EXPECT_NEAR(double(s.histogram[std::size_t(i)]), histc[i].item<double>(), 2) << "bin " << i;
  }
}

} // namespace

namespace {

// The kernel's binning written with ATen's own float ops: bin = min((v - low) * scale, bins - 1),
// both steps rounded in float32, the way the kernel computes it.
std::vector<std::int64_t> referenceHistogram(const at::Tensor& t, const TensorStats& s, int bins) {
  const at::Tensor finite = t.index({at::isfinite(t)});
  const float low = float(s.histLow);
  const float scale = float(double(bins) / (s.histHigh - s.histLow));
  const at::Tensor at = ((finite - low) * scale).clamp(0, float(bins - 1)).to(at::kLong);
  const at::Tensor counts = at::bincount(at, {}, bins);
  return std::vector<std::int64_t>(counts.data_ptr<std::int64_t>(), counts.data_ptr<std::int64_t>() + bins);
}

} // namespace

TEST(TorchStatsTest, SplittingOverCoresGivesTheSameStatistics) {
  at::manual_seed(5);
  // ReLU-like (half exact zeros), large enough to be split, with a ragged tail.
  const at::Tensor t = at::relu(at::randn({1 << 21 | 12345}));
  const auto split = computeTensorStats(t, 64, StatsCores::Idle);
  const auto one = computeTensorStats(t, 64, StatsCores::One);
  EXPECT_EQ(split.histogram, one.histogram);
  EXPECT_EQ(split.histogram, referenceHistogram(t, split, 64));
  EXPECT_DOUBLE_EQ(split.min, one.min);
  EXPECT_DOUBLE_EQ(split.max, one.max);
  EXPECT_DOUBLE_EQ(split.zeroFraction, one.zeroFraction);
  // Parts hold whole blocks, so only the order of adding block sums in double differs.
  EXPECT_TRUE(closeRel(split.mean, one.mean, 1e-13));
  EXPECT_TRUE(closeRel(split.std, one.std, 1e-13));
  EXPECT_TRUE(closeRel(split.l2norm, one.l2norm, 1e-13));
  const at::Tensor d = t.to(at::kDouble);
  EXPECT_TRUE(closeRel(split.l2norm, d.norm().item<double>(), 1e-7));
  EXPECT_DOUBLE_EQ(split.zeroFraction, (t == 0).sum().item<double>() / double(t.numel()));
}

TEST(TorchStatsTest, HistogramBinsEveryValueLikeTheFloatFormula) {
  at::manual_seed(6);
  for (const std::int64_t n : {std::int64_t(1000), std::int64_t(40000), std::int64_t(600001)}) {
    at::Tensor t = at::randn({n}) * 3.0 + 1.0;
    for (int bins : {7, 64, 100}) {
      const auto s = computeTensorStats(t, bins);
      EXPECT_EQ(s.histogram, referenceHistogram(t, s, bins)) << "numel " << n << ", " << bins << " bins";
    }
    // Non-finite values take the careful path and are left out of the bins.
    t[n / 3] = kNan;
    t[n / 2] = -kInf;
    const auto s = computeTensorStats(t, 64);
    EXPECT_EQ(s.histogram, referenceHistogram(t, s, 64)) << "numel " << n << " with NaN and Inf";
  }
}
