#include "links/JobRecord.h"

#include "common/CaptureKind.h"

#include <algorithm>

namespace hookscope {

JobRecord::JobRecord(const JobRanks& ranks, const std::vector<Alert>& jobAlerts) {
  for (const auto& [rank, r] : ranks) {
    const auto alerts = r.link->alerts();
    m_alerts.insert(m_alerts.end(), alerts.begin(), alerts.end());
    const auto gaps = r.link->gaps();
    m_gaps.insert(m_gaps.end(), gaps.begin(), gaps.end());
    ScriptRecord s = r.link->script();
    s.ended = r.alive ? "still attached" : r.ended;
    s.steps = r.link->stepsDone();
    m_scripts.push_back(std::move(s));
  }
  m_alerts.insert(m_alerts.end(), jobAlerts.begin(), jobAlerts.end());
  std::stable_sort(m_alerts.begin(), m_alerts.end(), [](const Alert& a, const Alert& b) { return a.step < b.step; });
  if (!ranks.empty()) m_interventions = ranks.begin()->second.link->interventions();
}

ExportManifest JobRecord::manifest(const CaptureStore& store, const std::vector<ModuleInfo>& modules,
                                   const std::map<std::string, std::vector<std::string>>& shapes,
                                   const std::vector<std::uint8_t>& masks, int bins) const {
  ExportManifest manifest;
  manifest.hookscopeVersion = HOOKSCOPE_VERSION;
  manifest.config.optimizer = OptimizerKind::None;
  manifest.thinning = store.thinning();
  manifest.memoryCapBytes = store.capBytes();
  manifest.gaps = m_gaps;
  manifest.interventions = m_interventions;
  if (!m_scripts.empty()) {
    manifest.modelFile = m_scripts.front().name;
    manifest.script = m_scripts.front();
    if (m_scripts.size() > 1 || m_scripts.front().worldSize > 1) manifest.ranks = m_scripts;
  }
  for (const auto& s : m_scripts) manifest.steps = std::max(manifest.steps, s.steps);
  manifest.config.bins = bins;
  manifest.modules = moduleRecords(modules, shapes);
  for (std::size_t i = 0; i < masks.size() && i < modules.size(); ++i) {
    if (masks[i]) manifest.hooked.push_back({modules[i].path, captureKindNames(masks[i])});
  }
  return manifest;
}

ExportManifest JobRecord::asModelFile(ExportManifest out, const std::string& modelFile, const std::string& sha256,
                                      const std::vector<ConfigRecord>& configHistory) {
  out.script.reset();
  out.ranks.clear();
  out.modelFile = modelFile;
  out.modelSha256 = sha256;
  out.config = configHistory.empty() ? RunConfig{} : configHistory.back().config;
  for (const auto& record : configHistory) {
    if (record.fromStep >= out.steps) continue;
    out.configurations.push_back(record);
    if (out.configurations.back().toStep < 0) out.configurations.back().toStep = out.steps - 1;
  }
  if (!out.configurations.empty()) out.config = out.configurations.back().config;
  return out;
}

} // namespace hookscope
