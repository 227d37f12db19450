// hookscope-cli checkpoint: a checkpoint's weights, read by the Python engine with
// weights_only (no code runs), or what changed from one checkpoint to another.
#include "cli/CliCommands.h"

#include <CLI/CLI.hpp>

#include <memory>

namespace hookscope::cli {

namespace {

struct CheckpointOptions {
  std::string file;
  std::string other;  ///< --compare
  bool confine = true;
  bool csv = false;
};

} // namespace

Command addCheckpointCommand(CLI::App& app, SharedOptions& shared) {
  auto options = std::make_shared<CheckpointOptions>();
  auto* command = app.add_subcommand(
      "checkpoint", "Show a checkpoint's weights (a state_dict saved with torch.save, or a .safetensors file), read "
                    "without running any code: every tensor's statistics, NaN and Inf counted; with --compare, what "
                    "changed from it to another checkpoint, per tensor, largest relative change first.");
  command->add_option("file", options->file, "checkpoint file")->required();
  command->add_option("--compare", options->other, "a second checkpoint: the change from FILE to it");
  command->add_flag("--csv", options->csv,
                    "with --compare: CSV (tensor,status,norm_of_change,relative,nonfinite) for programs");
  command->add_option("--python", shared.python.python, kPythonHelp);
  command->add_flag("!--no-confine", options->confine, "do not confine the process that reads the files");

  return {command, [options, &shared] {
    std::vector<std::string> arguments{"checkpoint", options->file};
    if (!options->other.empty()) arguments.insert(arguments.end(), {"--compare", options->other});
    if (!options->confine) arguments.push_back("--no-confine");
    if (options->csv) arguments.push_back("--csv");
    return runPythonEngine(shared.python.python, arguments, "checkpoints are read by HookScope's Python engine");
  }};
}

} // namespace hookscope::cli
