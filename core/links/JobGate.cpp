#include "links/JobGate.h"

#include <algorithm>

namespace hookscope {

void JobControls::applyTo(ScriptLink& link) const {
  link.setAllHooks(masks);
  link.setBins(bins);
  link.setRuleSettings(settings);
  link.setBreakRules(breakMask, stopOnBreak);
  for (const auto& [module, op] : gradientOps) link.setGradientIntervention(module, op);
  for (const auto& [module, op] : outputOps) link.setOutputIntervention(module, op);
  if (paused) link.pause();
}

void JobGate::rankEnded(int rank, const AttachedStep& step) {
  PendingStep& pending = m_pending[step.step];
  pending.prints[rank] = RankPrints{step.parameterPrints, step.gradientPrints};
  pending.breaks[rank] = step.breakAlert;
}

void JobGate::settle(JobRanks& ranks, JobControls& controls, const std::vector<std::string>& parameters,
                     int worldSize, const OnSettled& onSettled) {
  while (!m_pending.empty()) {
    const auto first = m_pending.begin();
    const std::int64_t step = first->first;
    const bool complete = std::all_of(ranks.begin(), ranks.end(), [&](const auto& entry) {
      return !entry.second.alive || entry.second.reported >= step;
    });
    if (!complete) return;
    PendingStep pending = std::move(first->second);
    m_pending.erase(first);

    std::optional<Alert> breakAlert;
    std::vector<Alert> fired;
    for (const auto& [rank, alert] : pending.breaks) {  // the lowest rank's, as ranks ascend
      if (alert && !breakAlert) breakAlert = alert;
    }
    const RuleSettings& settings = controls.settings;
    if (settings.enabled[std::size_t(RuleKind::RankDivergence)] && pending.prints.size() > 1) {
      fired = rankDivergence(step, parameters, pending.prints, settings.divergence);
      m_jobRules.add(fired);
      if (!fired.empty() && !breakAlert && (controls.breakMask & (1u << unsigned(RuleKind::RankDivergence)))) {
        breakAlert = fired.front();
      }
    }
    auto answer = StepAnswer::Go;
    std::string reason;
    if (breakAlert) {
      if (!m_breakAlert) m_breakAlert = breakAlert;
      answer = controls.stopOnBreak ? StepAnswer::Stop : StepAnswer::Pause;
      const bool alone = ranks.size() == 1 && worldSize <= 1;
      reason = std::string("HookScope stopped the ") + (alone ? "run" : "job") + " at step " + std::to_string(step) +
               " on " + ruleName(breakAlert->rule) + (alone ? "" : " (rank " + std::to_string(breakAlert->rank) + ")") +
               ": " + breakAlert->message;
      if (answer == StepAnswer::Pause) controls.paused = true;
    }
    for (auto& [rank, r] : ranks) {
      if (!r.alive || !pending.prints.count(rank)) continue;
      r.link->release(step, answer, reason);
      if (answer == StepAnswer::Pause) r.pauseAt = step;
    }
    m_settled = std::max(m_settled, step);
    if (onSettled) onSettled(step, fired, breakAlert);
  }
}

void JobGate::align(JobRanks& ranks, const JobControls& controls) const {
  if (!controls.paused) return;
  // The step every rank will wait after: the furthest a paused rank waits at, or a running
  // rank will reach: the step a pause answered, else the end of the step it is in (at the
  // earliest; if it stops a step sooner, the others are not stepped past it: it is stepped up).
  std::int64_t target = -1;
  for (const auto& [rank, r] : ranks) {
    if (!r.alive) continue;
    target = std::max(target, r.pausedAt >= 0 ? r.pausedAt : r.pauseAt >= 0 ? r.pauseAt : r.reported + 1);
  }
  for (auto& [rank, r] : ranks) {
    if (r.alive && r.pausedAt >= 0 && r.pausedAt < target) {
      r.link->step(int(target - r.pausedAt));
      r.pauseAt = target;
      r.pausedAt = -1;
    }
  }
}

} // namespace hookscope
