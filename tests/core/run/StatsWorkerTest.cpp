// The statistics worker: copies a captured tensor only where an in-place op could change it
// before its statistics are computed.
#include "TestSupport.h"

#include "run/StatsWorker.h"
#include "run/TorchStats.h"

#include <ATen/ATen.h>

using namespace hookscope;

namespace {

const SeriesKey kKey{"bn", 0, CaptureKind::Activation, 0};

// Submits a fresh tensor at `step`, then overwrites it in place at once, as ReLU(inplace=True)
// does to BatchNorm's output. Returns the statistics of the values the hook saw.
TensorStats submitThenOverwrite(StatsWorker& worker, std::int64_t step) {
  at::Tensor t = at::arange(1000, at::kFloat).mul_(0.01).add_(double(step));
  const TensorStats seen = computeTensorStats(t, 64);
  worker.submit(step, kKey, t, 64);
  t.fill_(-5);
  return seen;
}

// The store holds, for `step`, exactly the statistics the hook's tensor had.
void expectStoredAsSeen(const CaptureStore& store, std::int64_t step, const TensorStats& seen) {
  SeriesPoint point;
  ASSERT_TRUE(store.pointAt(kKey, step, &point));
  ASSERT_EQ(point.step, step);
  EXPECT_EQ(point.stats.min, seen.min);
  EXPECT_EQ(point.stats.max, seen.max);
  EXPECT_EQ(point.stats.mean, seen.mean);
  EXPECT_EQ(point.stats.l2norm, seen.l2norm);
  EXPECT_EQ(point.stats.histogram, seen.histogram);
}

TEST(StatsWorkerTest, ASeriesTouchedInPlaceIsCopiedEveryStep) {
  auto store = std::make_shared<CaptureStore>();
  StatsWorker worker(store);
  for (std::int64_t step = 0; step < 4; ++step) {
    const TensorStats seen = submitThenOverwrite(worker, step);
    worker.drain();
    const auto end = worker.endStep();
    EXPECT_TRUE(end.suspect.empty()) << "a copied capture is never in doubt";
    EXPECT_EQ(end.copied, 1);
    EXPECT_EQ(end.shared, 0);
    expectStoredAsSeen(*store, step, seen);
  }
}

TEST(StatsWorkerTest, AnUntouchedSeriesIsSharedAndALaterTouchDropsThatCapture) {
  auto store = std::make_shared<CaptureStore>();
  StatsWorker worker(store);
  // Step 0: copied, never touched, so the series is shared from step 1 on.
  at::Tensor kept = at::ones({100});
  worker.submit(0, kKey, kept, 64);
  worker.drain();
  EXPECT_TRUE(worker.endStep().suspect.empty());
  // Step 1: shared, and then touched. Its statistics may have seen either values: dropped.
  submitThenOverwrite(worker, 1);
  worker.drain();
  const auto end = worker.endStep();
  EXPECT_EQ(end.shared, 1);
  const auto& suspect = end.suspect;
  ASSERT_EQ(suspect.size(), 1u);
  EXPECT_EQ(suspect[0].first, 1);
  EXPECT_EQ(suspect[0].second, kKey);
  // Step 2: copied again, so the overwrite no longer matters.
  const TensorStats seen = submitThenOverwrite(worker, 2);
  worker.drain();
  const auto after = worker.endStep();
  EXPECT_TRUE(after.suspect.empty());
  EXPECT_EQ(after.copied, 1);
  expectStoredAsSeen(*store, 2, seen);
}

TEST(StatsWorkerTest, ATensorChangedOnlyAfterItsStepIsStillShared) {
  auto store = std::make_shared<CaptureStore>();
  StatsWorker worker(store);
  at::Tensor t = at::ones({100});
  for (std::int64_t step = 0; step < 3; ++step) {
    worker.submit(step, kKey, t, 64);
    worker.drain();
    const auto end = worker.endStep();
    EXPECT_TRUE(end.suspect.empty());
    EXPECT_EQ(end.shared, step > 0 ? 1 : 0) << "step " << step;
    t.add_(1);  // between steps: a change after the step does not matter
  }
  EXPECT_EQ(store->series(kKey).size(), 3u);
}

TEST(StatsWorkerTest, ATensorThatMayNotBeSharedIsAlwaysCopied) {
  auto store = std::make_shared<CaptureStore>();
  StatsWorker worker(store);
  at::Tensor t = at::ones({100});
  for (std::int64_t step = 0; step < 3; ++step) {
    worker.submit(step, kKey, t, 64, /*mayShare=*/false);
    worker.drain();
    const auto end = worker.endStep();
    EXPECT_EQ(end.copied, 1) << "step " << step;
    EXPECT_EQ(end.shared, 0) << "step " << step;
  }
}

} // namespace
