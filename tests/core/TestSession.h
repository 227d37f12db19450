#pragma once
// A loaded model with a store and a step runner, for tests that make steps.

#include "TestSupport.h"

#include "store/CaptureStore.h"
#include "model/Model.h"
#include "run/StepRunner.h"

#include <memory>
#include <string>
#include <vector>

namespace hookscope::test {

struct Session {
  std::unique_ptr<Model> model;
  std::shared_ptr<CaptureStore> store = std::make_shared<CaptureStore>();
  std::unique_ptr<StepRunner> runner;  ///< null when the model did not load (a failure is added)

  explicit Session(const std::string& file, LoadOptions options = {}) {
    std::string error;
    model = Model::load(file, &error, options);
    if (!model) {
      ADD_FAILURE() << error;
      return;
    }
    runner = std::make_unique<StepRunner>(*model, store);
  }
  void configure(RunConfig config) {
    std::string error;
    ASSERT_TRUE(runner->configure(config, &error)) << error;
  }
  /// Makes one step, a fatal failure when it fails; its result goes to `out` when given.
  void step(StepResult* out = nullptr) {
    std::string error;
    StepResult result;
    ASSERT_TRUE(runner->step(&result, &error)) << error;
    if (out) *out = result;
  }
  int module(const std::string& path) {
    const int index = model->findModule(path);
    EXPECT_GE(index, 0) << path;
    return index;
  }
  std::vector<std::int64_t> steps(const SeriesKey& key) {
    std::vector<std::int64_t> result;
    for (const auto& p : store->series(key)) result.push_back(p.step);
    return result;
  }
};

} // namespace hookscope::test
