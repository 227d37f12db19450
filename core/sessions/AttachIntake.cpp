#include "sessions/AttachSession.h"

#include "wire/WireJson.h"
#include "wire/WireStats.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <limits>

// What an attached script reports: each step's statistics into the store, the step's end with
// its scalars, shapes, dropped captures and parameter prints, and the rules run on it.

namespace hookscope {

using nlohmann::json;

namespace {

constexpr std::size_t kMaxNamedGaps = 64;

} // namespace

void AttachSession::setRuleSettings(const RuleSettings& settings) {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  auto rules = std::make_unique<RuleEvaluator>(settings);
  rules->setRank(m_script.rank);
  std::map<std::string, std::string> types;
  for (const auto& m : m_modules) types[m.path] = m.typeName;
  rules->setModuleTypes(types);
  m_rules = std::move(rules);
}

std::vector<Alert> AttachSession::alerts() const {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  return m_rules->alerts();
}

std::vector<GapRecord> AttachSession::gaps() const {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  return m_gaps;
}

bool AttachSession::seriesKey(const json& message, CaptureKind kind, std::int64_t call, std::int64_t index,
                              const char* what, SeriesKey* key, std::string* error) const {
  key->call = int(call);
  key->kind = kind;
  key->index = int(index);
  key->rank = m_script.rank;
  if (isParameterKind(kind)) {
    key->module = wireString(message, "param");
    key->call = 0;
    if (key->module.empty()) {
      *error = std::string(what) + " of a parameter kind names no parameter";
      return false;
    }
    return true;
  }
  bool ok = true;
  const auto module = wireInt(message, "module", 0, std::int64_t(m_modules.size()) - 1, &ok);
  if (!ok) {
    *error = std::string(what) + " names no module of the hello";
    return false;
  }
  key->module = m_modules[std::size_t(module)].path;
  return true;
}

// Statistics a script or an engine computed in its own process, where the tensors live.
bool AttachSession::handleStats(const json& message, std::string* error) {
  bool ok = true;
  const auto step = wireInt(message, "step", 0, std::numeric_limits<std::int64_t>::max(), &ok);
  if (!ok || step != m_step) {
    *error = "statistics of step " + std::to_string(step) + " came during step " + std::to_string(m_step);
    return false;
  }
  const auto list = message.find("captures");
  if (list == message.end() || !list->is_array()) {
    *error = "a stats message has no captures";
    return false;
  }
  for (const auto& entry : *list) {
    if (!entry.is_object()) {
      *error = "a stats entry is not an object";
      return false;
    }
    const auto call = wireInt(entry, "call", 0, std::numeric_limits<int>::max(), &ok);
    const auto index = wireInt(entry, "index", 0, std::numeric_limits<int>::max(), &ok);
    const auto kind = parseCaptureKind(wireString(entry, "kind"));
    if (!ok || !kind) {
      *error = "a stats entry lacks call, index or kind, or has one out of range";
      return false;
    }
    SeriesKey key;
    if (!seriesKey(entry, *kind, call, index, "a stats entry", &key, error)) return false;
    TensorStats stats;
    if (!statsFromWire(entry, &stats, error)) return false;
    if (key.kind == CaptureKind::Activation) m_order.forward.push_back(key);
    if (key.kind == CaptureKind::Gradient) m_order.backward.push_back(key);
    m_store->add(step, key, std::move(stats));
    ++m_stepCaptures;
  }
  return true;
}

bool AttachSession::handleStep(const json& message, std::string* error) {
  bool ok = true;
  const auto step = wireInt(message, "step", 0, std::numeric_limits<std::int64_t>::max(), &ok);
  if (!ok || step != m_step) {
    *error = "step " + std::to_string(step) + " ended, but step " + std::to_string(m_step) + " was running";
    return false;
  }
  AttachedStep done;
  done.step = step;
  done.captures = m_stepCaptures;
  if (const auto it = message.find("scalars"); it != message.end() && it->is_object()) {
    for (const auto& [name, value] : it->items()) {
      double number = 0;
      if (name.empty() || name.size() > 256 || !wireNumberFrom(value, &number)) continue;
      done.scalars[name] = number;
      m_store->addScalar(step, name, number, m_script.rank);
    }
  }
  GapRecord gap{step, 0, 0, m_script.rank, {}};
  if (const auto it = message.find("dropped"); it != message.end() && it->is_object()) {
    bool counted = true;
    done.droppedCaptures = wireInt(*it, "captures", 0, std::numeric_limits<std::int64_t>::max(), &counted);
    if (!counted) done.droppedCaptures = 0;
    if (it->contains("bytes")) done.droppedBytes = wireInt(*it, "bytes", 0, std::numeric_limits<std::int64_t>::max(), &counted);
    if (!counted) done.droppedBytes = 0;
    if (done.droppedCaptures > 0) m_store->addScalar(step, "dropped_captures", double(done.droppedCaptures), m_script.rank);
    // Which series lost this step, and why (the script names up to 64 of them).
    if (const auto list = it->find("series"); list != it->end() && list->is_array()) {
      for (const auto& entry : *list) {
        if (gap.series.size() >= kMaxNamedGaps || !entry.is_object()) break;
        bool fine = true;
        const auto call = wireInt(entry, "call", 0, std::numeric_limits<int>::max(), &fine);
        const auto index = wireInt(entry, "index", 0, std::numeric_limits<int>::max(), &fine);
        const auto kind = parseCaptureKind(wireString(entry, "kind"));
        SeriesKey key;
        std::string ignored;
        if (!fine || !kind || !seriesKey(entry, *kind, call, index, "a gap", &key, &ignored)) continue;
        gap.series.push_back({key, wireString(entry, "reason")});
      }
    }
  }
  if (const auto it = message.find("fingerprint"); it != message.end() && it->is_object()) {
    // Per parameter [sum, norm] of its values and of its gradient (null: no gradient).
    auto prints = [&](const char* field, std::vector<std::array<double, 2>>* out) {
      const auto list = it->find(field);
      if (list == it->end() || !list->is_array() || list->size() != m_parameters.size()) return;
      for (const auto& pair : *list) {
        std::array<double, 2> v{std::nan(""), std::nan("")};
        if (pair.is_array() && pair.size() == 2) {
          wireNumberFrom(pair[0], &v[0]);
          wireNumberFrom(pair[1], &v[1]);
        }
        out->push_back(v);
      }
    };
    prints("params", &done.parameterPrints);
    prints("grads", &done.gradientPrints);
  }
  if (const auto it = message.find("shapes"); it != message.end() && it->is_object()) {
    for (const auto& [module, calls] : it->items()) {
      const auto index = std::strtoll(module.c_str(), nullptr, 10);
      if (index < 0 || index >= std::int64_t(m_modules.size()) || !calls.is_array()) continue;
      int call = 0;
      for (const auto& tensors : calls) {  // per call, the shape of each tensor of the output
        ModuleCallShape shape{m_modules[std::size_t(index)].path, call++, {}};
        if (tensors.is_array()) {
          for (const auto& text : tensors) {
            if (text.is_string()) shape.shapes.push_back(text.get<std::string>());
          }
        }
        done.shapes.push_back(std::move(shape));
      }
    }
  }
  StepAnswer answer = StepAnswer::Go;
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    done.alerts = m_rules->evaluate(*m_store, step, m_order);
    m_store->setAlertBytes(m_rules->bytes(), m_script.rank);
    if (done.droppedCaptures > 0) {
      gap.captures = done.droppedCaptures;
      gap.bytes = done.droppedBytes;
      m_gaps.push_back(std::move(gap));
    }
    for (const auto& alert : done.alerts) {
      if (m_breakRules & (1u << unsigned(alert.rule))) {
        done.breakAlert = alert;
        break;
      }
    }
    if (done.breakAlert) {
      answer = m_stopOnBreak ? StepAnswer::Stop : StepAnswer::Pause;
      reason = std::string("HookScope stopped the run at step ") + std::to_string(step) + " on " +
               ruleName(done.breakAlert->rule) + ": " + done.breakAlert->message;
    }
  }
  if (!m_gate) release(step, answer, reason);
  const auto now = std::chrono::steady_clock::now();
  done.seconds = std::chrono::duration<double>(now - m_lastStepEnd).count();
  m_lastStepEnd = now;
  m_step = step + 1;
  m_stepsDone = m_step;
  m_order = StepOrder{};
  m_stepCaptures = 0;
  if (m_onStep) m_onStep(done);
  if (m_gate) m_gate(done);
  return true;
}

} // namespace hookscope
