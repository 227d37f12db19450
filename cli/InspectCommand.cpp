// hookscope-cli inspect: a model file's module tree, and with --input every call's output
// shapes. The model is loaded by the engine that runs its kind: hookscope-engine for TorchScript
// (InProcessCommands.cpp), the Python engine for a .pt2 or a pickle.
#include "cli/CliCommands.h"
#ifdef HOOKSCOPE_CLI_ENGINE
#include "cli/InProcessCommands.h"
#endif

#include <CLI/CLI.hpp>

#include <memory>

namespace hookscope::cli {

Command addInspectCommand(CLI::App& app, SharedOptions& shared) {
  auto inspect = std::make_shared<InspectOptions>();
  auto* command = app.add_subcommand(
      "inspect", "Print the module tree (path, type, own and total parameters); with --input, run "
                 "one forward pass and add every module call's output shapes.");
  command->add_option("model", inspect->model, "model file: TorchScript, torch.export (.pt2), torch.save(model)")
      ->required();
  command->add_option("--python", shared.python.python, kPythonHelp);
  command->add_option("--python-path", shared.python.pythonPath, kPythonPathHelp);
  command->add_option("--input", inspect->inputs,
                      "synthetic input SHAPE[:DTYPE[:LOW:HIGH]], one per model input, e.g. "
                      "8x1x28x28 or 8x128:int64:0:30000");
  command->add_option("--load-library", shared.libraries, kLibraryHelp);
  command->add_flag("!--no-confine", inspect->confine,
                    "do not confine the process (Landlock: no file writes; seccomp: no programs, processes or "
                    "network) while the model runs: only for a model you trust, on a kernel that refuses them");
  command->add_option("--step-timeout", inspect->stepTimeout,
                      "SECONDS opening the model, or its forward on --input, may take before inspect gives up "
                      "(a __setstate__ or forward that never returns); 0: no limit")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  command->add_flag("--trust", inspect->trust, "load a model whose TorchScript code reaches outside the process (__setstate__, torch.from_file, print, native operators...); without it such a model is refused with exit 9 and a list of what was found");

  return {command, [inspect, &shared] {
#ifdef HOOKSCOPE_CLI_ENGINE
    if (!loadLibraries(shared.libraries)) return int(kModelLoad);
    return runInspect(*inspect);
#else
    // Loading a model takes LibTorch (or Python), which this side never links.
    PythonEngineOptions python = shared.python;
    python.inputs = inspect->inputs;
    python.trust = inspect->trust;
    python.confine = inspect->confine;
    return execEngineFor("inspect", inspect->model, python);
#endif
  }};
}

} // namespace hookscope::cli
