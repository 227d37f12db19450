#pragma once
// The step boundary of a job of several ranks: a step is settled once every live rank has
// ended it. Then the ranks' parameter prints are compared (rank_divergence), the first armed
// rule that fired on any rank pauses or stops all of them at that step, and each rank is
// released. A pause lines the ranks up: one stopped behind the others is stepped up to them.
// Plain data: the job's lock guards it.

#include "rules/RankDivergence.h"
#include "links/JobRank.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hookscope {

class JobGate {
public:
  /// Called for each settled step: the job's own alerts of it and the break of every rank.
  using OnSettled = std::function<void(std::int64_t step, const std::vector<Alert>& alerts,
                                       const std::optional<Alert>& breakAlert)>;

  /// A rank ended `step`: what it sent for the job's checks.
  void rankEnded(int rank, const AttachedStep& step);
  /// Settles every step all live ranks have ended, in order; `controls.paused` is set when a
  /// break pauses the job. `parameters` name the prints; `worldSize` says whether it is a job.
  void settle(JobRanks& ranks, JobControls& controls, const std::vector<std::string>& parameters, int worldSize,
              const OnSettled& onSettled);
  /// With the job paused: steps ranks paused behind the furthest up to it.
  void align(JobRanks& ranks, const JobControls& controls) const;

  /// The newest step settled (-1: none yet).
  std::int64_t settled() const { return m_settled; }
  /// The first break that paused or stopped the job.
  const std::optional<Alert>& breakAlert() const { return m_breakAlert; }
  /// rank_divergence's alerts, grouped.
  const std::vector<Alert>& alerts() const { return m_jobRules.alerts(); }
  void setRuleSettings(const RuleSettings& settings) { m_jobRules.setSettings(settings); }

private:
  /// What the ranks sent at one step's end, until every live rank has sent it.
  struct PendingStep {
    std::map<int, RankPrints> prints;
    std::map<int, std::optional<Alert>> breaks;
  };

  std::map<std::int64_t, PendingStep> m_pending;
  RuleEvaluator m_jobRules;  ///< keeps the rank_divergence alerts, grouped
  std::optional<Alert> m_breakAlert;
  std::int64_t m_settled = -1;
};

} // namespace hookscope
