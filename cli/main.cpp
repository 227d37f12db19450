// hookscope-cli (and hookscope-engine, the same program built with LibTorch): adds every
// subcommand, each declared in its own file, and runs the one chosen.
#include "cli/CliCommands.h"
#include "common/Allocator.h"
#include "common/PrintableText.h"
#ifdef HOOKSCOPE_CLI_ENGINE
#include "model/TorchError.h"
#endif

#include <CLI/CLI.hpp>

#include <iostream>

using namespace hookscope::cli;

int main(int argc, char** argv) {
  hookscope::keepFreedMemory();  // before anything allocates much: see Allocator.h
  keepCommandLine(argc, argv);
  CLI::App app{"hookscope-cli: run, watch and export what happens inside a TorchScript model.\n"
               "Exit codes: 0 success, 2 usage error, 3 the model cannot be loaded, 4 the data "
               "cannot be read or the model rejects it, 5 the output folder cannot be written, 6 a --break rule fired (the export is written), 7 (record) a rank of a job left without closing (the export holds what every rank sent), 8 a program the command needs is missing (Python with tensorboard for export-tensorboard, hookscope-report for report), 9 the model file holds code that reaches outside the process and is refused without --trust."};
  app.require_subcommand(1);
  SharedOptions shared;
  const Command commands[] = {addInspectCommand(app, shared), addCaptureCommand(app, shared), addRecordCommand(app),
                              addServeCommand(app, shared),   addTensorBoardCommand(app),     addReportCommand(app),
                              addCheckpointCommand(app, shared), addShowCommand(app), addCompareCommand(app),
                              addExplainCommand(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kOk : kUsage;
  }
  // Every error that escapes a command (LibTorch's included) ends it with a message, not an abort.
  try {
    for (const auto& command : commands) {
      if (*command.app) return command.run();
    }
  } catch (const std::exception& e) {
#ifdef HOOKSCOPE_CLI_ENGINE
    const std::string what = hookscope::summarizeTorchError(e);
#else
    const std::string what = e.what();
#endif
    std::cerr << "hookscope-cli: " << hookscope::printableText(what)
              << " (unexpected here: please report it with the command that caused it)\n";
    return kData;
  }
  return kUsage;
}
