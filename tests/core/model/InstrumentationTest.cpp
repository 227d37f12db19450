// Taps: switches that take effect between steps, call numbering, shared types, no-grad runs.
#include "TestSession.h"

using namespace hookscope;
using namespace hookscope::test;

namespace {

RunConfig parityConfig(const std::string& name) {
  RunConfig config;
  config.dataFile = fixture(name + ".data.pt");
  config.loss = LossKind::Mean;
  config.optimizer = OptimizerKind::None;
  return config;
}

TEST(InstrumentationTest, NothingHookedCapturesNothing) {
  Session s(fixture("parity_scripted.pt"));
  ASSERT_TRUE(s.model);
  EXPECT_GT(s.model->tapSites(), 0);
  s.configure(parityConfig("parity_scripted"));
  s.step();
  EXPECT_EQ(s.store->captureCount(), 0u);
  EXPECT_EQ(s.store->scalars("loss").size(), 1u);
}

TEST(InstrumentationTest, SwitchesTakeEffectAtTheNextCallWithoutReinstrumenting) {
  Session s(fixture("parity_scripted.pt"));
  ASSERT_TRUE(s.model);
  s.configure(parityConfig("parity_scripted"));
  const int fc = s.module("fc");
  const SeriesKey act{"fc", 0, CaptureKind::Activation, 0};
  const SeriesKey grad{"fc", 0, CaptureKind::Gradient, 0};
  s.model->setHook(fc, CaptureKind::Activation, true);
  s.step();  // step 0: activation only
  s.model->setHook(fc, CaptureKind::Gradient, true);
  s.step();  // step 1: both
  s.model->setHooks(fc, 0);
  s.step();  // step 2: none
  s.model->setHook(fc, CaptureKind::Activation, true);
  s.step();  // step 3: activation again
  EXPECT_EQ(s.steps(act), (std::vector<std::int64_t>{0, 1, 3}));
  EXPECT_EQ(s.steps(grad), (std::vector<std::int64_t>{1}));
  for (const auto& key : s.store->seriesKeys()) EXPECT_EQ(key.module, "fc");
}

TEST(InstrumentationTest, RepeatedCallsAreNumberedAndSharedTypesToldApart) {
  Session s(fixture("parity_scripted.pt"));
  ASSERT_TRUE(s.model);
  s.configure(parityConfig("parity_scripted"));
  for (const char* path : {"conv2", "relu", "head", "head.a", "head.b"}) {
    s.model->setHooks(s.module(path), kindBit(CaptureKind::Activation));
  }
  s.step();
  SeriesPoint first, second, a, b;
  ASSERT_TRUE(s.store->pointAt({"conv2", 0, CaptureKind::Activation, 0}, 0, &first));
  ASSERT_TRUE(s.store->pointAt({"conv2", 1, CaptureKind::Activation, 0}, 0, &second));
  EXPECT_NE(first.stats.l2norm, second.stats.l2norm);
  EXPECT_TRUE(s.store->pointAt({"relu", 1, CaptureKind::Activation, 0}, 0, nullptr));
  EXPECT_FALSE(s.store->pointAt({"relu", 2, CaptureKind::Activation, 0}, 0, nullptr));
  // head.a and head.b share one class type and graph, yet are captured separately.
  ASSERT_TRUE(s.store->pointAt({"head.a", 0, CaptureKind::Activation, 0}, 0, &a));
  ASSERT_TRUE(s.store->pointAt({"head.b", 0, CaptureKind::Activation, 0}, 0, &b));
  EXPECT_NE(a.stats.l2norm, b.stats.l2norm);
  // A tuple result gives one series per tensor.
  EXPECT_TRUE(s.store->pointAt({"head", 0, CaptureKind::Activation, 0}, 0, nullptr));
  EXPECT_TRUE(s.store->pointAt({"head", 0, CaptureKind::Activation, 1}, 0, nullptr));
}

TEST(InstrumentationTest, InputsAndParametersAreCaptured) {
  Session s(fixture("parity_scripted.pt"));
  ASSERT_TRUE(s.model);
  RunConfig config = parityConfig("parity_scripted");
  config.optimizer = OptimizerKind::Sgd;
  s.configure(config);
  const std::uint8_t all = kindBit(CaptureKind::Input) | kindBit(CaptureKind::Param) |
                           kindBit(CaptureKind::ParamGrad) | kindBit(CaptureKind::Update);
  s.model->setHooks(0, all);
  s.model->setHooks(s.module("conv1"), kindBit(CaptureKind::Input));
  s.model->setHooks(s.module("fc"), all);  // conv1 feeds batch norm: its gradients are ~0
  s.step();
  SeriesPoint root, conv1;
  ASSERT_TRUE(s.store->pointAt({"", 0, CaptureKind::Input, 0}, 0, &root));
  ASSERT_TRUE(s.store->pointAt({"conv1", 0, CaptureKind::Input, 0}, 0, &conv1));
  EXPECT_DOUBLE_EQ(root.stats.l2norm, conv1.stats.l2norm);  // the same tensor
  EXPECT_EQ(root.stats.shape, (std::vector<std::int64_t>{4, 3, 16, 16}));
  for (const char* name : {"fc.weight", "fc.bias"}) {
    SeriesPoint param, grad, update;
    ASSERT_TRUE(s.store->pointAt({name, 0, CaptureKind::Param, 0}, 0, &param)) << name;
    ASSERT_TRUE(s.store->pointAt({name, 0, CaptureKind::ParamGrad, 0}, 0, &grad)) << name;
    ASSERT_TRUE(s.store->pointAt({name, 0, CaptureKind::Update, 0}, 0, &update)) << name;
    EXPECT_GT(grad.stats.l2norm, 0);
    // SGD without momentum: the update is lr * grad, relative to the weight norm.
    EXPECT_TRUE(closeRel(update.stats.l2norm, 0.01 * grad.stats.l2norm / param.stats.l2norm, 1e-4));
  }
  EXPECT_FALSE(s.store->pointAt({"conv1.weight", 0, CaptureKind::Param, 0}, 0, nullptr));
}

TEST(InstrumentationTest, NoGradInferenceCapturesActivationsOnly) {
  Session s(fixture("resnet18_scripted.pt"));
  ASSERT_TRUE(s.model);
  RunConfig config = parityConfig("resnet18_scripted");
  config.noGrad = true;
  config.train = false;
  s.configure(config);
  for (std::size_t i = 0; i < s.model->modules().size(); ++i) {
    s.model->setHooks(int(i), kindBit(CaptureKind::Activation) | kindBit(CaptureKind::Gradient));
  }
  s.step();
  std::size_t activations = 0;
  for (const auto& key : s.store->seriesKeys()) {
    EXPECT_EQ(key.kind, CaptureKind::Activation);
    activations += key.kind == CaptureKind::Activation;
  }
  EXPECT_GT(activations, 50u);
}

TEST(InstrumentationTest, OverloadedLstmForwardIsTapped) {
  Session s(fixture("lstm_scripted.pt"));
  ASSERT_TRUE(s.model);
  s.configure(parityConfig("lstm_scripted"));
  s.model->setHooks(s.module("lstm"), kindBit(CaptureKind::Activation));
  s.step();
  for (int index = 0; index < 3; ++index) {  // out, h, c
    EXPECT_TRUE(s.store->pointAt({"lstm", 0, CaptureKind::Activation, index}, 0, nullptr)) << index;
  }
}

TEST(InstrumentationTest, UninstrumentedModelRunsWithoutTaps) {
  LoadOptions options;
  options.instrument = false;
  Session s(fixture("parity_scripted.pt"), options);
  ASSERT_TRUE(s.model);
  EXPECT_FALSE(s.model->instrumented());
  EXPECT_EQ(s.model->tapSites(), 0);
  s.configure(parityConfig("parity_scripted"));
  s.model->setHooks(s.module("fc"), kindBit(CaptureKind::Activation));
  s.step();
  EXPECT_FALSE(s.store->pointAt({"fc", 0, CaptureKind::Activation, 0}, 0, nullptr));
}

} // namespace
