#include "run/StepRunner.h"

#include "common/InputSpec.h"
#include "model/ModelImpl.h"
#include "run/Recorder.h"
#include "model/TorchError.h"
#include "model/TorchSaveFile.h"

#include <torch/optim.h>
#include <torch/serialize.h>
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <regex>
#include <sstream>

namespace hookscope {

namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

at::ScalarType scalarType(const std::string& dtype) {
  if (dtype == "float64") return at::kDouble;
  if (dtype == "float16") return at::kHalf;
  if (dtype == "bfloat16") return at::kBFloat16;
  if (dtype == "int64") return at::kLong;
  if (dtype == "int32") return at::kInt;
  if (dtype == "int16") return at::kShort;
  if (dtype == "int8") return at::kChar;
  if (dtype == "uint8") return at::kByte;
  if (dtype == "bool") return at::kBool;
  return at::kFloat;
}

std::string describeTensors(const std::vector<at::Tensor>& tensors) {
  std::string text;
  for (const auto& t : tensors) {
    if (!text.empty()) text += ", ";
    std::string shape;
    for (auto size : t.sizes()) shape += (shape.empty() ? "" : "x") + std::to_string(size);
    text += shape + " " + std::string(c10::toString(t.scalar_type()));
  }
  return text;
}

at::Tensor firstTensor(const c10::IValue& value) {
  at::Tensor found;
  forEachTensor(value, [&](int, const at::Tensor& t) {
    if (!found.defined()) found = t;
  });
  return found;
}

} // namespace

class StepRunnerImpl {
public:
  RunConfig config;
  std::shared_ptr<Recorder> recorder;
  std::vector<std::vector<at::Tensor>> batches;
  std::vector<at::Tensor> targets;  // per batch; undefined when the data has none
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::vector<at::Tensor> parameters;
  at::Tensor syntheticTarget;
  std::atomic<std::int64_t> step{0};  // read by other threads (progress)
  bool configured = false;
};

StepRunner::StepRunner(Model& model, std::shared_ptr<CaptureStore> store)
    : m_model(model), m_store(std::move(store)), m_impl(std::make_unique<StepRunnerImpl>()) {
  m_impl->recorder = std::make_shared<Recorder>(m_model.sharedImpl(), m_store);
  for (const auto& param : m_model.impl().module.parameters()) {
    if (param.requires_grad()) m_impl->parameters.push_back(param);
  }
}

StepRunner::~StepRunner() = default;

const RunConfig& StepRunner::config() const { return m_impl->config; }
std::int64_t StepRunner::stepsDone() const { return m_impl->step; }

namespace {

bool loadDataFile(const RunConfig& config, std::vector<std::vector<at::Tensor>>& batches,
                  std::vector<at::Tensor>& targets, std::string* error) {
  auto fail = [&](const std::string& message) {
    if (error) *error = message;
    return false;
  };
  c10::IValue data;
  try {
    data = loadTorchSaveFile(config.dataFile);
  } catch (const std::exception& e) {
    return fail("cannot read data file " + config.dataFile + " (" + e.what() +
                "); write it in Python with torch.save({\"inputs\": x, \"targets\": y}, path)");
  }
  std::vector<at::Tensor> inputs;
  at::Tensor target;
  auto takeInputs = [&](const c10::IValue& value) {
    if (value.isTensor()) {
      inputs.push_back(value.toTensor());
    } else if (value.isTuple() || value.isList()) {
      forEachTensor(value, [&](int, const at::Tensor& t) { inputs.push_back(t); });
    }
  };
  if (data.isTensor()) {
    inputs.push_back(data.toTensor());
  } else if (data.isGenericDict()) {
    const auto dict = data.toGenericDict();
    for (const auto& entry : dict) {
      if (!entry.key().isString()) continue;
      const std::string key = entry.key().toStringRef();
      if (key == "inputs") takeInputs(entry.value());
      if (key == "targets" && entry.value().isTensor()) target = entry.value().toTensor();
    }
  }
  if (inputs.empty()) {
    return fail("data file " + config.dataFile + " holds no inputs: save a tensor, or a dict "
                "with \"inputs\" (a tensor or a tuple of tensors) and optional \"targets\"");
  }
  const std::int64_t samples = inputs[0].dim() > 0 ? inputs[0].size(0) : 0;
  for (const auto& t : inputs) {
    if (t.dim() == 0 || t.size(0) != samples) {
      return fail("data file " + config.dataFile + ": every input needs the same first "
                  "(sample) dimension; got " + describeTensors(inputs));
    }
  }
  if (target.defined() && (target.dim() == 0 || target.size(0) != samples)) {
    return fail("data file " + config.dataFile + ": targets have " +
                describeTensors({target}) + " but inputs have " + std::to_string(samples) +
                " samples");
  }
  if (samples == 0) {
    return fail("the data file " + config.dataFile + " holds no samples (its inputs have a first "
                "dimension of 0): save at least one sample");
  }
  const std::int64_t batch = config.batchSize > 0 ? config.batchSize : samples;
  if (batch > samples) {
    return fail("batch size " + std::to_string(batch) + " is larger than the " +
                std::to_string(samples) + " samples in " + config.dataFile);
  }
  for (std::int64_t begin = 0; begin < samples; begin += batch) {
    const std::int64_t end = std::min(samples, begin + batch);
    std::vector<at::Tensor> slice;
    for (const auto& t : inputs) slice.push_back(t.slice(0, begin, end));
    batches.push_back(std::move(slice));
    targets.push_back(target.defined() ? target.slice(0, begin, end) : at::Tensor());
  }
  return true;
}

} // namespace

bool StepRunner::configure(const RunConfig& config, std::string* error) {
  auto fail = [&](const std::string& message) {
    if (error) *error = message;
    return false;
  };
  std::vector<std::vector<at::Tensor>> batches;
  std::vector<at::Tensor> targets;
  if (!config.dataFile.empty()) {
    if (!loadDataFile(config, batches, targets, error)) return false;
  } else {
    if (config.inputSpecs.empty()) {
      return fail("no input given: give one input spec per model input, e.g. 8x1x28x28 (--input in hookscope-cli, the Inputs box of the window's Run tab)");
    }
    auto generator = at::make_generator<at::CPUGeneratorImpl>(config.seed);
    std::vector<at::Tensor> inputs;
    for (const auto& text : config.inputSpecs) {
      InputSpec spec;
      if (!InputSpec::parse(text, &spec, error)) return false;
      const auto type = scalarType(spec.dtype);
      // Drawn in float32 (float64 for float64 inputs), then cast: the bounds were checked to fit.
      const auto drawType = type == at::kDouble ? at::kDouble : at::kFloat;
      at::Tensor t;
      try {
        if (spec.isInteger()) {
          t = at::randint(std::int64_t(std::ceil(spec.low)), std::int64_t(std::ceil(spec.high)),
                          spec.shape, generator, at::TensorOptions().dtype(at::kLong))
                  .to(type);
        } else if (spec.bounded) {
          t = at::empty(spec.shape, drawType).uniform_(spec.low, spec.high, generator).to(type);
        } else {
          t = at::randn(spec.shape, generator, at::TensorOptions().dtype(drawType)).to(type);
        }
      } catch (const std::exception& e) {
        return fail("cannot make the input " + text + ": " + summarizeTorchError(e));
      }
      inputs.push_back(t);
    }
    batches.push_back(std::move(inputs));
    targets.emplace_back();
  }
  if (config.bins < 1 || config.bins > 4096) {
    return fail("histogram bins must be between 1 and 4096, got " + std::to_string(config.bins));
  }
  if (!(config.lr > 0)) return fail("learning rate must be positive, got " + std::to_string(config.lr));

  auto& impl = *m_impl;
  impl.config = config;
  impl.batches = std::move(batches);
  impl.targets = std::move(targets);
  impl.syntheticTarget = at::Tensor();
  impl.recorder->setBins(config.bins);
  impl.optimizer.reset();
  if (!config.noGrad && config.optimizer == OptimizerKind::Sgd) {
    impl.optimizer = std::make_unique<torch::optim::SGD>(
        impl.parameters, torch::optim::SGDOptions(config.lr)
                             .momentum(config.momentum)
                             .weight_decay(config.weightDecay));
  } else if (!config.noGrad && config.optimizer == OptimizerKind::Adam) {
    impl.optimizer = std::make_unique<torch::optim::Adam>(
        impl.parameters, torch::optim::AdamOptions(config.lr).weight_decay(config.weightDecay));
  }
  impl.configured = true;
  return true;
}

namespace {

// What went wrong in the model's forward, said as what happened: LibTorch's text names an
// allocation, a refused file, or a missing method more often than a bad input.
/// Where a forward stopped: the innermost module whose call had begun and not returned.
struct FailedCall {
  std::string module;        ///< "module 'fc2' (Linear)", or "the model's own forward"
  bool inputsFault = false;  ///< no module returned before it: the input is the likely cause
};

FailedCall failedCall(const Model& model, const Recorder& recorder) {
  FailedCall where;
  where.inputsFault = recorder.callsReturned() == 0;
  const int id = recorder.openCalls().empty() ? 0 : recorder.openCalls().back();
  if (id <= 0 || std::size_t(id) >= model.modules().size()) {
    where.module = "the model's own forward";
  } else {
    const auto& info = model.modules()[std::size_t(id)];
    where.module = "module '" + info.path + "' (" + info.typeName + ")";
  }
  return where;
}

std::string forwardFailure(const std::string& inputs, const std::string& reason, const FailedCall& where) {
  static const std::regex allocation(R"(tried to allocate (\d+) bytes)");
  std::smatch bytes;
  if (std::regex_search(reason, bytes, allocation)) {
    const double gib = std::stod(bytes[1].str()) / double(1ull << 30);
    std::ostringstream size;
    size << std::setprecision(3) << gib << " GiB";
    return "the model's forward asked for " + size.str() + " of memory on input " + inputs +
           ", which this machine cannot give: a smaller batch or input may fit (" + reason + ")";
  }
  if (reason.find("Permission denied") != std::string::npos || reason.find("Operation not permitted") != std::string::npos) {
    return "the model's code tried to open or write a file, and the engine's confinement refused it (models run "
           "with no file writes): " + reason;
  }
  if (reason.find("Method 'forward' is not defined") != std::string::npos) {
    return "the model has no forward method, so it cannot be run: save the module whose forward computes the "
           "output (" + reason + ")";
  }
  if (where.inputsFault) {
    return "the model rejected the input (" + inputs + ") in " + where.module + ": " + reason;
  }
  return "the forward failed in " + where.module + " on input " + inputs + ": " + reason;
}

} // namespace

void StepRunner::setForwardOnly(bool forwardOnly) { m_forwardOnly = forwardOnly; }

namespace {

// The loss a step computes: auto picks it by the targets, or without them by the output.
LossKind lossKindFor(LossKind wanted, const at::Tensor& out, const at::Tensor& target) {
  if (wanted != LossKind::Auto) return wanted;
  // Without targets: a loss with a floor, so a default run trains instead of diverging as
  // the mean of the output does. Classes for an [N, C] output, else regression to fixed values.
  const bool classes = out.is_floating_point() && out.dim() == 2 && out.size(1) >= 2;
  return target.defined() ? (target.is_floating_point() ? LossKind::Mse : LossKind::CrossEntropy)
         : classes        ? LossKind::CrossEntropy
                          : LossKind::Mse;
}

} // namespace

// The loss of `out` against the batch's targets (or fixed random ones); false with why.
bool StepRunner::computeLoss(const at::Tensor& out, at::Tensor target, at::Tensor* lossValue, std::string* why) {
  auto& impl = *m_impl;
  const LossKind loss = lossKindFor(impl.config.loss, out, target);
  try {
    if ((loss == LossKind::CrossEntropy || loss == LossKind::Mse) && !target.defined()) {
      // No targets in the data: make fixed random ones so the loss is still meaningful.
      if (!impl.syntheticTarget.defined()) {
        auto generator = at::make_generator<at::CPUGeneratorImpl>(impl.config.seed + 1);
        if (loss == LossKind::CrossEntropy) {
          if (out.dim() < 2) {
            *why = "cross_entropy needs an output of shape [N, classes]";
            return false;
          }
          impl.syntheticTarget =
              at::randint(0, out.size(1), {out.size(0)}, generator, at::TensorOptions().dtype(at::kLong));
        } else {
          impl.syntheticTarget = at::randn(out.sizes(), generator, out.options().requires_grad(false));
        }
      }
      target = impl.syntheticTarget;
    }
    const at::Tensor prediction = out.is_floating_point() ? out : out.to(at::kFloat);
    switch (loss) {
      case LossKind::CrossEntropy:
        *lossValue = at::cross_entropy_loss(prediction, target.to(at::kLong));
        break;
      case LossKind::Mse:
        *lossValue = at::mse_loss(prediction, target.to(prediction.scalar_type()));
        break;
      case LossKind::Sum: *lossValue = prediction.sum(); break;
      default: *lossValue = prediction.mean(); break;
    }
  } catch (const std::exception& e) {
    *why = std::string("cannot compute the ") + lossKindName(loss) + " loss on output " + describeTensors({out}) +
           ": " + summarizeTorchError(e);
    return false;
  }
  return true;
}

// Backward, the parameters' captures, and the optimizer's step with its updates' captures.
bool StepRunner::backward(at::Tensor& lossValue, StepResult* r, std::string* why) {
  auto& impl = *m_impl;
  Recorder& recorder = *impl.recorder;
  auto start = Clock::now();
  try {
    lossValue.backward();
  } catch (const std::exception& e) {
    *why = "backward failed: " + summarizeTorchError(e);
    return false;
  }
  r->backwardMs = msSince(start);
  recorder.captureParameters();
  if (impl.optimizer) {
    start = Clock::now();
    recorder.snapshotForUpdate();
    impl.optimizer->step();
    recorder.captureUpdates();
    r->optimizerMs = msSince(start);
  }
  return true;
}

// Every way a step ends well: its captures all stored before it counts as done.
void StepRunner::endStep(StepResult& r, Clock::time_point stepStart, bool scalars) {
  auto& impl = *m_impl;
  Recorder& recorder = *impl.recorder;
  recorder.finishStep();
  r.captureMs = recorder.captureSeconds() * 1e3;
  r.capturesCopied = recorder.capturesCopied();
  r.capturesShared = recorder.capturesShared();
  r.totalMs = msSince(stepStart);
  if (scalars) {
    m_store->addScalar(r.step, "loss", r.loss);
    m_store->addScalar(r.step, "lr", impl.optimizer ? impl.config.lr : 0.0);
    m_store->addScalar(r.step, "step_ms", r.totalMs);
    m_store->addScalar(r.step, "forward_ms", r.forwardMs);
    m_store->addScalar(r.step, "backward_ms", r.backwardMs);
    m_store->addScalar(r.step, "optimizer_ms", r.optimizerMs);
    m_store->addScalar(r.step, "capture_ms", r.captureMs);
  }
  recorder.setShapeProbe(false);
  ++impl.step;
}

bool StepRunner::step(StepResult* result, std::string* error) {
  auto& impl = *m_impl;
  auto fail = [&](const std::string& message) {
    if (error) *error = message;
    return false;
  };
  if (!impl.configured) return fail("the runner has no inputs yet: configure it first");
  const std::size_t batchIndex = std::size_t(impl.step) % impl.batches.size();
  const auto& inputs = impl.batches[batchIndex];
  StepResult r;
  r.step = impl.step;
  const auto stepStart = Clock::now();
  Recorder& recorder = *impl.recorder;
  recorder.beginStep(impl.step);
  TapSinkScope scope(&recorder);
  // On every way out, failures included, the step's captures are complete before it returns.
  struct DrainOnExit {
    Recorder& recorder;
    ~DrainOnExit() { recorder.finishStep(); }
  } drainOnExit{recorder};
  auto& module = m_model.impl().module;
  module.train(impl.config.train);

  std::unique_ptr<c10::NoGradGuard> noGrad;
  if (impl.config.noGrad) noGrad = std::make_unique<c10::NoGradGuard>();
  if (impl.optimizer) {
    impl.optimizer->zero_grad();
  } else {
    for (auto& p : impl.parameters) p.mutable_grad() = at::Tensor();
  }

  const auto start = Clock::now();
  c10::IValue output;
  std::vector<c10::IValue> args(inputs.begin(), inputs.end());
  try {
    output = module.forward(args);
  } catch (const std::exception& e) {
    return fail(forwardFailure(describeTensors(inputs), summarizeTorchError(e, true), failedCall(m_model, recorder)));
  }
  recorder.onRootCall(args, output);
  r.forwardMs = msSince(start);
  if (!m_forwardOnly) {  // inspect: the forward and its shapes, no loss
    const at::Tensor out = firstTensor(output);
    if (!out.defined()) return fail("the model's output holds no tensor, so no loss can be computed");
    at::Tensor lossValue;
    std::string why;
    if (!computeLoss(out, impl.targets[batchIndex], &lossValue, &why)) return fail(why);
    r.loss = lossValue.item<double>();
    r.lossFinite = std::isfinite(r.loss);
    if (!impl.config.noGrad && lossValue.requires_grad() && !backward(lossValue, &r, &why)) return fail(why);
  }
  endStep(r, stepStart, /*scalars=*/!m_forwardOnly);
  if (result) *result = r;
  return true;
}

StepRunner::RunEnd StepRunner::run(std::int64_t steps,
                                   const std::function<void(const StepResult&)>& onStep,
                                   std::string* error) {
  m_stop = false;
  for (std::int64_t done = 0; steps < 0 || done < steps; ++done) {
    {
      std::unique_lock<std::mutex> lock(m_pauseMutex);
      m_pauseChanged.wait(lock, [&] { return !m_paused.load() || m_stop.load(); });
    }
    if (m_stop.load()) return RunEnd::Stopped;
    StepResult result;
    if (!step(&result, error)) return RunEnd::Failed;
    if (onStep) onStep(result);
  }
  return RunEnd::Finished;
}

void StepRunner::requestStop() {
  {
    std::lock_guard<std::mutex> lock(m_pauseMutex);
    m_stop = true;
  }
  m_pauseChanged.notify_all();
}

void StepRunner::setPaused(bool paused) {
  {
    std::lock_guard<std::mutex> lock(m_pauseMutex);
    m_paused = paused;
  }
  m_pauseChanged.notify_all();
}

StepOrder StepRunner::lastStepOrder() const { return m_impl->recorder->order(); }

void StepRunner::probeShapes() { m_impl->recorder->setShapeProbe(true); }

std::vector<ModuleCallShape> StepRunner::outputShapes() const {
  std::vector<ModuleCallShape> result;
  const auto& modules = m_model.modules();
  for (const auto& shape : m_impl->recorder->shapes()) {
    result.push_back({modules[std::size_t(shape.module)].path, shape.call, shape.shapes});
  }
  return result;
}

void StepRunner::keepTensors(const std::vector<int>& modules) {
  std::vector<bool> keep(m_model.modules().size(), false);
  for (int m : modules) {
    if (m >= 0 && std::size_t(m) < keep.size()) keep[std::size_t(m)] = true;
  }
  m_impl->recorder->setKeepTensors(std::move(keep));
}

std::vector<char> StepRunner::keptTensorsPickle() const {
  const auto& kept = m_impl->recorder->keptTensors();
  if (kept.empty()) return {};
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : kept) dict.insert(name, tensor);
  return saveTorchFile(c10::IValue(dict));
}

} // namespace hookscope
