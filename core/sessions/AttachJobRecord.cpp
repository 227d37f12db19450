#include "sessions/AttachJob.h"

#include <algorithm>

// What a job recorded, gathered from its ranks for the window and the export: alerts, gaps,
// interventions, the scripts, and the manifest.

namespace hookscope {

std::vector<Alert> AttachJob::alerts() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::vector<Alert> out;
  for (const auto& [rank, r] : m_ranks) {
    const auto alerts = r.session->alerts();
    out.insert(out.end(), alerts.begin(), alerts.end());
  }
  const auto& own = m_jobRules.alerts();
  out.insert(out.end(), own.begin(), own.end());
  std::stable_sort(out.begin(), out.end(), [](const Alert& a, const Alert& b) { return a.step < b.step; });
  return out;
}

std::vector<GapRecord> AttachJob::gaps() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::vector<GapRecord> out;
  for (const auto& [rank, r] : m_ranks) {
    const auto gaps = r.session->gaps();
    out.insert(out.end(), gaps.begin(), gaps.end());
  }
  return out;
}

std::vector<InterventionRecord> AttachJob::interventions() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_ranks.empty() ? std::vector<InterventionRecord>{} : m_ranks.begin()->second.session->interventions();
}

std::vector<ScriptRecord> AttachJob::scripts() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::vector<ScriptRecord> out;
  for (const auto& [rank, r] : m_ranks) {
    ScriptRecord s = r.session->script();
    s.ended = r.alive ? "still attached" : r.ended;
    s.steps = r.session->stepsDone();
    out.push_back(std::move(s));
  }
  return out;
}

ExportManifest AttachJob::manifest() const {
  const auto ranks = scripts();
  ExportManifest manifest;
  manifest.hookscopeVersion = HOOKSCOPE_VERSION;
  manifest.config.optimizer = OptimizerKind::None;
  manifest.thinning = m_store->thinning();
  manifest.memoryCapBytes = m_store->capBytes();
  manifest.gaps = gaps();
  manifest.interventions = interventions();
  if (!ranks.empty()) {
    manifest.modelFile = ranks.front().name;
    manifest.script = ranks.front();
    if (ranks.size() > 1 || ranks.front().worldSize > 1) manifest.ranks = ranks;
  }
  for (const auto& s : ranks) manifest.steps = std::max(manifest.steps, s.steps);
  std::lock_guard<std::mutex> lock(m_mutex);
  manifest.config.bins = m_bins;
  for (std::size_t i = 0; i < m_masks.size() && i < m_modules.size(); ++i) {
    if (m_masks[i]) manifest.hooked.push_back({m_modules[i].path, captureKindNames(m_masks[i])});
  }
  return manifest;
}

ExportManifest AttachJob::modelFileManifest(const std::string& modelFile, const std::string& sha256,
                                            const std::vector<ConfigRecord>& configHistory) const {
  ExportManifest out = manifest();
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
