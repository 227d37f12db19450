// Every kind of bad model file gives a message that says what is wrong and what to do.
#include "TestSession.h"

#include "model/Model.h"
#include "model/OperatorLibraries.h"

#include <algorithm>

using namespace hookscope;
using namespace hookscope::test;

namespace {

struct BadFile {
  const char* file;
  const char* mustSay;
};

void PrintTo(const BadFile& bad, std::ostream* out) { *out << bad.file; }

class ModelLoadErrorTest : public ::testing::TestWithParam<BadFile> {};

TEST_P(ModelLoadErrorTest, ExplainsTheProblem) {
  const BadFile bad = GetParam();
  std::string error;
  auto model = Model::load(fixture(std::string("bad/") + bad.file), &error);
  EXPECT_FALSE(model);
  EXPECT_NE(error.find(bad.mustSay), std::string::npos) << "message was: " << error;
  EXPECT_NE(error.find(bad.file), std::string::npos) << "message names no file: " << error;
}

INSTANTIATE_TEST_SUITE_P(
    BadFiles, ModelLoadErrorTest,
    ::testing::Values(BadFile{"missing.pt", "No file at"},
                      BadFile{"a_folder.pt", "is a folder"},
                      BadFile{"empty.pt", "is empty"},
                      BadFile{"not_zip.pt", "not a TorchScript archive"},
                      BadFile{"truncated.pt", "truncated"},
                      BadFile{"extra_entry.pt", "holds a file that PyTorch did not write"},
                      BadFile{"eager_zip.pt", "torch.jit.script(model).save"},
                      BadFile{"eager_legacy.pt", "torch.jit.script(model).save"},
                      BadFile{"state_dict.pt", "written by torch.save"},
                      BadFile{"rejected.pt", "could not load"},
                      BadFile{"future_format.pt", "file format version is 99"},
                      BadFile{"bomb_model.pt", "inflates to 300 MiB"}),
    [](const auto& info) {
      std::string name = info.param.file;
      return name.substr(0, name.find('.'));
    });

TEST(ModelLoadTest, RejectedFileMessageCarriesLibTorchReason) {
  std::string error;
  ASSERT_FALSE(Model::load(fixture("bad/rejected.pt"), &error));
  // The reason LibTorch gave, not an empty string after the colon.
  EXPECT_EQ(error.find(": ."), std::string::npos) << error;
}

TEST(ModelLoadTest, NewerFileFormatNamesBothVersions) {
  std::string error;
  ASSERT_FALSE(Model::load(fixture("bad/future_format.pt"), &error));
  EXPECT_NE(error.find("version is 99"), std::string::npos) << error;
  EXPECT_NE(error.find("PyTorch " + linkedTorchVersion()), std::string::npos) << error;
  EXPECT_NE(error.find("reads up to version"), std::string::npos) << error;
}

// These two run in this order (ctest runs each in its own process; a library once loaded
// stays loaded).
TEST(ModelLoadTest, UnknownOperatorNamesItTheLibraryAndTheOption) {
  std::string error;
  ASSERT_FALSE(Model::load(fixture("custom_op.pt"), &error)) << "the test library is loaded already";
  EXPECT_NE(error.find("hookscope_test::scale"), std::string::npos) << error;
  EXPECT_NE(error.find("--load-library"), std::string::npos) << error;
  EXPECT_NE(error.find("Operator libraries"), std::string::npos) << error;
  EXPECT_EQ(error.find("1.13"), std::string::npos) << error;
  EXPECT_EQ(error.find(".."), std::string::npos) << error;
}

TEST(ModelLoadTest, ALoadedOperatorLibraryLetsTheModelLoadAndTrain) {
  std::string error;
  EXPECT_FALSE(loadOperatorLibrary(fixture("no_such_library.so"), &error));
  EXPECT_NE(error.find("No operator library at"), std::string::npos) << error;
  ASSERT_TRUE(loadOperatorLibrary(HOOKSCOPE_TEST_OPS, &error)) << error;
  EXPECT_TRUE(loadOperatorLibrary(HOOKSCOPE_TEST_OPS, &error)) << "a second load is a no-op";
  const auto libraries = operatorLibraries();
  EXPECT_EQ(std::count_if(libraries.begin(), libraries.end(),
                          [](const OperatorLibrary& l) { return l.path == HOOKSCOPE_TEST_OPS; }),
            1);
  Session s(fixture("custom_op.pt"));
  ASSERT_TRUE(s.runner);
  s.model->setHooks(s.module("fc"), kindBit(CaptureKind::Activation) | kindBit(CaptureKind::Gradient));
  s.model->setHooks(0, kindBit(CaptureKind::Activation));
  RunConfig config;
  config.inputSpecs = {"3x4"};
  config.loss = LossKind::Sum;
  config.optimizer = OptimizerKind::None;
  s.configure(config);
  s.step();
  // The root's output is the operator's: twice fc's, and fc's gradient flows through it.
  SeriesPoint fc, root, grad;
  ASSERT_TRUE(s.store->pointAt({"fc", 0, CaptureKind::Activation, 0}, 0, &fc));
  ASSERT_TRUE(s.store->pointAt({"", 0, CaptureKind::Activation, 0}, 0, &root));
  ASSERT_TRUE(s.store->pointAt({"fc", 0, CaptureKind::Gradient, 0}, 0, &grad));
  EXPECT_TRUE(closeRel(root.stats.l2norm, 2 * fc.stats.l2norm, 1e-6));
  EXPECT_DOUBLE_EQ(grad.stats.min, 2.0);
  EXPECT_DOUBLE_EQ(grad.stats.max, 2.0);
}

// An output head tied to its embedding is one tensor: counted once at every level, as PyTorch's
// parameters() counts it, and named as shared by the module that holds it second.
TEST(ModelLoadTest, ATiedWeightIsCountedOnce) {
  std::string error;
  auto model = Model::load(fixture("tied_weights.pt"), &error);
  ASSERT_TRUE(model) << error;
  const auto& modules = model->modules();
  EXPECT_EQ(modules[0].totalParams, 100 * 16 + 16 * 16 + 16);
  const auto& head = modules[std::size_t(model->findModule("2"))];
  EXPECT_EQ(head.totalParams, 1600);
  ASSERT_EQ(head.params.size(), 1u);
  EXPECT_EQ(head.params[0].sharedWith, "0.weight");
  EXPECT_TRUE(modules[std::size_t(model->findModule("0"))].params[0].sharedWith.empty());
}

TEST(ModelLoadTest, SampleModelTree) {
  std::string error;
  auto model = Model::load(sampleModel("small_cnn.pt"), &error);
  ASSERT_TRUE(model) << error;
  const auto& modules = model->modules();
  ASSERT_EQ(modules.size(), 11u);
  EXPECT_EQ(modules[0].path, "");
  EXPECT_EQ(modules[0].name, "SmallCNN");
  EXPECT_EQ(modules[0].typeName, "SmallCNN");
  EXPECT_EQ(model->exampleInputSpec(), "8x1x28x28");
  // Children in definition order, with their own and subtree parameter counts.
  std::vector<std::string> childPaths;
  for (int c : modules[0].children) childPaths.push_back(modules[std::size_t(c)].path);
  EXPECT_EQ(childPaths, (std::vector<std::string>{"conv1", "relu1", "pool1", "conv2", "relu2", "pool2",
                                                  "flatten", "fc1", "relu3", "fc2"}));
  const auto& conv1 = modules[std::size_t(model->findModule("conv1"))];
  EXPECT_EQ(conv1.typeName, "Conv2d");
  EXPECT_EQ(conv1.ownParams, 8 * 1 * 3 * 3 + 8);
  ASSERT_EQ(conv1.params.size(), 2u);
  EXPECT_EQ(conv1.params[0].name, "conv1.weight");
  EXPECT_EQ(conv1.params[0].shape, (std::vector<std::int64_t>{8, 1, 3, 3}));
  EXPECT_EQ(modules[0].ownParams, 0);
  EXPECT_EQ(modules[0].totalParams, 80 + 1168 + 50240 + 650);
  EXPECT_EQ(model->tapSites(), 10);
}

TEST(ModelLoadTest, NestedTreeHasDottedPathsAndSubtreeCounts) {
  std::string error;
  auto model = Model::load(fixture("resnet18_scripted.pt"), &error);
  ASSERT_TRUE(model) << error;
  const int block = model->findModule("layer1.0");
  ASSERT_GE(block, 0);
  const auto& info = model->modules()[std::size_t(block)];
  EXPECT_EQ(info.typeName, "BasicBlock");
  EXPECT_EQ(info.depth, 2);
  std::int64_t sum = info.ownParams;
  for (int c : info.children) sum += model->modules()[std::size_t(c)].totalParams;
  EXPECT_EQ(info.totalParams, sum);
  EXPECT_GE(model->findModule("layer1.0.conv1"), 0);
  EXPECT_GE(model->findModule("layer2.0.downsample.0"), 0);
  EXPECT_EQ(model->modules()[0].totalParams, 11181642);  // resnet18 with 10 classes
}

} // namespace
