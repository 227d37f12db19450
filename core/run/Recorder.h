#pragma once
// Internal to core: receives what the taps see during a step and stores statistics.

#include "store/CaptureStore.h"
#include "model/Model.h"
#include "model/ModelImpl.h"
#include "model/TapOperators.h"
#include "rules/RuleEvaluator.h"
#include "run/StatsWorker.h"

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

namespace hookscope {

/// The output shapes one module call produced, as "8x16x14x14" per tensor.
struct CallShape {
  int module = 0;
  int call = 0;
  std::vector<std::string> shapes;
};

/// Turns tap events of one model into captures in a store. Taps reach the recorder that
/// is current on their thread (a TapSinkScope); gradient hooks keep it alive.
class Recorder : public TapSink, public std::enable_shared_from_this<Recorder> {
public:
  Recorder(std::shared_ptr<ModelImpl> model, std::shared_ptr<CaptureStore> store);

  void setBins(int bins) { m_bins = bins; }
  int bins() const { return m_bins; }
  /// When on, the next steps record every module call's output shapes, hooked or not.
  void setShapeProbe(bool on) { m_shapeProbe = on; }

  /// Starts a step: call numbering restarts at 0 for every module.
  void beginStep(std::int64_t step);
  /// Ends a step: returns once every capture of the step is in the store.
  void finishStep();
  std::int64_t step() const { return m_step; }

  void onInput(int module, const c10::IValue& args) override;
  /// Sees a call's result; returns it, or its replacement when an output intervention is set.
  c10::IValue onOutput(int module, const c10::IValue& result) override;
  /// The modules whose call has begun and not returned, outermost first: after a forward that
  /// threw, the last is the one whose code raised (or called what raised).
  const std::vector<int>& openCalls() const { return m_open; }
  /// Module calls that returned in this step.
  int callsReturned() const { return m_returned; }
  /// The root module's call is made by the runner, not by a graph: it reports it here.
  void onRootCall(const std::vector<c10::IValue>& inputs, const c10::IValue& output);

  /// Stores parameter values and gradients of modules hooked for param/param_grad.
  void captureParameters();
  /// Before an optimizer step: remembers the parameters that the update kind watches.
  void snapshotForUpdate();
  /// After it: stores (new - old) / ||old|| for each remembered parameter.
  void captureUpdates();

  std::vector<CallShape> shapes() const;
  /// Keeps full output tensors of the flagged modules (by index), overwritten each step.
  void setKeepTensors(std::vector<bool> keep) { m_keep = std::move(keep); }
  /// Kept tensors by "{module}/{call}/{index}".
  const std::map<std::string, at::Tensor>& keptTensors() const { return m_kept; }
  /// The order in which this step's activations returned and its gradients arrived.
  StepOrder order() const;
  /// Seconds the engine thread spent on captures (copies, or statistics computed inline,
  /// and waiting for the worker at the end of the step) since the last beginStep.
  double captureSeconds() const { return double(m_captureNanos.load()) * 1e-9; }
  /// Captures of the step that were copied for the worker, and those it read in place.
  int capturesCopied() const { return m_copied; }
  int capturesShared() const { return m_shared; }

private:
  void record(int module, int call, CaptureKind kind, int index, const at::Tensor& tensor);
  void recordNamed(const std::string& name, CaptureKind kind, const at::Tensor& tensor);
  /// Hands a tensor to the worker (or computes inline) and counts the engine thread's time.
  void store(std::int64_t step, SeriesKey key, const at::Tensor& tensor);
  void hookGradients(int module, int call, const c10::IValue& result);
  void noteShapes(int module, int call, const c10::IValue& result);

  std::shared_ptr<ModelImpl> m_model;
  std::shared_ptr<CaptureStore> m_store;
  std::unique_ptr<StatsWorker> m_worker;  ///< null on a single-core machine: computed inline
  /// Storage of the model's parameters and buffers. LibTorch's optimizers (and BatchNorm's
  /// running statistics) change them without a version bump, so captures on them are copied.
  std::unordered_set<const void*> m_parameterStorage;
  int m_bins = 64;
  bool m_shapeProbe = false;
  std::int64_t m_step = 0;
  std::vector<int> m_nextCall;
  std::vector<int> m_currentCall;
  std::atomic<std::int64_t> m_captureNanos{0};
  int m_copied = 0;
  int m_shared = 0;
  std::map<std::pair<int, int>, std::vector<std::string>> m_shapes;
  struct UpdateSnapshot {
    std::string name;
    at::Tensor param;   ///< the live parameter
    at::Tensor before;  ///< its values before the optimizer step
  };
  std::vector<UpdateSnapshot> m_updateBefore;
  mutable std::mutex m_orderMutex;  ///< gradient hooks may run on autograd's threads
  StepOrder m_order;
  std::vector<bool> m_keep;
  std::map<std::string, at::Tensor> m_kept;
  std::vector<int> m_open;  ///< openCalls()
  int m_returned = 0;
};

/// Calls fn(index, tensor) for each tensor in a value, depth first: tuples, lists and
/// dict values in order; other values are skipped.
void forEachTensor(const c10::IValue& value, const std::function<void(int, const at::Tensor&)>& fn);

} // namespace hookscope
