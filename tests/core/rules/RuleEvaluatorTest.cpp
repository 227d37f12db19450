// Rules on real runs: NaN origin, dead units, exploding gradients; plateau on a store.
#include "TestSession.h"

#include "rules/RuleEvaluator.h"

using namespace hookscope;
using namespace hookscope::test;

namespace {

// Every module hooked for activations and gradients; each step is followed by the rules.
struct RuleRun : Session {
  RuleEvaluator rules;

  RuleRun(const std::string& file, RunConfig config) : Session(file) {
    if (!model) return;
    for (std::size_t i = 0; i < model->modules().size(); ++i) {
      model->setHooks(int(i), kindBit(CaptureKind::Activation) | kindBit(CaptureKind::Gradient));
    }
    rules.setModuleTypes(model->moduleTypes());
    configure(config);
  }
  std::vector<Alert> step() {
    StepResult result;
    Session::step(&result);
    return rules.evaluate(*store, result.step, runner->lastStepOrder());
  }
};

std::vector<Alert> ofRule(const std::vector<Alert>& alerts, RuleKind rule) {
  std::vector<Alert> result;
  for (const auto& a : alerts) {
    if (a.rule == rule) result.push_back(a);
  }
  return result;
}

TEST(RuleEvaluatorTest, NonFiniteNamesTheModuleWhereNanFirstAppears) {
  RunConfig config;
  config.inputSpecs = {"8x16"};
  config.optimizer = OptimizerKind::None;
  RuleRun run(fixture("nan_inject.pt"), config);
  ASSERT_TRUE(run.runner);
  const auto nonFinite = ofRule(run.step(), RuleKind::NonFinite);
  ASSERT_FALSE(nonFinite.empty());
  // Forward: 'bad' makes the NaN; fc2, act and the root only carry it on.
  EXPECT_EQ(nonFinite[0].module, "bad");
  EXPECT_EQ(nonFinite[0].kind, CaptureKind::Activation);
  EXPECT_NE(nonFinite[0].message.find("'bad'"), std::string::npos) << nonFinite[0].message;
  // The loss is NaN too, reported as such.
  bool loss = false;
  for (const auto& a : nonFinite) loss = loss || a.message.find("the loss") != std::string::npos;
  EXPECT_TRUE(loss);
}

TEST(RuleEvaluatorTest, DeadUnitsFireOnTheDeadReluOnly) {
  RunConfig config;
  config.inputSpecs = {"8x16"};
  RuleRun run(fixture("dead_relu.pt"), config);
  ASSERT_TRUE(run.runner);
  const auto dead = ofRule(run.step(), RuleKind::DeadUnits);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].module, "relu");
  EXPECT_DOUBLE_EQ(dead[0].value, 1.0);
}

TEST(RuleEvaluatorTest, RepeatsOfOneRuleOnOneSeriesAreOneAlertWithFirstLastAndCount) {
  RunConfig config;
  config.inputSpecs = {"8x16"};
  config.optimizer = OptimizerKind::None;
  RuleRun run(fixture("dead_relu.pt"), config);
  ASSERT_TRUE(run.runner);
  for (int i = 0; i < 5; ++i) {
    // Each step still reports its own firing (breakpoints act on it)...
    const auto dead = ofRule(run.step(), RuleKind::DeadUnits);
    ASSERT_EQ(dead.size(), 1u);
    EXPECT_EQ(dead[0].step, i);
  }
  // ...and the session keeps one alert for the five.
  const auto kept = ofRule(run.rules.alerts(), RuleKind::DeadUnits);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].step, 0);
  EXPECT_EQ(kept[0].lastStep, 4);
  EXPECT_EQ(kept[0].count, 5);
  const std::size_t bytes = run.rules.bytes();
  EXPECT_GT(bytes, 0u);
  run.step();
  EXPECT_EQ(run.rules.bytes(), bytes) << "a repeat takes no more memory";
}

TEST(RuleEvaluatorTest, TooLargeALearningRateExplodesThenGoesNonFinite) {
  RunConfig config;
  config.dataFile = fixture("teacher.data.pt");
  config.batchSize = 32;
  config.loss = LossKind::CrossEntropy;
  config.lr = 50;
  RuleRun run(sampleModel("small_mlp.pt"), config);
  ASSERT_TRUE(run.runner);
  std::int64_t exploded = -1, nonFinite = -1;
  for (int i = 0; i < 60 && (exploded < 0 || nonFinite < 0); ++i) {
    const auto fired = run.step();
    if (exploded < 0 && !ofRule(fired, RuleKind::ExplodingGradient).empty()) exploded = i;
    if (nonFinite < 0 && !ofRule(fired, RuleKind::NonFinite).empty()) nonFinite = i;
  }
  EXPECT_GE(exploded, 0) << "exploding_gradient never fired";
  EXPECT_GE(nonFinite, 0) << "non_finite never fired";
  EXPECT_LE(exploded, nonFinite) << "the explosion shows before the NaN";
}

TEST(RuleEvaluatorTest, LossPlateauAndThresholds) {
  RuleSettings settings;
  settings.plateauWindow = 5;
  RuleEvaluator rules(settings);
  CaptureStore flat;
  for (int step = 0; step < 12; ++step) flat.addScalar(step, "loss", 1.0);
  EXPECT_EQ(ofRule(rules.evaluate(flat, 11, {}), RuleKind::LossPlateau).size(), 1u);
  CaptureStore falling;
  RuleEvaluator fresh(settings);
  for (int step = 0; step < 12; ++step) falling.addScalar(step, "loss", 1.0 / (step + 1));
  EXPECT_TRUE(ofRule(fresh.evaluate(falling, 11, {}), RuleKind::LossPlateau).empty());
  EXPECT_EQ(parseRuleName("exploding_gradient"), RuleKind::ExplodingGradient);
  EXPECT_FALSE(parseRuleName("bogus"));
  const std::string csv = alertsCsv({{3, "fc1", CaptureKind::Gradient, RuleKind::ExplodingGradient, 2e3, "big, really"}});
  EXPECT_EQ(csv, "step,rank,module,kind,rule,value,message,last_step,count\n"
                 "3,0,fc1,gradient,exploding_gradient,2000,\"big, really\",3,1\n");
}

TensorStats precisionStats(std::int64_t overflow, std::int64_t e4m3, std::int64_t e5m2) {
  TensorStats s;
  s.numel = 1000;
  s.l2norm = 1;
  s.amax = overflow ? 7e4 : 3.0;
  s.f16Overflow = overflow;
  s.f16Underflow = 0;
  s.e4m3Underflow = e4m3;
  s.e5m2Underflow = e5m2;
  return s;
}

// fp16_overflow on any value past 65504 (threshold 0), fp8_underflow above 1% by the format of
// the kind (E4M3 forward, E5M2 for gradients), neither where the source did not measure them.
TEST(RuleEvaluatorTest, LowPrecisionRulesByKindAndThreshold) {
  CaptureStore store;
  store.add(0, {"fc1", 0, CaptureKind::Activation, 0}, precisionStats(1, 5, 0));    // one value overflows
  store.add(0, {"fc2", 0, CaptureKind::Activation, 0}, precisionStats(0, 20, 0));   // 2% flush in E4M3
  store.add(0, {"fc2", 0, CaptureKind::Gradient, 0}, precisionStats(0, 900, 5));    // E5M2: 0.5%, no alert
  store.add(0, {"fc3", 0, CaptureKind::Gradient, 0}, precisionStats(0, 900, 50));   // E5M2: 5%
  store.add(0, {"fc3.weight", 0, CaptureKind::Update, 0}, precisionStats(3, 900, 900));  // not a tensor of values
  TensorStats old = precisionStats(0, 0, 0);
  old.f16Overflow = old.f16Underflow = old.e4m3Underflow = old.e5m2Underflow = -1;  // an older script
  store.add(0, {"fc4", 0, CaptureKind::Activation, 0}, old);
  RuleEvaluator rules;
  const auto fired = rules.evaluate(store, 0, {});
  const auto overflow = ofRule(fired, RuleKind::Fp16Overflow);
  ASSERT_EQ(overflow.size(), 1u);
  EXPECT_EQ(overflow[0].module, "fc1");
  EXPECT_EQ(overflow[0].value, 0.001);
  EXPECT_NE(overflow[0].message.find("1 values (0.1%) of the activation of 'fc1' overflow float16"), std::string::npos)
      << overflow[0].message;
  const auto underflow = ofRule(fired, RuleKind::Fp8Underflow);
  ASSERT_EQ(underflow.size(), 2u);
  EXPECT_EQ(underflow[0].module, "fc2");
  EXPECT_EQ(underflow[0].kind, CaptureKind::Activation);
  EXPECT_NE(underflow[0].message.find("2% of the activation of 'fc2' would flush to zero in fp8 E4M3"), std::string::npos)
      << underflow[0].message;
  EXPECT_EQ(underflow[1].module, "fc3");
  EXPECT_NE(underflow[1].message.find("fp8 E5M2"), std::string::npos) << underflow[1].message;
  // Thresholds: overflow tolerated up to 1%, fp8 underflow up to 3%: nothing fires.
  RuleSettings settings;
  std::string error;
  ASSERT_TRUE(setRuleThreshold(settings, RuleKind::Fp16Overflow, 0.01, &error)) << error;
  ASSERT_TRUE(setRuleThreshold(settings, RuleKind::Fp8Underflow, 0.06, &error)) << error;
  EXPECT_FALSE(setRuleThreshold(settings, RuleKind::Fp8Underflow, 2.0, &error));
  EXPECT_NE(error.find("fraction in [0, 1]"), std::string::npos) << error;
  RuleEvaluator tolerant(settings);
  EXPECT_TRUE(ofRule(tolerant.evaluate(store, 0, {}), RuleKind::Fp16Overflow).empty());
  EXPECT_TRUE(ofRule(tolerant.evaluate(store, 0, {}), RuleKind::Fp8Underflow).empty());
  EXPECT_EQ(parseRuleName("fp8_underflow"), RuleKind::Fp8Underflow);
  EXPECT_NE(ruleNameList().find("rank_divergence, fp16_overflow, fp8_underflow, anomaly"), std::string::npos);
}

} // namespace

// An empty tensor has no update to judge: a rank whose shard of a sharded parameter holds no
// rows (5 rows over 4 ranks: 2, 2, 1, 0) fires no update_ratio; a real update of 0 still does.
TEST(RuleEvaluatorTest, UpdateRatioIgnoresAnEmptyShard) {
  CaptureStore store;
  TensorStats empty;
  empty.shape = {0, 7};
  empty.dtype = "float32";
  TensorStats still = empty;
  still.shape = {4, 7};
  still.numel = 28;
  store.add(0, {"fc.weight", 0, CaptureKind::Update, 0}, empty);
  store.add(0, {"fc.bias", 0, CaptureKind::Update, 0}, still);
  RuleEvaluator rules;
  const auto fired = ofRule(rules.evaluate(store, 0, {}), RuleKind::UpdateRatio);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].module, "fc.bias");
}

// A tensor holding NaN or Inf is non_finite's to report: no rule judges it by its finite part (a
// gradient 25% NaN and 75% zero is not a vanishing gradient of norm 0; an Inf update is not an
// update ratio; a gradient with Inf is not an explosion of its finite values).
TEST(RuleEvaluatorTest, NoRuleJudgesATensorHoldingNanOrInfByItsFinitePart) {
  CaptureStore store;
  TensorStats gradient;
  gradient.shape = {4, 4};
  gradient.dtype = "float32";
  gradient.numel = 16;
  gradient.nanCount = 4;   // the other 12 are zero: the finite part's norm is 0
  gradient.l2norm = 0;
  gradient.zeroFraction = 0.75;
  TensorStats huge = gradient;
  huge.nanCount = 0;
  huge.infCount = 1;
  huge.l2norm = 1e9;       // the finite part: far above the exploding threshold
  TensorStats update = huge;
  update.l2norm = 50;      // outside [update_ratio_low, update_ratio_high]
  store.add(0, {"conv1", 0, CaptureKind::Gradient, 0}, gradient);
  store.add(0, {"fc", 0, CaptureKind::Gradient, 0}, huge);
  store.add(0, {"fc.weight", 0, CaptureKind::Update, 0}, update);
  StepOrder order;
  order.backward = {{"fc", 0, CaptureKind::Gradient, 0}, {"conv1", 0, CaptureKind::Gradient, 0}};
  RuleEvaluator rules;
  const auto alerts = rules.evaluate(store, 0, order);
  EXPECT_TRUE(ofRule(alerts, RuleKind::VanishingGradient).empty());
  EXPECT_TRUE(ofRule(alerts, RuleKind::ExplodingGradient).empty());
  EXPECT_TRUE(ofRule(alerts, RuleKind::UpdateRatio).empty());
  ASSERT_FALSE(ofRule(alerts, RuleKind::NonFinite).empty());
  EXPECT_EQ(ofRule(alerts, RuleKind::NonFinite)[0].module, "fc");  // where it first appears, backward
  // The same tensors without NaN or Inf are judged as before.
  gradient.nanCount = 0;
  huge.infCount = 0;
  update.infCount = 0;
  store.add(1, {"conv1", 0, CaptureKind::Gradient, 0}, gradient);
  store.add(1, {"fc", 0, CaptureKind::Gradient, 0}, huge);
  store.add(1, {"fc.weight", 0, CaptureKind::Update, 0}, update);
  const auto judged = rules.evaluate(store, 1, order);
  EXPECT_EQ(ofRule(judged, RuleKind::VanishingGradient).size(), 1u);
  EXPECT_EQ(ofRule(judged, RuleKind::ExplodingGradient).size(), 1u);
  EXPECT_EQ(ofRule(judged, RuleKind::UpdateRatio).size(), 1u);
}

// A step of parameters alone (a checkpoint): every parameter holding NaN or Inf is named, in
// the store's order, and one that does not is not; a step that holds none of them says nothing.
TEST(RuleEvaluatorTest, EachParameterHoldingNanIsNamedWhereNothingComputedHoldsOne) {
  CaptureStore store;
  TensorStats clean;
  clean.shape = {3};
  clean.dtype = "float32";
  clean.numel = 3;
  clean.l2norm = 1;
  TensorStats nan = clean;
  nan.nanCount = 1;
  store.add(0, {"0.weight", 0, CaptureKind::Param, 0}, nan);
  store.add(0, {"1.weight", 0, CaptureKind::Param, 0}, clean);
  store.add(0, {"2.bias", 0, CaptureKind::Param, 0}, nan);
  store.add(1, {"0.weight", 0, CaptureKind::Param, 0}, clean);  // a later step: held again, clean
  RuleEvaluator rules;
  const auto alerts = ofRule(rules.evaluate(store, 0, StepOrder{}), RuleKind::NonFinite);
  ASSERT_EQ(alerts.size(), 2u);
  EXPECT_EQ(alerts[0].module, "0.weight");
  EXPECT_EQ(alerts[1].module, "2.bias");
  EXPECT_TRUE(ofRule(rules.evaluate(store, 1, StepOrder{}), RuleKind::NonFinite).empty());
}

// anomaly: off by default; on (by its threshold), it fires where a series leaves its own band,
// with the statistic and how far, and not on the steps before; not before its band holds 30
// steps (a spike at step 20 is let be).
TEST(RuleEvaluatorTest, AnomalyIsOffUntilAskedAndFiresWhereASeriesLeavesItsBand) {
  CaptureStore store;
  const SeriesKey key{"blocks.2.mlp.fc1", 0, CaptureKind::Activation, 0};
  RuleEvaluator quiet;
  RuleSettings settings;
  EXPECT_FALSE(settings.enabled[std::size_t(RuleKind::Anomaly)]);
  EXPECT_EQ(parseRuleName("anomaly"), RuleKind::Anomaly);
  ASSERT_TRUE(setRuleThreshold(settings, RuleKind::Anomaly, 8, nullptr));
  EXPECT_TRUE(settings.enabled[std::size_t(RuleKind::Anomaly)]);
  EXPECT_FALSE(setRuleThreshold(settings, RuleKind::Anomaly, 0, nullptr));
  RuleEvaluator rules(settings);
  std::vector<Alert> fired, firedQuiet;
  for (int step = 0; step < 40; ++step) {
    TensorStats s;
    s.numel = 100;
    s.l2norm = (step == 30 || step == 20 ? 30.0 : 1.0) * (1 + 0.01 * (step % 3));
    s.std = s.l2norm / 10;
    store.add(step, key, s);
    for (const auto& a : ofRule(rules.evaluate(store, step, {}), RuleKind::Anomaly)) fired.push_back(a);
    for (const auto& a : ofRule(quiet.evaluate(store, step, {}), RuleKind::Anomaly)) firedQuiet.push_back(a);
  }
  EXPECT_TRUE(firedQuiet.empty());
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].step, 30);
  EXPECT_EQ(fired[0].module, "blocks.2.mlp.fc1");
  EXPECT_GT(fired[0].value, 8);
  EXPECT_NE(fired[0].message.find("sigma above its band"), std::string::npos) << fired[0].message;
}
