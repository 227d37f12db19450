// The check at each step's end of an attached process (StepGate): which armed rule pauses it
// there. Break on > anomaly pauses once per excursion (issue 57): at the step a series leaves its
// band, not again at each step it stays out; a second excursion, or another series leaving
// while the first is out, pauses again.
#include "links/StepGate.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

using namespace hookscope;

namespace {

TEST(StepGateTest, AnomalyPausesOncePerExcursion) {
  RuleSettings settings;
  StepGate gate;
  gate.setRules(settings, 0, {});
  EXPECT_TRUE(gate.setBreakRules(1u << unsigned(RuleKind::Anomaly), false));
  const SeriesKey first{"blocks.3.fc1", 0, CaptureKind::Activation, 0};
  const SeriesKey second{"blocks.3.fc2", 0, CaptureKind::Activation, 0};
  // `first` out of its band at steps 40-43 and again at 50; `second` at 42-44.
  const std::set<int> firstOut{40, 41, 42, 43, 50}, secondOut{42, 43, 44};
  CaptureStore store;
  std::vector<std::int64_t> paused;
  std::vector<std::string> pausedOn;
  int outSteps = 0;
  for (int step = 0; step < 60; ++step) {
    for (const auto& [key, out] : {std::pair{first, firstOut.count(step) > 0}, {second, secondOut.count(step) > 0}}) {
      TensorStats s;
      s.numel = 100;
      s.l2norm = (out ? 30.0 : 1.0) * (1 + 0.01 * (step % 3));
      s.std = s.l2norm / 10;
      store.add(step, key, s);
    }
    AttachedStep done;
    done.step = step;
    std::string reason;
    const StepAnswer answer = gate.check(store, {}, GapRecord{}, 0, &done, &reason);
    for (const auto& alert : done.alerts) outSteps += alert.rule == RuleKind::Anomaly;
    if (answer == StepAnswer::Go) {
      EXPECT_FALSE(done.breakAlert) << step;
      continue;
    }
    EXPECT_EQ(answer, StepAnswer::Pause);
    ASSERT_TRUE(done.breakAlert);
    paused.push_back(step);
    pausedOn.push_back(done.breakAlert->module);
    EXPECT_NE(reason.find("at step " + std::to_string(step) + " on anomaly"), std::string::npos) << reason;
  }
  // The rule fired at every step a series was out (8); the run paused at three of them.
  EXPECT_EQ(outSteps, 8);
  EXPECT_EQ(paused, (std::vector<std::int64_t>{40, 42, 50}));
  EXPECT_EQ(pausedOn, (std::vector<std::string>{"blocks.3.fc1", "blocks.3.fc2", "blocks.3.fc1"}));
}

TEST(StepGateTest, OtherArmedRulesPauseAtEveryStepTheyFire) {
  StepGate gate;
  gate.setRules(RuleSettings{}, 0, {});
  gate.setBreakRules(1u << unsigned(RuleKind::NonFinite), true);
  const SeriesKey key{"fc", 0, CaptureKind::Activation, 0};
  CaptureStore store;
  std::vector<std::int64_t> stopped;
  for (int step = 0; step < 6; ++step) {
    TensorStats s;
    s.numel = 100;
    s.l2norm = 1;
    s.nanCount = step >= 3 ? 1 : 0;
    store.add(step, key, s);
    AttachedStep done;
    done.step = step;
    std::string reason;
    const StepOrder order{{key}, {}};  // the forward reached it
    if (gate.check(store, order, GapRecord{}, 0, &done, &reason) == StepAnswer::Stop) stopped.push_back(step);
  }
  EXPECT_EQ(stopped, (std::vector<std::int64_t>{3, 4, 5}));
}

} // namespace
