#pragma once
// One rank of an attached job, as the job keeps it: its link, the thread that serves it, and
// where it is in its steps. The job's lock guards every field but the link's own.

#include "links/ScriptLink.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>

namespace hookscope {

struct JobRank {
  std::unique_ptr<ScriptLink> link;
  std::thread thread;
  bool alive = true;
  bool over = false;  ///< ended, and the job's onEnded has returned
  std::string ended;
  std::int64_t reported = -1;  ///< the last step it ended
  std::int64_t pausedAt = -1;  ///< the step it says it waits after (-1: running)
  /// While running: the step it was told to wait after (a pause answering that step's end, or
  /// the last of the steps it was let run); -1: it pauses when it reads the job's pause.
  std::int64_t pauseAt = -1;
};

using JobRanks = std::map<int, JobRank>;

/// What every rank of a job is told, also a rank that attaches later: hooks, bins, rules and
/// breaks, interventions, and whether the job is paused.
struct JobControls {
  std::vector<std::uint8_t> masks;
  int bins = 64;
  RuleSettings settings;
  std::uint32_t breakMask = 0;
  bool stopOnBreak = false;
  bool paused = false;
  std::map<int, GradientIntervention> gradientOps;
  std::map<int, OutputIntervention> outputOps;

  /// Gives a rank all of them.
  void applyTo(ScriptLink& link) const;
};

} // namespace hookscope
