#pragma once
// The commands that load a model in this process: hookscope-engine alone, the side of the
// command line that links LibTorch (hookscope-cli hands them over with execEngine). Defined in
// InProcessCommands.cpp, which only hookscope-engine is built with.

#include "cli/CapturePlan.h"
#include "cli/CliCommands.h"

#include <set>
#include <string>
#include <vector>

namespace hookscope::cli {

/// Loads operator libraries given with --load-library; false after reporting the first failure.
bool loadLibraries(const std::vector<std::string>& paths);
/// inspect: the module tree, and with --input every call's output shapes.
int runInspect(const InspectOptions& options);
/// serve: runs a model file for a HookScope window: connects to it, confines itself, loads the
/// model, and steps it as the window says (core/run/ModelServer.h).
int runServe(const ServeOptions& options, const std::vector<std::string>& libraries);
/// capture --save-tensors: the model in this process, whose full tensors go to tensors.pt; the
/// options are checked and the export folder is held.
int runCaptureInProcess(const CaptureOptions& options, std::uint8_t kinds, const std::set<RuleKind>& breakOn,
                        const RuleSettings& ruleSettings);

} // namespace hookscope::cli
