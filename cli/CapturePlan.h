#pragma once
// What `capture` hooks and changes, resolved against a model's modules: shared by the run in an
// engine process and the run in this process (--save-tensors).

#include "cli/CliCommands.h"

#include "files/ExportManifest.h"
#include "common/ModelTypes.h"
#include "rules/RuleEvaluator.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace hookscope::cli {

struct CapturePlan {
  std::vector<std::uint8_t> masks;  ///< per module (kindBit bits)
  std::vector<HookedModule> hooked;
  std::vector<int> keep;  ///< modules whose full outputs --save-tensors keeps
  std::vector<std::pair<int, GradientIntervention>> gradient;
  std::vector<std::pair<int, OutputIntervention>> output;
};

/// Resolves --hook, --save-tensors and the interventions against `modules`; false with a usage
/// message when a pattern matches nothing.
bool planCapture(const CaptureOptions& options, const std::vector<ModuleInfo>& modules, std::uint8_t kinds,
                 CapturePlan* plan, std::string* message);
/// The run configuration of the options (--loss and --optimizer already checked); the model's
/// stored input spec when none is given. False with a usage message when there is no input.
bool captureConfig(const CaptureOptions& options, const std::string& exampleInput, RunConfig* config,
                   std::string* message, bool needsInput = true);
/// `capture` with the model in a confined engine process; the options are checked and the export
/// folder is held.
int runCaptureInEngine(const CaptureOptions& options, std::uint8_t kinds, const std::set<RuleKind>& breakOn,
                       const RuleSettings& ruleSettings);

} // namespace hookscope::cli
