// Steps: learning, parity of an SGD step with Python, bad inputs, NaN, pause and stop.
#include "TestSupport.h"

#include "store/CaptureStore.h"
#include "common/InputSpec.h"
#include "model/Model.h"
#include "run/StepRunner.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <thread>
#include <tuple>

using namespace hookscope;
using namespace hookscope::test;

namespace {

std::unique_ptr<Model> loadSample(const std::string& name = "small_cnn.pt") {
  std::string error;
  auto model = Model::load(sampleModel(name), &error);
  EXPECT_TRUE(model) << error;
  return model;
}

// A runner for one cross-entropy step without optimizer on the fixed batch of sgd.data.pt,
// with every module's parameter gradients captured: the setup of the intervention tests.
std::unique_ptr<StepRunner> fixedBatchRunner(Model& model, std::shared_ptr<CaptureStore> store) {
  for (std::size_t i = 0; i < model.modules().size(); ++i) {
    model.setHooks(int(i), model.hooks(int(i)) | kindBit(CaptureKind::ParamGrad));
  }
  auto runner = std::make_unique<StepRunner>(model, std::move(store));
  RunConfig config;
  config.dataFile = fixture("sgd.data.pt");
  config.loss = LossKind::CrossEntropy;
  config.optimizer = OptimizerKind::None;
  std::string error;
  EXPECT_TRUE(runner->configure(config, &error)) << error;
  return runner;
}

TEST(InputSpecTest, ParsesShapesDtypesAndBounds) {
  InputSpec spec;
  std::string error;
  ASSERT_TRUE(InputSpec::parse("8x3x32x32", &spec, &error)) << error;
  EXPECT_EQ(spec.shape, (std::vector<std::int64_t>{8, 3, 32, 32}));
  EXPECT_EQ(spec.dtype, "float32");
  EXPECT_FALSE(spec.bounded);
  ASSERT_TRUE(InputSpec::parse("8x128:int64:0:30000", &spec, &error)) << error;
  EXPECT_TRUE(spec.isInteger());
  EXPECT_DOUBLE_EQ(spec.high, 30000);
  ASSERT_TRUE(InputSpec::parse("8x4:float32:-1:1", &spec, &error)) << error;
  EXPECT_TRUE(spec.bounded);
  EXPECT_DOUBLE_EQ(spec.low, -1);
  for (const char* bad : {"", "8xx3", "8x3:float99", "8x3:float32:1", "8x3:float32:2:1", "0x3", "8x3:int64:a:b"}) {
    EXPECT_FALSE(InputSpec::parse(bad, &spec, &error)) << bad;
    EXPECT_NE(error.find("bad input spec"), std::string::npos);
  }
}

TEST(StepRunnerTest, TrainingReducesTheLossOnALearnableTask) {
  auto model = loadSample();
  ASSERT_TRUE(model);
  auto store = std::make_shared<CaptureStore>();
  StepRunner runner(*model, store);
  RunConfig config;
  config.dataFile = fixture("quadrants.data.pt");
  config.batchSize = 16;
  config.lr = 0.05;
  config.momentum = 0.9;
  std::string error;
  ASSERT_TRUE(runner.configure(config, &error)) << error;
  std::vector<double> losses;
  ASSERT_EQ(runner.run(40, [&](const StepResult& r) { losses.push_back(r.loss); }, &error),
            StepRunner::RunEnd::Finished) << error;
  ASSERT_EQ(losses.size(), 40u);
  const double first = (losses[0] + losses[1] + losses[2] + losses[3]) / 4;
  const double last = (losses[36] + losses[37] + losses[38] + losses[39]) / 4;
  EXPECT_LT(last, 0.3 * first) << "cross-entropy went from " << first << " to " << last;
  EXPECT_EQ(store->scalars("loss").size(), 40u);
  EXPECT_EQ(store->scalars("step_ms").size(), 40u);
}

TEST(StepRunnerTest, TheSampleMlpLearnsToo) {
  auto model = loadSample("small_mlp.pt");
  ASSERT_TRUE(model);
  StepRunner runner(*model, std::make_shared<CaptureStore>());
  RunConfig config;
  config.dataFile = fixture("teacher.data.pt");
  config.batchSize = 32;
  config.optimizer = OptimizerKind::Adam;
  config.lr = 0.01;
  std::string error;
  ASSERT_TRUE(runner.configure(config, &error)) << error;
  std::vector<double> losses;
  ASSERT_EQ(runner.run(60, [&](const StepResult& r) { losses.push_back(r.loss); }, &error),
            StepRunner::RunEnd::Finished) << error;
  const double first = (losses[0] + losses[1] + losses[2] + losses[3]) / 4;
  const double last = (losses[56] + losses[57] + losses[58] + losses[59]) / 4;
  EXPECT_LT(last, 0.5 * first) << "cross-entropy went from " << first << " to " << last;
}

TEST(StepRunnerTest, CapturesOnParametersStayCopiedOthersAreShared) {
  // table returns a view of its weight, which SGD changes in place without a version bump.
  std::string error;
  auto model = Model::load(fixture("param_view.pt"), &error);
  ASSERT_TRUE(model) << error;
  const int table = model->findModule("table");
  const int fc = model->findModule("fc");
  ASSERT_GE(table, 0);
  ASSERT_GE(fc, 0);
  model->setHooks(table, kindBit(CaptureKind::Activation) | kindBit(CaptureKind::Param));
  model->setHooks(fc, kindBit(CaptureKind::Activation));
  auto store = std::make_shared<CaptureStore>();
  StepRunner runner(*model, store);
  RunConfig config;
  config.inputSpecs = {"8x8"};
  config.loss = LossKind::Mean;
  config.optimizer = OptimizerKind::Sgd;
  config.lr = 0.5;
  ASSERT_TRUE(runner.configure(config, &error)) << error;
  std::vector<StepResult> results;
  ASSERT_EQ(runner.run(4, [&](const StepResult& r) { results.push_back(r); }, &error),
            StepRunner::RunEnd::Finished) << error;
  ASSERT_EQ(results.size(), 4u);
  // Three captures a step. The first step copies all; then fc's output, untouched, is shared.
  EXPECT_EQ(results[0].capturesCopied, 3);
  EXPECT_EQ(results[0].capturesShared, 0);
  for (std::size_t i = 1; i < results.size(); ++i) {
    EXPECT_EQ(results[i].capturesCopied, 2) << "step " << i << ": the weight's view and the weight";
    EXPECT_EQ(results[i].capturesShared, 1) << "step " << i << ": fc's output";
  }
  // The view shows the weight as it was when the step used it, before SGD changed it.
  const auto view = store->series({"table", 0, CaptureKind::Activation, 0});
  const auto weight = store->series({"table.weight", 0, CaptureKind::Param, 0});
  ASSERT_EQ(view.size(), 4u);
  ASSERT_EQ(weight.size(), 4u);
  for (std::size_t i = 0; i < view.size(); ++i) {
    EXPECT_EQ(view[i].stats.mean, weight[i].stats.mean) << "step " << i;
    EXPECT_EQ(view[i].stats.l2norm, weight[i].stats.l2norm) << "step " << i;
    if (i > 0) {
      EXPECT_NE(weight[i].stats.mean, weight[i - 1].stats.mean) << "SGD changed the weight";
    }
  }
}

TEST(StepRunnerTest, SgdStepMatchesPythonReference) {
  auto model = loadSample();
  ASSERT_TRUE(model);
  for (std::size_t i = 0; i < model->modules().size(); ++i) {
    model->setHooks(int(i), kindBit(CaptureKind::Param) | kindBit(CaptureKind::ParamGrad));
  }
  auto store = std::make_shared<CaptureStore>();
  StepRunner runner(*model, store);
  RunConfig config;
  config.dataFile = fixture("sgd.data.pt");
  config.loss = LossKind::CrossEntropy;
  config.lr = 0.05;
  config.momentum = 0.9;
  config.weightDecay = 1e-3;
  std::string error;
  ASSERT_TRUE(runner.configure(config, &error)) << error;
  std::vector<double> losses;
  ASSERT_EQ(runner.run(2, [&](const StepResult& r) { losses.push_back(r.loss); }, &error),
            StepRunner::RunEnd::Finished) << error;
  std::ifstream in(fixture("sgd.golden.json"));
  ASSERT_TRUE(in);
  const auto golden = nlohmann::json::parse(in);
  EXPECT_TRUE(closeRel(losses[0], golden["loss"][0], 1e-5));
  EXPECT_TRUE(closeRel(losses[1], golden["loss"][1], 1e-5));  // after one step with momentum state
  ASSERT_EQ(golden["grad"].size(), 8u);
  auto compare = [&](const nlohmann::json& ref, const SeriesKey& key, std::int64_t step) {
    SCOPED_TRACE(key.module + " " + captureKindName(key.kind));
    SeriesPoint p;
    ASSERT_TRUE(store->pointAt(key, step, &p));
    ASSERT_EQ(p.step, step);
    expectStatsMatch(p.stats, ref);
  };
  for (const auto& [name, ref] : golden["grad"].items()) {
    compare(ref, {name, 0, CaptureKind::ParamGrad, 0}, 0);
  }
  // Parameters captured at step 1 are the values after step 0's update.
  for (const auto& [name, ref] : golden["after"].items()) {
    compare(ref, {name, 0, CaptureKind::Param, 0}, 1);
  }
}

TEST(StepRunnerTest, GradientClampMatchesPythonTensorHook) {
  std::ifstream in(fixture("clamp.golden.json"));
  ASSERT_TRUE(in);
  const auto golden = nlohmann::json::parse(in);
  auto model = loadSample();
  ASSERT_TRUE(model);
  const int fc1 = model->findModule("fc1");
  model->setGradientIntervention(fc1, {GradientIntervention::Clamp, double(golden["value"])});
  model->setHooks(fc1, kindBit(CaptureKind::Gradient));
  auto store = std::make_shared<CaptureStore>();
  auto runner = fixedBatchRunner(*model, store);
  std::string error;
  StepResult result;
  ASSERT_TRUE(runner->step(&result, &error)) << error;
  // The capture shows the gradient before the clamp...
  SeriesPoint before;
  ASSERT_TRUE(store->pointAt({"fc1", 0, CaptureKind::Gradient, 0}, 0, &before));
  EXPECT_TRUE(closeRel(std::max(-before.stats.min, before.stats.max), golden["max_abs_before"], 1e-5));
  // ...and every parameter gradient is what Python's clamping tensor hook gives.
  for (const auto& [name, ref] : golden["grad"].items()) {
    SCOPED_TRACE(name);
    SeriesPoint p;
    ASSERT_TRUE(store->pointAt({name, 0, CaptureKind::ParamGrad, 0}, 0, &p));
    expectStatsMatch(p.stats, ref);
  }
  // Without the clamp the parameters before fc1 get other gradients: the clamp did act.
  model->setGradientIntervention(fc1, {});
  ASSERT_TRUE(runner->step(&result, &error)) << error;
  SeriesPoint unclamped;
  ASSERT_TRUE(store->pointAt({"conv1.weight", 0, CaptureKind::ParamGrad, 0}, 1, &unclamped));
  EXPECT_FALSE(closeRel(unclamped.stats.l2norm, golden["grad"]["conv1.weight"]["l2"], 1e-3));
  EXPECT_EQ(GradientIntervention({GradientIntervention::Clamp, 0.5}).describe(), "clamp 0.5");
}

TEST(StepRunnerTest, OutputInterventionsMatchPythonForwardHooksThatReplaceTheOutput) {
  std::ifstream in(fixture("output_intervention.golden.json"));
  ASSERT_TRUE(in);
  const auto golden = nlohmann::json::parse(in);
  for (const auto& [name, module, kind] : {std::tuple{"mean_pool2", "pool2", OutputIntervention::Mean},
                                           std::tuple{"zero_relu3", "relu3", OutputIntervention::Zero}}) {
    SCOPED_TRACE(name);
    const auto& ref = golden[name];
    auto model = loadSample();
    ASSERT_TRUE(model);
    const int target = model->findModule(module);
    model->setOutputIntervention(target, {kind});
    model->setHooks(target, kindBit(CaptureKind::Activation));
    auto store = std::make_shared<CaptureStore>();
    auto runner = fixedBatchRunner(*model, store);
    std::string error;
    StepResult result;
    ASSERT_TRUE(runner->step(&result, &error)) << error;
    EXPECT_TRUE(closeRel(result.loss, ref["loss"], 1e-5));
    // The capture shows the output before it was replaced.
    SeriesPoint captured;
    ASSERT_TRUE(store->pointAt({module, 0, CaptureKind::Activation, 0}, 0, &captured));
    EXPECT_GT(captured.stats.std, 0);
    for (const auto& [param, stats] : ref["grad"].items()) {
      SCOPED_TRACE(param);
      SeriesPoint p;
      ASSERT_TRUE(store->pointAt({param, 0, CaptureKind::ParamGrad, 0}, 0, &p));
      expectStatsMatch(p.stats, stats);
    }
    // Parameters cut off by a zeroed output get no gradient, as in Python.
    for (const auto& param : ref["no_grad"]) {
      EXPECT_FALSE(store->pointAt({param.get<std::string>(), 0, CaptureKind::ParamGrad, 0}, 0, nullptr)) << param;
    }
  }
  EXPECT_FALSE(golden["zero_relu3"]["no_grad"].empty());
  // The mean case is not a disguised zero: gradients reach conv1 through the mean.
  EXPECT_GT(double(golden["mean_pool2"]["grad"]["conv1.weight"]["l2"]), 0.0);
  EXPECT_NE(double(golden["mean_pool2"]["loss"]), double(golden["zero_relu3"]["loss"]));
}

TEST(StepRunnerTest, RejectedInputIsReportedAndTheRunnerStaysUsable) {
  auto model = loadSample();
  ASSERT_TRUE(model);
  StepRunner runner(*model, std::make_shared<CaptureStore>());
  RunConfig config;
  config.inputSpecs = {"8x3x32x32"};
  std::string error;
  ASSERT_TRUE(runner.configure(config, &error)) << error;
  StepResult result;
  EXPECT_FALSE(runner.step(&result, &error));
  EXPECT_NE(error.find("rejected the input (8x3x32x32 Float) in module 'conv1' (Conv2d)"), std::string::npos) << error;
  EXPECT_NE(error.find("channels"), std::string::npos) << "the model's own reason: " << error;
  EXPECT_EQ(runner.stepsDone(), 0);
  config.inputSpecs = {"8x1x28x28"};
  ASSERT_TRUE(runner.configure(config, &error)) << error;
  EXPECT_TRUE(runner.step(&result, &error)) << error;
  EXPECT_EQ(runner.stepsDone(), 1);
  config.inputSpecs = {"8x1x28x28", "8x4"};  // one input too many
  ASSERT_TRUE(runner.configure(config, &error)) << error;
  EXPECT_FALSE(runner.step(&result, &error));
  EXPECT_NE(error.find("rejected the input"), std::string::npos) << error;
}

TEST(StepRunnerTest, NanLossIsReportedWithoutCrashing) {
  auto model = loadSample();
  ASSERT_TRUE(model);
  model->setHooks(model->findModule("conv1"), kindBit(CaptureKind::Activation));
  auto store = std::make_shared<CaptureStore>();
  StepRunner runner(*model, store);
  RunConfig config;
  config.dataFile = fixture("nan_input.data.pt");
  std::string error;
  ASSERT_TRUE(runner.configure(config, &error)) << error;
  StepResult result;
  ASSERT_TRUE(runner.step(&result, &error)) << error;
  EXPECT_FALSE(result.lossFinite);
  SeriesPoint p;
  ASSERT_TRUE(store->pointAt({"conv1", 0, CaptureKind::Activation, 0}, 0, &p));
  EXPECT_GT(p.stats.nanCount, 0);
  EXPECT_TRUE(runner.step(&result, &error)) << error;  // and it keeps going
}

TEST(StepRunnerTest, DataFilesAreSlicedIntoBatchesInOrder) {
  auto model = loadSample();
  ASSERT_TRUE(model);
  model->setHooks(0, kindBit(CaptureKind::Input));
  auto store = std::make_shared<CaptureStore>();
  StepRunner runner(*model, store);
  RunConfig config;
  config.dataFile = fixture("quadrants.data.pt");  // 64 samples
  config.batchSize = 16;
  config.optimizer = OptimizerKind::None;
  std::string error;
  ASSERT_TRUE(runner.configure(config, &error)) << error;
  ASSERT_EQ(runner.run(5, nullptr, &error), StepRunner::RunEnd::Finished) << error;
  const auto points = store->series({"", 0, CaptureKind::Input, 0});
  ASSERT_EQ(points.size(), 5u);
  EXPECT_EQ(points[0].stats.shape, (std::vector<std::int64_t>{16, 1, 28, 28}));
  EXPECT_NE(points[0].stats.l2norm, points[1].stats.l2norm);
  EXPECT_DOUBLE_EQ(points[0].stats.l2norm, points[4].stats.l2norm);  // batch 4 % 4 == 0
  config.batchSize = 65;
  EXPECT_FALSE(runner.configure(config, &error));
  EXPECT_NE(error.find("larger than the 64 samples"), std::string::npos) << error;
}

TEST(StepRunnerTest, BadDataFilesAreReported) {
  auto model = loadSample();
  ASSERT_TRUE(model);
  StepRunner runner(*model, std::make_shared<CaptureStore>());
  RunConfig config;
  std::string error;
  config.dataFile = fixture("does_not_exist.data.pt");
  EXPECT_FALSE(runner.configure(config, &error));
  EXPECT_NE(error.find("cannot"), std::string::npos) << error;
  config.dataFile = fixture("no_inputs.data.pt");
  EXPECT_FALSE(runner.configure(config, &error));
  EXPECT_NE(error.find("holds no inputs"), std::string::npos) << error;
  config.dataFile = fixture("bare_tensor.data.pt");
  ASSERT_TRUE(runner.configure(config, &error)) << error;
  StepResult result;
  EXPECT_TRUE(runner.step(&result, &error)) << error;
}

TEST(StepRunnerTest, SyntheticInputsAreSeeded) {
  auto norms = [](std::uint64_t seed) {
    auto model = loadSample("small_mlp.pt");
    model->setHooks(0, kindBit(CaptureKind::Input));
    auto store = std::make_shared<CaptureStore>();
    StepRunner runner(*model, store);
    RunConfig config;
    config.inputSpecs = {"16x64:float32:-1:1"};
    config.seed = seed;
    std::string error;
    EXPECT_TRUE(runner.configure(config, &error)) << error;
    StepResult result;
    EXPECT_TRUE(runner.step(&result, &error)) << error;
    SeriesPoint p;
    EXPECT_TRUE(store->pointAt({"", 0, CaptureKind::Input, 0}, 0, &p));
    EXPECT_GE(p.stats.min, -1);
    EXPECT_LT(p.stats.max, 1);
    return p.stats.l2norm;
  };
  EXPECT_DOUBLE_EQ(norms(5), norms(5));
  EXPECT_NE(norms(5), norms(6));
}

TEST(StepRunnerTest, PauseAndStopFromAnotherThread) {
  auto model = loadSample("small_mlp.pt");
  ASSERT_TRUE(model);
  model->setHooks(model->findModule("fc1"), kindBit(CaptureKind::Activation) | kindBit(CaptureKind::Gradient));
  auto store = std::make_shared<CaptureStore>();
  StepRunner runner(*model, store);
  RunConfig config;
  config.inputSpecs = {"16x64"};
  std::string error;
  ASSERT_TRUE(runner.configure(config, &error)) << error;
  StepRunner::RunEnd end = StepRunner::RunEnd::Failed;
  std::thread engine([&] { end = runner.run(-1, nullptr, &error); });
  while (runner.stepsDone() < 3) std::this_thread::yield();
  const auto requestedAt = runner.stepsDone();
  runner.setPaused(true);
  // Pause acts between steps: the step in flight may finish, no other starts.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto pausedAt = runner.stepsDone();
  EXPECT_LE(pausedAt, requestedAt + 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(runner.stepsDone(), pausedAt) << "steps ran while paused";
  runner.setPaused(false);
  while (runner.stepsDone() < pausedAt + 3) std::this_thread::yield();
  runner.requestStop();
  engine.join();
  EXPECT_EQ(end, StepRunner::RunEnd::Stopped);
  // Every step that ran is complete: activation and gradient stored for each.
  const auto done = runner.stepsDone();
  EXPECT_EQ(store->series({"fc1", 0, CaptureKind::Activation, 0}).size(), std::size_t(done));
  EXPECT_EQ(store->series({"fc1", 0, CaptureKind::Gradient, 0}).size(), std::size_t(done));
  // Stop while paused ends the run too.
  runner.setPaused(true);
  std::thread again([&] { end = runner.run(-1, nullptr, &error); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  runner.requestStop();
  again.join();
  EXPECT_EQ(end, StepRunner::RunEnd::Stopped);
  EXPECT_EQ(runner.stepsDone(), done);
}

} // namespace
