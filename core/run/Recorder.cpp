#include "run/Recorder.h"

#include "run/TorchStats.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace hookscope {

namespace {

void walk(const c10::IValue& value, int& index,
          const std::function<void(int, const at::Tensor&)>& fn) {
  if (value.isTensor()) {
    fn(index++, value.toTensor());
  } else if (value.isTuple()) {
    for (const auto& element : value.toTupleRef().elements()) walk(element, index, fn);
  } else if (value.isList()) {
    for (const auto& element : value.toListRef()) walk(element, index, fn);
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) walk(entry.value(), index, fn);
  }
}

std::string shapeText(const at::Tensor& tensor) {
  std::string text;
  for (std::int64_t size : tensor.sizes()) {
    if (!text.empty()) text += 'x';
    text += std::to_string(size);
  }
  return text.empty() ? "scalar" : text;
}

} // namespace

void forEachTensor(const c10::IValue& value, const std::function<void(int, const at::Tensor&)>& fn) {
  int index = 0;
  walk(value, index, fn);
}

Recorder::Recorder(std::shared_ptr<ModelImpl> model, std::shared_ptr<CaptureStore> store)
    : m_model(std::move(model)), m_store(std::move(store)),
      m_nextCall(m_model->instances.size(), 0), m_currentCall(m_model->instances.size(), 0) {
  if (std::thread::hardware_concurrency() > 1) m_worker = std::make_unique<StatsWorker>(m_store);
  auto note = [this](const at::Tensor& t) {
    if (t.defined() && t.has_storage()) m_parameterStorage.insert(t.storage().unsafeGetStorageImpl());
  };
  for (const auto& parameter : m_model->module.parameters(/*recurse=*/true)) note(parameter);
  for (const auto& buffer : m_model->module.buffers(/*recurse=*/true)) note(buffer);
}

void Recorder::finishStep() {
  if (!m_worker) return;
  const auto start = std::chrono::steady_clock::now();
  m_worker->drain();
  // A shared tensor that an in-place op changed meanwhile: its statistics may show the new
  // values, so the capture goes (a gap, not a wrong number). The series is copied from now on.
  const StatsWorker::StepEnd end = m_worker->endStep();
  for (const auto& [step, key] : end.suspect) m_store->remove(step, key);
  m_copied += end.copied;
  m_shared += end.shared;
  m_captureNanos += std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start).count();
}

void Recorder::store(std::int64_t step, SeriesKey key, const at::Tensor& tensor) {
  const auto start = std::chrono::steady_clock::now();
  if (m_worker) {
    const bool onParameter =
        tensor.has_storage() && m_parameterStorage.count(tensor.storage().unsafeGetStorageImpl());
    const bool mayShare = !isParameterKind(key.kind) && !onParameter;
    m_worker->submit(step, std::move(key), tensor, m_bins, mayShare);
  } else {
    m_store->add(step, key, computeTensorStats(tensor, m_bins));
  }
  m_captureNanos += std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start).count();
}

void Recorder::beginStep(std::int64_t step) {
  m_step = step;
  {
    std::lock_guard<std::mutex> lock(m_orderMutex);
    m_order = StepOrder();
  }
  std::fill(m_nextCall.begin(), m_nextCall.end(), 0);
  m_open.clear();
  m_returned = 0;
  m_captureNanos = 0;
  m_copied = m_shared = 0;
}

void Recorder::record(int module, int call, CaptureKind kind, int index, const at::Tensor& tensor) {
  store(m_step, SeriesKey{m_model->instancePaths[std::size_t(module)], call, kind, index}, tensor);
}

void Recorder::recordNamed(const std::string& name, CaptureKind kind, const at::Tensor& tensor) {
  store(m_step, SeriesKey{name, 0, kind, 0}, tensor);
}

void Recorder::onInput(int module, const c10::IValue& args) {
  if (module < 0 || std::size_t(module) >= m_nextCall.size()) return;
  const int call = m_nextCall[std::size_t(module)]++;
  m_currentCall[std::size_t(module)] = call;
  m_open.push_back(module);
  if (m_model->flags[std::size_t(module)].load(std::memory_order_relaxed) &
      kindBit(CaptureKind::Input)) {
    forEachTensor(args, [&](int index, const at::Tensor& t) {
      record(module, call, CaptureKind::Input, index, t);
    });
  }
}

c10::IValue Recorder::onOutput(int module, const c10::IValue& result) {
  if (module < 0 || std::size_t(module) >= m_nextCall.size()) return result;
  const int call = m_currentCall[std::size_t(module)];
  const auto open = std::find(m_open.rbegin(), m_open.rend(), module);
  if (open != m_open.rend()) m_open.erase(std::next(open).base());
  ++m_returned;
  const std::uint8_t flags = m_model->flags[std::size_t(module)].load(std::memory_order_relaxed);
  if (m_shapeProbe) noteShapes(module, call, result);
  if (std::size_t(module) < m_keep.size() && m_keep[std::size_t(module)]) {
    const std::string prefix = m_model->instancePaths[std::size_t(module)] + "/" +
                               std::to_string(call) + "/";
    forEachTensor(result, [&](int index, const at::Tensor& t) {
      m_kept[prefix + std::to_string(index)] = t.detach().clone();
    });
  }
  if (flags & kindBit(CaptureKind::Activation)) {
    forEachTensor(result, [&](int index, const at::Tensor& t) {
      record(module, call, CaptureKind::Activation, index, t);
      std::lock_guard<std::mutex> lock(m_orderMutex);
      m_order.forward.push_back({m_model->instancePaths[std::size_t(module)], call, CaptureKind::Activation, index});
    });
  }
  const bool intervene = m_model->interventionKinds[std::size_t(module)].load(std::memory_order_relaxed) !=
                         GradientIntervention::None;
  if ((flags & kindBit(CaptureKind::Gradient)) || intervene) hookGradients(module, call, result);
  const auto replace = OutputIntervention::Kind(m_model->outputInterventions[std::size_t(module)].load(std::memory_order_relaxed));
  if (replace == OutputIntervention::None || !result.isTensor()) return result;
  const at::Tensor& out = result.toTensor();
  if (replace == OutputIntervention::Zero) return at::zeros_like(out);
  if (!out.is_floating_point()) return result;  // no mean of token ids
  // The mean, broadcast into a tensor of its own (an expanded view would break in-place
  // ops that follow), and differentiable like PyTorch's `output.mean() * ones_like(output)`.
  return out.mean() * at::ones_like(out);
}

void Recorder::onRootCall(const std::vector<c10::IValue>& inputs, const c10::IValue& output) {
  m_nextCall[0] = 1;
  m_currentCall[0] = 0;
  const std::uint8_t flags = m_model->flags[0].load(std::memory_order_relaxed);
  if (flags & kindBit(CaptureKind::Input)) {
    forEachTensor(c10::ivalue::Tuple::create(inputs), [&](int index, const at::Tensor& t) {
      record(0, 0, CaptureKind::Input, index, t);
    });
  }
  (void)onOutput(0, output);  // the root's result goes to the loss as it is
}

void Recorder::hookGradients(int module, int call, const c10::IValue& result) {
  if (!at::GradMode::is_enabled()) return;
  std::weak_ptr<Recorder> weak = weak_from_this();
  const std::int64_t step = m_step;
  const bool capture = m_model->flags[std::size_t(module)].load(std::memory_order_relaxed) & kindBit(CaptureKind::Gradient);
  const auto kind = GradientIntervention::Kind(m_model->interventionKinds[std::size_t(module)].load());
  const double value = m_model->interventionValues[std::size_t(module)].load();
  forEachTensor(result, [&](int index, const at::Tensor& t) {
    if (!t.requires_grad()) return;
    // Hooks on the tensor, not an identity autograd function: in-place ops that follow
    // (ReLU(inplace=True)) would break the latter.
    at::Tensor handle = t;
    if (capture) {
      handle.register_hook([weak, step, module, call, index](const at::Tensor& grad) {
        auto self = weak.lock();
        if (!self || !grad.defined()) return;
        SeriesKey key{self->m_model->instancePaths[std::size_t(module)], call, CaptureKind::Gradient, index};
        self->store(step, key, grad);
        std::lock_guard<std::mutex> lock(self->m_orderMutex);
        if (self->m_step == step) self->m_order.backward.push_back(std::move(key));
      });
    }
    // Registered after the capture, so the capture sees the gradient before the change.
    if (kind == GradientIntervention::Clamp) {
      handle.register_hook([value](const at::Tensor& grad) { return grad.clamp(-value, value); });
    } else if (kind == GradientIntervention::Scale) {
      handle.register_hook([value](const at::Tensor& grad) { return grad * value; });
    } else if (kind == GradientIntervention::Zero) {
      handle.register_hook([](const at::Tensor& grad) { return at::zeros_like(grad); });
    }
  });
}

void Recorder::noteShapes(int module, int call, const c10::IValue& result) {
  std::vector<std::string> shapes;
  forEachTensor(result, [&](int, const at::Tensor& t) { shapes.push_back(shapeText(t)); });
  m_shapes[{module, call}] = std::move(shapes);
}

StepOrder Recorder::order() const {
  std::lock_guard<std::mutex> lock(m_orderMutex);
  return m_order;
}

std::vector<CallShape> Recorder::shapes() const {
  std::vector<CallShape> result;
  for (const auto& [where, shapes] : m_shapes) result.push_back({where.first, where.second, shapes});
  return result;
}

void Recorder::captureParameters() {
  for (std::size_t m = 0; m < m_model->instances.size(); ++m) {
    const std::uint8_t flags = m_model->flags[m].load(std::memory_order_relaxed);
    if (!(flags & (kindBit(CaptureKind::Param) | kindBit(CaptureKind::ParamGrad)))) continue;
    for (const auto& [name, param] : m_model->ownParams[m]) {
      if (flags & kindBit(CaptureKind::Param)) recordNamed(name, CaptureKind::Param, param);
      if ((flags & kindBit(CaptureKind::ParamGrad)) && param.grad().defined()) {
        recordNamed(name, CaptureKind::ParamGrad, param.grad());
      }
    }
  }
}

void Recorder::snapshotForUpdate() {
  m_updateBefore.clear();
  c10::NoGradGuard noGrad;
  for (std::size_t m = 0; m < m_model->instances.size(); ++m) {
    if (!(m_model->flags[m].load(std::memory_order_relaxed) & kindBit(CaptureKind::Update))) continue;
    for (const auto& [name, param] : m_model->ownParams[m]) {
      m_updateBefore.push_back({name, param, param.detach().clone()});
    }
  }
}

void Recorder::captureUpdates() {
  c10::NoGradGuard noGrad;
  for (const auto& snapshot : m_updateBefore) {
    const double norm = snapshot.before.norm().item<double>();
    at::Tensor relative = (snapshot.param.detach() - snapshot.before) / (norm > 0 ? norm : 1.0);
    recordNamed(snapshot.name, CaptureKind::Update, relative);
  }
  m_updateBefore.clear();
}

} // namespace hookscope
