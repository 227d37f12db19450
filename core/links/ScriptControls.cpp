#include "links/ScriptControls.h"

#include "common/CaptureKind.h"
#include "wire/WireJson.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace hookscope {

using nlohmann::json;

void ScriptControls::setModules(const std::vector<ModuleInfo>& modules) {
  m_paths.clear();
  for (const auto& m : modules) m_paths.push_back(m.path);
  m_hooks.assign(modules.size(), 0);
}

bool ScriptControls::setHooks(int module, std::uint8_t mask) {
  if (module < 0 || std::size_t(module) >= m_hooks.size() || m_hooks[std::size_t(module)] == mask) return false;
  m_hooks[std::size_t(module)] = mask;
  return true;
}

bool ScriptControls::setAllHooks(const std::vector<std::uint8_t>& masks) {
  if (masks.size() != m_hooks.size()) return false;
  m_hooks = masks;
  return true;
}

bool ScriptControls::setGradientIntervention(int module, GradientIntervention intervention, std::int64_t step) {
  if (module < 0 || std::size_t(module) >= m_paths.size()) return false;
  logIntervention(&m_log, m_paths[std::size_t(module)], "gradient", intervention.describe(), step);
  if (intervention.kind == GradientIntervention::None) {
    m_gradientOps.erase(module);
  } else {
    m_gradientOps[module] = intervention;
  }
  return true;
}

bool ScriptControls::setOutputIntervention(int module, OutputIntervention intervention, std::int64_t step) {
  if (module <= 0 || std::size_t(module) >= m_paths.size()) return false;
  logIntervention(&m_log, m_paths[std::size_t(module)], "output", intervention.describe(), step);
  if (intervention.kind == OutputIntervention::None) {
    m_outputOps.erase(module);
  } else {
    m_outputOps[module] = intervention;
  }
  return true;
}

std::vector<InterventionRecord> ScriptControls::interventions(std::int64_t stepsDone) const {
  auto out = m_log;
  for (auto& record : out) {
    if (record.toStep < 0) record.toStep = std::max<std::int64_t>(record.fromStep, stepsDone - 1);
  }
  return out;
}

std::string ScriptControls::message(const char* type, bool sync, int bins, bool paused) const {
  json hooks = json::object();
  for (std::size_t i = 0; i < m_hooks.size(); ++i) {
    if (!m_hooks[i]) continue;
    hooks[m_paths[i]] = captureKindNames(m_hooks[i]);
  }
  json gradient = json::object();
  for (const auto& [module, gi] : m_gradientOps) {
    const char* kind = gi.kind == GradientIntervention::Clamp ? "clamp" : gi.kind == GradientIntervention::Scale ? "scale" : "zero";
    gradient[m_paths[std::size_t(module)]] = json::array({kind, gi.value});
  }
  json output = json::object();
  for (const auto& [module, oi] : m_outputOps) output[m_paths[std::size_t(module)]] = oi.describe();
  return wireText(json{{"type", type},
                       {"hooks", hooks},
                       {"gradient", gradient},
                       {"output", output},
                       {"sync", sync},
                       {"bins", bins},
                       {"paused", paused},
                       {"binary_stats", true}});
}

} // namespace hookscope
