#include "sessions/AttachSession.h"

#include "wire/AttachListener.h"
#include "wire/WireFrame.h"
#include "wire/WireJson.h"

#include <nlohmann/json.hpp>

#include <algorithm>

// What HookScope sends an attached script: hook masks, interventions, pause, step and stop,
// armed break rules, the answers to a job's gate, and an engine's run configuration. Commands
// may come from any thread; one before the welcome waits for it.

namespace hookscope {

using nlohmann::json;

bool AttachSession::send(const std::string& jsonText) {
  std::lock_guard<std::mutex> lock(m_sendMutex);
  return sendAll(m_fd, wire::encodeFrame(wire::kJsonFrame, jsonText));
}

void AttachSession::sendOrQueue(const std::string& jsonText) {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  if (m_welcomed) {
    send(jsonText);
  } else if (!m_served) {
    m_beforeWelcome.push_back(jsonText);  // serve() sends it right after the welcome
  }
}

std::string AttachSession::hooksMessage(const char* type) const {
  json hooks = json::object();
  for (std::size_t i = 0; i < m_hooks.size(); ++i) {
    if (!m_hooks[i]) continue;
    hooks[m_modules[i].path] = captureKindNames(m_hooks[i]);
  }
  json gradient = json::object();
  for (const auto& [module, gi] : m_gradientOps) {
    const char* kind = gi.kind == GradientIntervention::Clamp ? "clamp" : gi.kind == GradientIntervention::Scale ? "scale" : "zero";
    gradient[m_modules[std::size_t(module)].path] = json::array({kind, gi.value});
  }
  json output = json::object();
  for (const auto& [module, oi] : m_outputOps) output[m_modules[std::size_t(module)].path] = oi.describe();
  return wireText(json{{"type", type},
              {"hooks", hooks},
              {"gradient", gradient},
              {"output", output},
              {"sync", m_breakRules != 0},
              {"bins", m_bins},
              {"paused", m_paused.load()}});
}

void AttachSession::setHooks(int module, std::uint8_t mask) {
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    if (module < 0 || std::size_t(module) >= m_hooks.size() || m_hooks[std::size_t(module)] == mask) return;
    m_hooks[std::size_t(module)] = mask;
    if (m_welcomed) send(hooksMessage("hooks"));
  }
}

void AttachSession::setAllHooks(const std::vector<std::uint8_t>& masks) {
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    if (masks.size() != m_hooks.size()) return;
    m_hooks = masks;
    if (m_welcomed) send(hooksMessage("hooks"));
  }
}

std::vector<std::uint8_t> AttachSession::hooks() const {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  return m_hooks;
}

void AttachSession::setGradientIntervention(int module, GradientIntervention intervention) {
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    if (module < 0 || std::size_t(module) >= m_modules.size()) return;
    logIntervention(&m_interventionLog, m_modules[std::size_t(module)].path, "gradient", intervention.describe(),
                    m_stepsDone.load());
    if (intervention.kind == GradientIntervention::None) {
      m_gradientOps.erase(module);
    } else {
      m_gradientOps[module] = intervention;
    }
    if (m_welcomed) send(hooksMessage("hooks"));
  }
}

void AttachSession::setOutputIntervention(int module, OutputIntervention intervention) {
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    if (module <= 0 || std::size_t(module) >= m_modules.size()) return;  // the root's output is the loss's input
    logIntervention(&m_interventionLog, m_modules[std::size_t(module)].path, "output", intervention.describe(),
                    m_stepsDone.load());
    if (intervention.kind == OutputIntervention::None) {
      m_outputOps.erase(module);
    } else {
      m_outputOps[module] = intervention;
    }
    if (m_welcomed) send(hooksMessage("hooks"));
  }
}

std::vector<InterventionRecord> AttachSession::interventions() const {
  std::lock_guard<std::mutex> lock(m_stateMutex);
  auto out = m_interventionLog;
  for (auto& record : out) {
    if (record.toStep < 0) record.toStep = std::max<std::int64_t>(record.fromStep, m_stepsDone - 1);
  }
  return out;
}

void AttachSession::pause() {
  m_paused = true;
  sendOrQueue(R"({"type":"pause"})");
}

void AttachSession::resume() {
  m_paused = false;
  sendOrQueue(R"({"type":"run"})");
}

void AttachSession::step(int count) {
  m_paused = true;  // after those steps
  sendOrQueue(wireText(json{{"type", "step"}, {"count", std::max(1, count)}}));
}

void AttachSession::stop(const std::string& reason) { sendOrQueue(wireText(json{{"type", "stop"}, {"reason", reason}})); }

void AttachSession::setBreakRules(std::uint32_t mask, bool stopOnBreak) {
  bool changed;
  {
    std::lock_guard<std::mutex> lock(m_stateMutex);
    changed = (m_breakRules != 0) != (mask != 0);
    m_breakRules = mask;
    m_stopOnBreak = stopOnBreak;
  }
  if (changed && m_welcomed) send(wireText(json{{"type", "sync"}, {"on", mask != 0}}));
}

void AttachSession::setOnEngineEvent(std::function<void(const std::string&, const std::string&)> onEvent) {
  m_onEngineEvent = std::move(onEvent);
}

void AttachSession::configure(const std::string& configText) {
  json config;
  try {
    config = json::parse(configText);
  } catch (const std::exception&) {
    return;  // runConfigText's own output: cannot happen
  }
  sendOrQueue(wireText(json{{"type", "configure"}, {"config", config}}));
}

void AttachSession::setGate(std::function<void(const AttachedStep&)> gate, std::function<void(std::int64_t)> paused) {
  m_gate = std::move(gate);
  m_pausedHeard = std::move(paused);
}

void AttachSession::release(std::int64_t step, StepAnswer answer, const std::string& reason) {
  // The pause comes before the acknowledgement the script waits for, so it stops at this step.
  if (answer == StepAnswer::Pause) {
    m_paused = true;
    send(R"({"type":"pause"})");
  } else if (answer == StepAnswer::Stop) {
    send(wireText(json{{"type", "stop"}, {"reason", reason}}));
  }
  send(wireText(json{{"type", "ack"}, {"step", step}}));
}

} // namespace hookscope
