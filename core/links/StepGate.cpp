#include "links/StepGate.h"

#include <map>

namespace hookscope {

void StepGate::setRules(const RuleSettings& settings, int rank, const std::vector<ModuleInfo>& modules) {
  auto rules = std::make_unique<RuleEvaluator>(settings);
  rules->setRank(rank);
  std::map<std::string, std::string> types;
  for (const auto& m : modules) types[m.path] = m.typeName;
  rules->setModuleTypes(types);
  m_rules = std::move(rules);
}

bool StepGate::setBreakRules(std::uint32_t mask, bool stopOnBreak) {
  const bool changed = (m_breakRules != 0) != (mask != 0);
  m_breakRules = mask;
  m_stopOnBreak = stopOnBreak;
  return changed;
}

StepAnswer StepGate::check(CaptureStore& store, const StepOrder& order, GapRecord gap, int rank, AttachedStep* done,
                           std::string* reason) {
  const std::size_t anomaly = std::size_t(RuleKind::Anomaly);
  if ((m_breakRules & (1u << anomaly)) && !m_rules->settings().enabled[anomaly]) {
    RuleSettings settings = m_rules->settings();  // off until asked for: breaking on it is asking
    settings.enabled[anomaly] = true;
    m_rules->setSettings(settings);
  }
  done->alerts = m_rules->evaluate(store, done->step, order);
  store.setAlertBytes(m_rules->bytes(), rank);
  if (done->droppedCaptures > 0) {
    gap.captures = done->droppedCaptures;
    gap.bytes = done->droppedBytes;
    m_gaps.push_back(std::move(gap));
  }
  std::set<std::pair<std::string, CaptureKind>> outOfBand;
  for (const auto& alert : done->alerts) {
    if (alert.rule == RuleKind::Anomaly) outOfBand.emplace(alert.module, alert.kind);
  }
  for (const auto& alert : done->alerts) {
    const bool stillOut = alert.rule == RuleKind::Anomaly && m_outOfBand.count({alert.module, alert.kind});
    if ((m_breakRules & (1u << unsigned(alert.rule))) && !stillOut) {
      done->breakAlert = alert;
      break;
    }
  }
  m_outOfBand = std::move(outOfBand);
  if (!done->breakAlert) return StepAnswer::Go;
  *reason = std::string("HookScope stopped the run at step ") + std::to_string(done->step) + " on " +
            ruleName(done->breakAlert->rule) + ": " + done->breakAlert->message;
  return m_stopOnBreak ? StepAnswer::Stop : StepAnswer::Pause;
}

} // namespace hookscope
