#pragma once
// One step an attached process ended, as HookScope received and checked it.

#include "common/ModelTypes.h"
#include "rules/RuleEvaluator.h"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hookscope {

/// One step the script finished, as received.
struct AttachedStep {
  std::int64_t step = 0;
  std::map<std::string, double> scalars;  ///< "loss", "lr" and the script's own
  std::vector<ModuleCallShape> shapes;    ///< output shapes, with the first step
  std::vector<Alert> alerts;              ///< rules that fired on it
  std::optional<Alert> breakAlert;        ///< the armed rule that paused (or stopped) the script here
  int captures = 0;                       ///< captures received for it
  std::int64_t droppedCaptures = 0;       ///< captures the script could not keep (see GapRecord)
  std::string dropReason;                 ///< why, as the script said of the first it named
  std::int64_t droppedBytes = 0;
  double seconds = 0;                     ///< since the previous step ended
  /// In a job of several ranks: (sum, L2 norm) of each parameter after the optimizer step and
  /// of its gradient, in the order of the hello's `parameters` (empty when not sent; a NaN pair
  /// for a parameter without a gradient). What rank_divergence compares.
  std::vector<std::array<double, 2>> parameterPrints;
  std::vector<std::array<double, 2>> gradientPrints;
};

/// How a step's end is answered: the process goes on, pauses at it, or stops there.
enum class StepAnswer { Go, Pause, Stop };

} // namespace hookscope
