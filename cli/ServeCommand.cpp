// hookscope-cli serve: runs a model file for a HookScope window, in a process of its own (the
// window starts it): TorchScript in hookscope-engine (InProcessCommands.cpp), a .pt2 or a pickle
// in the Python engine.
#include "cli/CliCommands.h"
#ifdef HOOKSCOPE_CLI_ENGINE
#include "cli/InProcessCommands.h"
#endif

#include <CLI/CLI.hpp>

#include <memory>

namespace hookscope::cli {

Command addServeCommand(CLI::App& app, SharedOptions& shared) {
  auto serve = std::make_shared<ServeOptions>();
  auto* command = app.add_subcommand(
      "serve", "Run a model file for a HookScope window, which starts this itself when it opens a model: the model "
               "runs in this process, confined (no file writes, programs or network), and the window shows what it "
               "captures and says when to step.");
  command->add_option("model", serve->model, "model file: TorchScript, torch.export (.pt2), torch.save(model)")
      ->required();
  command->add_option("--python", shared.python.python, kPythonHelp);
  command->add_option("--python-path", shared.python.pythonPath, kPythonPathHelp);
  command->add_option("--address", serve->address,
                      "the window's address (default: HOOKSCOPE_ADDRESS, else unix:$XDG_RUNTIME_DIR/hookscope.sock)");
  command->add_option("--load-library", shared.libraries, kLibraryHelp);
  command->add_flag("--trust", serve->trust, "load a model whose TorchScript code reaches outside the process");
  command->add_flag("!--no-confine", serve->confine,
                    "do not confine the process (Landlock, seccomp): only for a model you trust, on a kernel that "
                    "refuses them");

  return {command, [serve, &shared] {
#ifdef HOOKSCOPE_CLI_ENGINE
    return runServe(*serve, shared.libraries);
#else
    PythonEngineOptions python = shared.python;
    python.address = serve->address;
    python.trust = serve->trust;
    python.confine = serve->confine;
    return execEngineFor("serve", serve->model, python);
#endif
  }};
}

} // namespace hookscope::cli
