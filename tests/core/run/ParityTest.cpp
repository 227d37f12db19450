// HookScope's numbers against what PyTorch's own hooks give on the same model and input.
#include "TestSupport.h"

#include "store/CaptureStore.h"
#include "model/Model.h"
#include "run/StepRunner.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <set>

using namespace hookscope;
using namespace hookscope::test;

namespace {

class ParityTest : public ::testing::TestWithParam<std::string> {};

void expectSeriesMatch(const CaptureStore& store, const nlohmann::json& golden, CaptureKind kind,
                       const std::string& model, std::int64_t step) {
  std::set<SeriesKey> expected;
  for (const auto& ref : golden) {
    const SeriesKey key{ref["module"], ref["call"], kind, ref["index"]};
    expected.insert(key);
    SCOPED_TRACE(model + " step " + std::to_string(step) + " " + captureKindName(kind) + " '" + key.module +
                 "' call " + std::to_string(key.call) + " index " + std::to_string(key.index));
    SeriesPoint point;
    ASSERT_TRUE(store.pointAt(key, step, &point)) << "no capture for this module call";
    ASSERT_EQ(point.step, step);
    expectStatsMatch(point.stats, ref);
  }
  // Nothing captured twice or invented: the series are exactly the hooks' calls.
  std::set<SeriesKey> actual;
  for (const auto& key : store.seriesKeys()) {
    if (key.kind == kind) actual.insert(key);
  }
  EXPECT_EQ(actual.size(), expected.size()) << model << " " << captureKindName(kind);
  for (const auto& key : actual) {
    EXPECT_TRUE(expected.count(key)) << "unexpected series '" << key.module << "' call " << key.call
                                     << " index " << key.index;
  }
}

TEST_P(ParityTest, ActivationsAndGradientsEqualPythonHooks) {
  const std::string name = GetParam();
  std::string error;
  auto model = Model::load(fixture(name + ".pt"), &error);
  ASSERT_TRUE(model) << error;
  for (std::size_t i = 0; i < model->modules().size(); ++i) {
    model->setHooks(int(i), kindBit(CaptureKind::Activation) | kindBit(CaptureKind::Gradient));
  }
  auto store = std::make_shared<CaptureStore>();
  StepRunner runner(*model, store);
  RunConfig config;
  config.dataFile = fixture(name + ".data.pt");
  config.loss = LossKind::Mean;
  config.optimizer = OptimizerKind::None;
  ASSERT_TRUE(runner.configure(config, &error)) << error;
  std::ifstream in(fixture(name + ".golden.json"));
  ASSERT_TRUE(in) << "missing golden file for " << name;
  const auto golden = nlohmann::json::parse(in);
  ASSERT_FALSE(golden["activation"].empty());
  ASSERT_FALSE(golden["gradient"].empty());
  // No optimizer, the same batch: every step must equal the hooks' one step. The first step
  // copies every captured tensor; later ones share those that no in-place op touched, and
  // still copy those that one did (BatchNorm outputs before ReLU(inplace=True)).
  for (std::int64_t step = 0; step < 3; ++step) {
    StepResult result;
    ASSERT_TRUE(runner.step(&result, &error)) << error;
    ASSERT_EQ(result.step, step);
    EXPECT_TRUE(closeRel(result.loss, golden["loss"], 1e-5));
    expectSeriesMatch(*store, golden["activation"], CaptureKind::Activation, name, step);
    expectSeriesMatch(*store, golden["gradient"], CaptureKind::Gradient, name, step);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ParityTest,
                         ::testing::Values("parity_scripted", "parity_traced", "resnet18_scripted",
                                           "lstm_scripted", "encoder_scripted", "encoder_traced",
                                           "attention_scripted", "attention_traced",
                                           "sdpa_scripted", "sdpa_traced"));

} // namespace
