// Two runs compared series by series: the first divergence in forward order, per-step firsts,
// what only one run holds, and what cannot be aligned said, not hidden.
#include "store/RunCompare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace hookscope;

namespace {

TensorStats stats(double mean, double std, double l2) {
  TensorStats s;
  s.numel = 100;
  s.mean = mean;
  s.std = std;
  s.l2norm = l2;
  s.histogram.assign(8, 1);
  return s;
}

SeriesKey key(const std::string& module, CaptureKind kind = CaptureKind::Activation, int rank = 0) {
  return SeriesKey{module, 0, kind, 0, rank};
}

// The model's order: a parent before its children ("" is the root).
const std::vector<std::string> kOrder = {"", "encoder", "encoder.0", "encoder.1", "head"};

} // namespace

TEST(RunCompareTest, TheFirstDivergenceIsTheEarliestStepAndTheFirstSeriesOfItsForwardPass) {
  CaptureStore a, b;
  for (int step = 0; step < 3; ++step) {
    for (const char* module : {"", "encoder", "encoder.0", "encoder.1", "head"}) {
      for (CaptureKind kind : {CaptureKind::Activation, CaptureKind::Gradient}) {
        a.add(step, key(module, kind), stats(1, 2, 3));
        // From step 1 every series differs: the root, which returns last, is not the first.
        b.add(step, key(module, kind), step == 0 ? stats(1, 2, 3) : stats(1.5, 2, 3));
      }
    }
  }
  const auto result = compareRuns(a, b, 1e-4, kOrder);
  ASSERT_TRUE(result.diverged());
  EXPECT_EQ(result.first.step, 1);
  EXPECT_EQ(result.first.key.module, "encoder.0");  // the first module to return
  EXPECT_EQ(result.first.key.kind, CaptureKind::Activation);
  EXPECT_EQ(result.first.statistic, "mean");
  EXPECT_EQ(result.first.a, 1);
  EXPECT_EQ(result.first.b, 1.5);
  ASSERT_EQ(result.steps.size(), 2u);
  EXPECT_EQ(result.steps[1].step, 2);
  EXPECT_EQ(result.stepsCompared, 3);
  EXPECT_EQ(result.seriesCompared, 10u);
  EXPECT_TRUE(result.onlyInA.empty() && result.onlyInB.empty() && result.notes.empty());
  ASSERT_EQ(result.moduleFirstStep.size(), 5u);
  for (const auto& [module, step] : result.moduleFirstStep) EXPECT_EQ(step, 1) << module;
}

TEST(RunCompareTest, OnlyGradientsDifferingPutsTheLastModuleFirst) {
  CaptureStore a, b;
  for (const char* module : {"encoder.0", "encoder.1", "head"}) {
    a.add(0, key(module), stats(1, 1, 1));
    b.add(0, key(module), stats(1, 1, 1));
    a.add(0, key(module, CaptureKind::Gradient), stats(0, 1, 1));
    b.add(0, key(module, CaptureKind::Gradient), stats(0, 1, 2));
  }
  const auto result = compareRuns(a, b, 1e-4, kOrder);
  ASSERT_TRUE(result.diverged());
  EXPECT_EQ(result.first.key.module, "head");  // backward begins at the output
  EXPECT_EQ(result.first.statistic, "l2norm");
}

TEST(RunCompareTest, WithinToleranceNaNAndTinyMeansAreTheSameRun) {
  EXPECT_FALSE(differs(1.0, 1.0 + 1e-6, 1e-4));
  EXPECT_TRUE(differs(1.0, 1.001, 1e-4));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(differs(nan, nan, 1e-4));
  EXPECT_TRUE(differs(nan, 1.0, 1e-4));
  EXPECT_FALSE(differs(INFINITY, INFINITY, 1e-4));
  EXPECT_TRUE(differs(INFINITY, -INFINITY, 1e-4));
  CaptureStore a, b;
  a.add(0, key("head"), stats(1e-9, 1, 5));
  b.add(0, key("head"), stats(2e-9, 1, 5));  // a mean of noise against a std of 1
  EXPECT_FALSE(compareRuns(a, b, 1e-4, kOrder).diverged());
  TensorStats bad = stats(1e-9, 1, 5);
  bad.nanCount = 1;
  b.add(1, key("head"), bad);
  a.add(1, key("head"), stats(1e-9, 1, 5));
  const auto result = compareRuns(a, b, 1e-4, kOrder);
  ASSERT_TRUE(result.diverged());
  EXPECT_EQ(result.first.statistic, "nan");
}

TEST(RunCompareTest, UnsharedSeriesStepsBinsAndRanksAreSaid) {
  CaptureStore a, b;
  a.add(0, key("encoder.0"), stats(1, 1, 1));
  a.add(1, key("encoder.0"), stats(1, 1, 1));
  a.add(0, key("only_a"), stats(1, 1, 1));
  TensorStats fewer = stats(1, 1, 1);
  fewer.histogram.assign(4, 2);
  b.add(0, key("encoder.0"), fewer);
  b.add(0, key("only_b", CaptureKind::Activation, 1), stats(1, 1, 1));
  const auto result = compareRuns(a, b, 1e-4, kOrder);
  EXPECT_FALSE(result.diverged());
  EXPECT_EQ(result.stepsCompared, 1);
  EXPECT_EQ(result.onlyInA, std::vector<std::string>{"activation only_a"});
  EXPECT_EQ(result.onlyInB, std::vector<std::string>{"activation only_b [rank 1]"});
  ASSERT_EQ(result.notes.size(), 3u);
  EXPECT_NE(result.notes[0].find("kept different steps (2 and 1"), std::string::npos) << result.notes[0];
  EXPECT_NE(result.notes[1].find("different ranks"), std::string::npos) << result.notes[1];
  EXPECT_NE(result.notes[2].find("different bins (8 and 4)"), std::string::npos) << result.notes[2];
}
