// The store: queries, and thinning that keeps first and last steps under the cap.
#include "TestSupport.h"

#include "store/CaptureStore.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <thread>

using namespace hookscope;

namespace {

TensorStats statsOf(double value, int bins = 64) {
  TensorStats s;
  s.shape = {4};
  s.dtype = "float32";
  s.numel = 4;
  s.min = s.max = s.mean = value;
  s.l2norm = 2 * value;
  s.histogram.assign(std::size_t(bins), 1);
  return s;
}

TEST(CaptureStoreTest, SeriesAreKeyedAndQueriedByStepRange) {
  CaptureStore store;
  const SeriesKey a{"fc1", 0, CaptureKind::Activation, 0};
  const SeriesKey b{"fc1", 1, CaptureKind::Activation, 0};
  const SeriesKey g{"fc1", 0, CaptureKind::Gradient, 0};
  for (int step = 0; step < 5; ++step) {
    store.add(step, a, statsOf(step));
    store.add(step, g, statsOf(-step));
  }
  store.add(2, b, statsOf(7));
  EXPECT_EQ(store.seriesKeys().size(), 3u);
  EXPECT_EQ(store.captureCount(), 11u);
  const auto range = store.series(a, 1, 3);
  ASSERT_EQ(range.size(), 3u);
  EXPECT_EQ(range.front().step, 1);
  EXPECT_DOUBLE_EQ(range.back().stats.mean, 3);
  SeriesPoint point;
  ASSERT_TRUE(store.pointAt(b, 4, &point));  // the newest at or before step 4
  EXPECT_EQ(point.step, 2);
  EXPECT_FALSE(store.pointAt(b, 1, &point));
  EXPECT_TRUE(store.series(SeriesKey{"nope", 0, CaptureKind::Activation, 0}).empty());
  EXPECT_EQ(store.steps(), (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  // One statistic from a step on: what plots read to append only new steps.
  const auto norms = store.values(g, &TensorStats::l2norm, 3);
  ASSERT_EQ(norms.size(), 2u);
  EXPECT_EQ(norms.front().step, 3);
  EXPECT_DOUBLE_EQ(norms.front().value, -6);
  EXPECT_DOUBLE_EQ(norms.back().value, -8);
  EXPECT_EQ(store.values(g, &TensorStats::l2norm).size(), 5u);
  EXPECT_TRUE(store.values(g, &TensorStats::l2norm, 5).empty());
}

TEST(CaptureStoreTest, ManySeriesWindowsAndAStepsPointsAreReadAtOnce) {
  CaptureStore store;
  std::vector<SeriesKey> keys;
  for (const char* module : {"a", "b", "c", "d"}) keys.push_back({module, 0, CaptureKind::Gradient, 0});
  for (int step = 0; step < 6; ++step) {
    for (std::size_t k = 0; k < keys.size(); ++k) {
      if (k == 2 && step != 5) continue;  // "c" only at step 5
      store.add(step, keys[k], statsOf(10.0 * double(k) + step));
    }
  }
  // Series "a", "c", "cc" (not in the store) and "d", over steps 2 <= step < 5.
  const SeriesKey missing{"cc", 0, CaptureKind::Gradient, 0};
  std::vector<double> values{99};
  std::vector<std::size_t> ends{99};
  store.valuesBetween({&keys[0], &keys[2], &missing, &keys[3]}, &TensorStats::l2norm, 2, 5, &values, &ends);
  EXPECT_EQ(ends, (std::vector<std::size_t>{3, 3, 3, 6}));
  EXPECT_EQ(values, (std::vector<double>{4, 6, 8, 64, 66, 68}));
  // Out of the store's order, and missing past the last: each still its own.
  store.valuesBetween({&keys[3], &keys[0]}, &TensorStats::l2norm, 4, 6, &values, &ends);
  EXPECT_EQ(ends, (std::vector<std::size_t>{2, 4}));
  EXPECT_EQ(values, (std::vector<double>{68, 70, 8, 10}));
  const SeriesKey last{"z", 0, CaptureKind::Gradient, 0};
  store.valuesBetween({&last, &keys[1]}, &TensorStats::l2norm, 5, 6, &values, &ends);
  EXPECT_EQ(ends, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(values, (std::vector<double>{30}));
  // A step's points, without the histograms' counts of the series not asked for.
  std::vector<std::pair<SeriesKey, SeriesPoint>> points(1);
  store.pointsAt(5, &points, [](const SeriesKey& key) { return key.module == "b"; });
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[1].first.module, "b");
  EXPECT_EQ(points[1].second.stats.histogram.size(), 64u);
  EXPECT_TRUE(points[0].second.stats.histogram.empty());
  EXPECT_DOUBLE_EQ(points[2].second.stats.mean, 25);
  SeriesPoint kept;
  ASSERT_TRUE(store.pointAt(keys[0], 5, &kept));
  EXPECT_EQ(kept.stats.histogram.size(), 64u);  // the store's own counts are still there
}

TEST(CaptureStoreTest, ParameterSeriesBelongToTheModuleThatOwnsThem) {
  EXPECT_EQ(ownerModule({"layer1.0.conv1", 0, CaptureKind::Activation, 0}), "layer1.0.conv1");
  EXPECT_EQ(ownerModule({"layer1.0.conv1", 0, CaptureKind::Gradient, 0}), "layer1.0.conv1");
  EXPECT_EQ(ownerModule({"layer1.0.conv1.weight", 0, CaptureKind::Param, 0}), "layer1.0.conv1");
  EXPECT_EQ(ownerModule({"fc1.bias", 0, CaptureKind::ParamGrad, 0}), "fc1");
  EXPECT_EQ(ownerModule({"fc1.bias", 0, CaptureKind::Update, 0}), "fc1");
  EXPECT_EQ(ownerModule({"scale", 0, CaptureKind::Param, 0}), "") << "a parameter of the root";
  EXPECT_EQ(ownerModule({"", 0, CaptureKind::Activation, 0}), "");
}

TEST(CaptureStoreTest, RemovingOneCaptureLeavesTheOthersAndTheCounts) {
  CaptureStore store;
  const SeriesKey a{"fc1", 0, CaptureKind::Activation, 0};
  const SeriesKey g{"fc1", 0, CaptureKind::Gradient, 0};
  for (int step = 0; step < 3; ++step) {
    store.add(step, a, statsOf(step));
    store.add(step, g, statsOf(-step));
  }
  const std::size_t bytes = store.bytesUsed();
  const std::uint64_t version = store.version();
  EXPECT_TRUE(store.remove(2, a));
  EXPECT_FALSE(store.remove(2, a)) << "already gone";
  EXPECT_FALSE(store.remove(7, g)) << "no such step";
  EXPECT_FALSE(store.remove(0, {"nope", 0, CaptureKind::Activation, 0}));
  EXPECT_GT(store.version(), version);
  EXPECT_EQ(store.bytesUsed(), bytes - CaptureStore::pointBytes(statsOf(2)));
  EXPECT_EQ(store.captureCount(), 5u);
  ASSERT_EQ(store.series(a).size(), 2u);
  EXPECT_EQ(store.series(a).back().step, 1);
  EXPECT_EQ(store.series(g).size(), 3u);
  EXPECT_EQ(store.steps(), (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_TRUE(store.remove(2, g));
  EXPECT_EQ(store.steps(), (std::vector<std::int64_t>{0, 1})) << "a step with no captures left is gone";
}

TEST(CaptureStoreTest, ThinningKeepsFirstAndLastStepsAndRespectsTheCap) {
  const std::size_t perPoint = CaptureStore::pointBytes(statsOf(0));
  const std::size_t cap = perPoint * 60;  // room for about 60 of 200 steps of 2 series
  CaptureStore store(cap);
  const SeriesKey a{"conv1", 0, CaptureKind::Activation, 0};
  const SeriesKey g{"conv1", 0, CaptureKind::Gradient, 0};
  for (int step = 0; step < 200; ++step) {
    store.add(step, a, statsOf(step));
    store.add(step, g, statsOf(step));
    store.addScalar(step, "loss", 1.0 / (step + 1));
    EXPECT_LE(store.bytesUsed(), cap) << "over the cap after step " << step;
  }
  const auto steps = store.steps();
  EXPECT_LT(steps.size(), 200u);
  EXPECT_GT(steps.size(), 10u);
  EXPECT_EQ(steps.front(), 0);
  EXPECT_EQ(steps.back(), 199);
  // Every series still holds the same steps; scalars are never thinned.
  EXPECT_EQ(store.series(a).size(), steps.size());
  EXPECT_EQ(store.series(g).size(), steps.size());
  EXPECT_EQ(store.scalars("loss").size(), 200u);
  // The thinning is recorded, never silent.
  const auto events = store.thinning();
  ASSERT_FALSE(events.empty());
  for (const auto& e : events) {
    EXPECT_LT(e.stepsAfter, e.stepsBefore);
    EXPECT_LT(e.bytesAfter, e.bytesBefore);
  }
  // Evenly: one stride between all kept steps but the newest, which is always kept.
  const std::int64_t stride = store.stride();
  EXPECT_EQ(stride, events.back().stride);
  EXPECT_GT(stride, 1);
  for (std::size_t i = 1; i + 1 < steps.size(); ++i) EXPECT_EQ(steps[i] - steps[i - 1], stride);
  EXPECT_LE(steps.back() - steps[steps.size() - 2], stride);
}

TEST(CaptureStoreTest, AStepLeftOutUnderTheCapIsShownAsTheStepKeptBeforeIt) {
  CaptureStore store(CaptureStore::pointBytes(statsOf(0)) * 60);
  const SeriesKey a{"conv1", 0, CaptureKind::Activation, 0};
  EXPECT_EQ(store.stepAtOrBefore(5), -1) << "an empty store";
  for (int step = 3; step < 200; ++step) store.add(step, a, statsOf(step));
  ASSERT_GT(store.stride(), 1);
  EXPECT_EQ(store.stepAtOrBefore(2), -1) << "before the first step";
  EXPECT_EQ(store.stepAtOrBefore(3), 3);
  EXPECT_EQ(store.stepAtOrBefore(199), 199) << "the newest is kept";
  EXPECT_EQ(store.stepAtOrBefore(1000), 199);
  // Live: the next step's first capture takes the newest off the grid (first + k * stride) away;
  // a view of that step then shows the step kept before it.
  std::int64_t newest = 199;
  while ((newest - 3) % store.stride() == 0) {
    ++newest;
    store.add(newest, a, statsOf(double(newest)));
  }
  store.add(newest + 1, a, statsOf(double(newest + 1)));
  const auto steps = store.steps();
  ASSERT_EQ(std::count(steps.begin(), steps.end(), newest), 0) << newest << " was off the grid";
  const std::int64_t before = *std::prev(std::lower_bound(steps.begin(), steps.end(), newest));
  EXPECT_EQ(store.stepAtOrBefore(newest), before);
  EXPECT_EQ((newest - 3) / store.stride() * store.stride() + 3, before);
  for (std::int64_t step : steps) EXPECT_EQ(store.stepAtOrBefore(step), step);
}

TEST(CaptureStoreTest, AModuleCalledThousandsOfTimesPerStepStaysUnderTheCap) {
  const std::size_t cap = 256 * 1024;
  CaptureStore store(cap);
  const int calls = 2000;  // 2,000 calls x ~700 bytes: one step alone is over five times the cap
  for (int step = 0; step < 4; ++step) {
    for (int call = 0; call < calls; ++call) {
      store.add(step, {"cell", call, CaptureKind::Activation, 0}, statsOf(call));
      ASSERT_LE(store.bytesUsed(), cap) << "step " << step << " call " << call;
    }
  }
  const auto thinning = store.thinning();
  ASSERT_FALSE(thinning.empty());
  const std::int64_t callStride = thinning.back().callStride;
  EXPECT_GT(callStride, 1) << "calls were thinned, and that is recorded";
  // What is kept: calls 0, k, 2k, ... of every kept step, the last step among them.
  std::set<std::int64_t> steps;
  for (const auto& key : store.seriesKeys()) {
    EXPECT_EQ(key.call % callStride, 0) << key.call;
    for (const auto& p : store.series(key)) steps.insert(p.step);
  }
  EXPECT_TRUE(steps.count(3));
  EXPECT_TRUE(store.pointAt({"cell", 0, CaptureKind::Activation, 0}, 3, nullptr));
}

TEST(CaptureStoreTest, AlertsCountAgainstTheCap) {
  CaptureStore store(64 * 1024);
  for (int step = 0; step < 40; ++step) store.add(step, {"fc", 0, CaptureKind::Activation, 0}, statsOf(step));
  const std::size_t before = store.bytesUsed();
  ASSERT_LT(before, 64u * 1024);
  store.setAlertBytes(48 * 1024);
  EXPECT_EQ(store.bytesUsed() >= 48u * 1024, true);
  EXPECT_LE(store.bytesUsed(), 64u * 1024) << "the captures were thinned to make room";
  EXPECT_FALSE(store.thinning().empty());
}

TEST(CaptureStoreTest, LoweringTheCapThinsAtOnce) {
  CaptureStore store;
  const SeriesKey a{"fc", 0, CaptureKind::Activation, 0};
  for (int step = 0; step < 100; ++step) store.add(step, a, statsOf(step));
  EXPECT_TRUE(store.thinning().empty());
  const auto before = store.version();
  store.setCapBytes(store.bytesUsed() / 3);
  EXPECT_LE(store.bytesUsed(), store.capBytes());
  EXPECT_GT(store.version(), before);
  EXPECT_EQ(store.steps().front(), 0);
  EXPECT_EQ(store.steps().back(), 99);
  store.clear();
  EXPECT_EQ(store.captureCount(), 0u);
  EXPECT_TRUE(store.thinning().empty());
}

TEST(CaptureStoreTest, ConcurrentWritersAndReaders) {
  CaptureStore store;
  std::thread writer([&] {
    for (int step = 0; step < 2000; ++step) store.add(step, {"a", 0, CaptureKind::Activation, 0}, statsOf(step));
  });
  std::thread other([&] {
    for (int step = 0; step < 2000; ++step) store.add(step, {"b", 0, CaptureKind::Gradient, 0}, statsOf(step));
  });
  std::size_t seen = 0;
  while (seen < 4000) seen = store.captureCount();
  writer.join();
  other.join();
  EXPECT_EQ(store.series({"a", 0, CaptureKind::Activation, 0}).size(), 2000u);
  EXPECT_EQ(store.series({"b", 0, CaptureKind::Gradient, 0}).size(), 2000u);
}

} // namespace
