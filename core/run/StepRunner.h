#pragma once

#include "store/CaptureStore.h"
#include "model/Model.h"
#include "rules/RuleEvaluator.h"
#include "common/RunConfig.h"
#include "common/StepResult.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace hookscope {

class StepRunnerImpl;

/// Makes training steps on a model: inputs, forward, loss, backward, optimizer, with the
/// model's hooks recording into a store. One thread runs steps; pause and stop may be
/// requested from any thread and take effect between steps.
class StepRunner {
public:
  StepRunner(Model& model, std::shared_ptr<CaptureStore> store);
  ~StepRunner();

  /// Prepares inputs and optimizer; false with a message when the config cannot work.
  bool configure(const RunConfig& config, std::string* error);
  const RunConfig& config() const;

  /// Runs one step. On failure (the model rejects the input, ...) returns false with a
  /// message; the runner stays usable.
  bool step(StepResult* result, std::string* error);

  enum class RunEnd { Finished, Stopped, Failed };
  /// Runs `steps` steps (< 0: until stopped), calling onStep after each. Honours pause
  /// and stop between steps.
  RunEnd run(std::int64_t steps, const std::function<void(const StepResult&)>& onStep,
             std::string* error);
  void requestStop();
  void setPaused(bool paused);
  bool paused() const { return m_paused.load(); }
  /// Steps completed so far; the next step is numbered this.
  std::int64_t stepsDone() const;

  /// The order in which the last step's activations returned and gradients arrived.
  StepOrder lastStepOrder() const;
  /// Records output shapes of every module call during the next step.
  void probeShapes();
  /// Steps run the forward alone: no loss, no backward (inspect, which shows shapes only).
  void setForwardOnly(bool forwardOnly);
  /// Shapes recorded by the last probed step.
  std::vector<ModuleCallShape> outputShapes() const;

  /// Keeps full activation tensors of these modules (by index), overwritten every step.
  void keepTensors(const std::vector<int>& modules);
  /// Writes the kept tensors as a torch.save-compatible dict "{module}/{call}/{index}";
  /// returns the bytes (empty when nothing was kept).
  std::vector<char> keptTensorsPickle() const;

  Model& model() { return m_model; }
  std::shared_ptr<CaptureStore> store() const { return m_store; }

private:
  /// The loss of `out` against the batch's targets (or fixed random ones); false with why.
  bool computeLoss(const at::Tensor& out, at::Tensor target, at::Tensor* lossValue, std::string* why);
  /// Backward, the parameters' captures, and the optimizer's step with its updates' captures.
  bool backward(at::Tensor& lossValue, StepResult* r, std::string* why);
  /// Every way a step ends well: its captures all stored before it counts as done.
  void endStep(StepResult& r, std::chrono::steady_clock::time_point stepStart, bool scalars);

  Model& m_model;
  std::shared_ptr<CaptureStore> m_store;
  std::unique_ptr<StepRunnerImpl> m_impl;
  std::atomic<bool> m_stop{false};
  std::atomic<bool> m_paused{false};
  bool m_forwardOnly = false;
  std::mutex m_pauseMutex;
  std::condition_variable m_pauseChanged;
};

} // namespace hookscope
