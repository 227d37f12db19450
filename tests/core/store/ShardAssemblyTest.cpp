// A sharded tensor's whole statistics from its ranks' rows: each shard binned by
// computeRawStatsInRange between the whole's edges, added up by the store (ShardAssembly), equal
// to computeRawStats of the whole tensor.
#include "TestSupport.h"

#include "kernels/RawStats.h"
#include "store/CaptureStore.h"

#include <cmath>
#include <limits>
#include <random>

using namespace hookscope;

namespace {

// float64 values: the kernel sums them in double whatever their count, so what the tolerances below
// compare is the store's arithmetic (float32 values are summed in float lanes, grouped by where
// each shard starts: their whole differs from the sum of their shards by float's rounding).
std::vector<double> values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.5, 2.0);
  std::vector<double> v(n);
  for (auto& x : v) x = normal(gen);
  return v;
}

TensorStats shardRow(const std::vector<double>& whole, std::size_t begin, std::size_t end, const TensorStats& full) {
  TensorStats s;
  const SharedRange range{full.histLow, full.histHigh, full.amax};
  computeRawStatsInRange(whole.data() + begin, std::int64_t(end - begin), 64, StatsCores::One, range, s);
  s.shape = {std::int64_t(end - begin)};
  s.dtype = "float64";
  s.numel = std::int64_t(end - begin);
  return s;
}

TensorStats wholeRow(const std::vector<double>& v) {
  TensorStats s;
  computeRawStats(v.data(), std::int64_t(v.size()), 64, StatsCores::One, s);
  s.shape = {std::int64_t(v.size())};
  s.dtype = "float64";
  s.numel = std::int64_t(v.size());
  return s;
}

} // namespace

TEST(ShardAssemblyTest, UnevenShardsAddUpToTheWholeTensor) {
  auto v = values(1001, 7);
  v[5] = std::numeric_limits<double>::quiet_NaN();
  v[700] = std::numeric_limits<double>::infinity();
  v[3] = 0.0;
  const TensorStats full = wholeRow(v);
  CaptureStore store;
  const SeriesKey key{"fc1.weight", 0, CaptureKind::Param, 0, 0};
  const std::size_t cuts[] = {0, 334, 668, 1001};  // as fully_shard cuts 1001 rows over 3 ranks
  for (int rank = 0; rank < 3; ++rank) {
    SeriesKey mine = key;
    mine.rank = rank;
    // Ranks arrive in any order; the whole appears with the last part only.
    EXPECT_EQ(store.series(SeriesKey{key.module, 0, key.kind, 0, kWholeRank}).size(), 0u);
    store.addShard(2, mine, shardRow(v, cuts[rank], cuts[rank + 1], full), ShardPart{rank, 3, {1001}});
  }
  const auto points = store.series(SeriesKey{key.module, 0, key.kind, 0, kWholeRank});
  ASSERT_EQ(points.size(), 1u);
  const TensorStats& got = points[0].stats;
  EXPECT_EQ(got.shape, std::vector<std::int64_t>{1001});
  EXPECT_EQ(got.numel, 1001);
  EXPECT_EQ(got.min, full.min);
  EXPECT_EQ(got.max, full.max);
  EXPECT_EQ(got.amax, full.amax);
  EXPECT_EQ(got.histogram, full.histogram);
  EXPECT_EQ(got.histLow, full.histLow);
  EXPECT_EQ(got.histHigh, full.histHigh);
  EXPECT_EQ(got.nanCount, 1);
  EXPECT_EQ(got.infCount, 1);
  EXPECT_EQ(got.e4m3Underflow, full.e4m3Underflow);
  EXPECT_EQ(got.f16Underflow, full.f16Underflow);
  EXPECT_NEAR(got.mean, full.mean, 1e-12 * std::fabs(full.mean) + 1e-15);
  EXPECT_NEAR(got.std, full.std, 1e-9 * full.std);
  EXPECT_NEAR(got.l2norm, full.l2norm, 1e-9 * full.l2norm);
  EXPECT_DOUBLE_EQ(got.zeroFraction, full.zeroFraction);
  // The whole is no process of the job.
  EXPECT_EQ(store.ranks(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(store.shardProblem(), "");
}

TEST(ShardAssemblyTest, AShardWithoutFiniteValuesAndShardsThatDoNotFit) {
  std::vector<double> v = values(10, 3);
  for (std::size_t i = 6; i < 10; ++i) v[i] = std::numeric_limits<double>::quiet_NaN();
  const TensorStats full = wholeRow(v);
  CaptureStore store;
  const SeriesKey a{"w", 0, CaptureKind::ParamGrad, 0, 0};
  SeriesKey b = a;
  b.rank = 1;
  store.addShard(0, a, shardRow(v, 0, 6, full), ShardPart{0, 2, {10}});
  store.addShard(0, b, shardRow(v, 6, 10, full), ShardPart{1, 2, {10}});
  const auto whole = store.series(SeriesKey{"w", 0, CaptureKind::ParamGrad, 0, kWholeRank});
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].stats.nanCount, 4);
  EXPECT_EQ(whole[0].stats.histogram, full.histogram);
  EXPECT_NEAR(whole[0].stats.std, full.std, 1e-9 * full.std);
  // Edges that differ (a shard binned in its own range) make no whole, and say why.
  TensorStats own = shardRow(v, 0, 6, full);
  own.histLow -= 1.0;
  store.addShard(1, a, own, ShardPart{0, 2, {10}});
  store.addShard(1, b, shardRow(v, 6, 10, full), ShardPart{1, 2, {10}});
  EXPECT_EQ(store.series(SeriesKey{"w", 0, CaptureKind::ParamGrad, 0, kWholeRank}).size(), 1u);
  EXPECT_NE(store.shardProblem().find("different edges"), std::string::npos) << store.shardProblem();
  // Parts that hold fewer values than the whole's shape: no whole either.
  store.addShard(2, a, shardRow(v, 0, 6, full), ShardPart{0, 2, {12}});
  store.addShard(2, b, shardRow(v, 6, 10, full), ShardPart{1, 2, {12}});
  EXPECT_EQ(store.series(SeriesKey{"w", 0, CaptureKind::ParamGrad, 0, kWholeRank}).size(), 1u);
  EXPECT_NE(store.shardProblem().find("10 values of 12"), std::string::npos) << store.shardProblem();
  // Every rank's own row is kept, whole or not.
  EXPECT_EQ(store.series(a).size(), 3u);
}
