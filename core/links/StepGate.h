#pragma once
// The check at the end of each step of one attached process: the rules run on what it sent,
// its dropped captures kept as gaps, and the armed rules that decide whether it goes on,
// pauses or stops there. Plain data: its owner (ScriptLink) locks it.

#include "files/ExportManifest.h"
#include "links/AttachedStep.h"

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace hookscope {

class StepGate {
public:
  /// Rules with these thresholds, for a process of `rank` whose tree is `modules`.
  void setRules(const RuleSettings& settings, int rank, const std::vector<ModuleInfo>& modules);
  /// The rules that pause (or with stopOnBreak, stop) the process. True when whether any is
  /// armed changed: the process then waits (or no longer waits) at each step's end.
  bool setBreakRules(std::uint32_t mask, bool stopOnBreak);
  bool armed() const { return m_breakRules != 0; }

  /// Checks `done` (its step's captures are in `store`, reached in `order`): its alerts and
  /// break, `gap` kept when it dropped captures. Returns how the step is answered, and why.
  /// An anomaly breaks once per excursion: where its series leaves its band, not again at each
  /// step it stays out (a second excursion, or another series leaving, breaks again).
  StepAnswer check(CaptureStore& store, const StepOrder& order, GapRecord gap, int rank, AttachedStep* done,
                   std::string* reason);

  const std::vector<Alert>& alerts() const { return m_rules->alerts(); }
  const std::vector<GapRecord>& gaps() const { return m_gaps; }

private:
  std::unique_ptr<RuleEvaluator> m_rules;
  std::vector<GapRecord> m_gaps;
  /// The series out of their band (anomaly) at the last step checked: (module, kind).
  std::set<std::pair<std::string, CaptureKind>> m_outOfBand;
  std::uint32_t m_breakRules = 0;
  bool m_stopOnBreak = false;
};

} // namespace hookscope
