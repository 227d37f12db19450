#include "common/Allocator.h"
#include "cli/CliCommands.h"
#include "common/PrintableText.h"
#include "rules/RuleEvaluator.h"
#ifdef HOOKSCOPE_CLI_ENGINE
#include "engine/TorchError.h"
#endif

#include <CLI/CLI.hpp>

#include <iostream>

#include <stdlib.h>

using namespace hookscope::cli;

int main(int argc, char** argv) {
  hookscope::keepFreedMemory();  // before anything allocates much: see Allocator.h
  keepCommandLine(argc, argv);
  CLI::App app{"hookscope-cli: run, watch and export what happens inside a TorchScript model.\n"
               "Exit codes: 0 success, 2 usage error, 3 the model cannot be loaded, 4 the data "
               "cannot be read or the model rejects it, 5 the output folder cannot be written, 6 a --break rule fired (the export is written), 7 (record) a rank of a job left without closing (the export holds what every rank sent), 8 a program the command needs is missing (Python with tensorboard for export-tensorboard, hookscope-report for report), 9 the model file holds code that reaches outside the process and is refused without --trust."};
  app.require_subcommand(1);

  std::vector<std::string> libraries;
  const std::string libraryHelp =
      "shared library of TorchScript operators to load first, like torch.ops.load_library "
      "(repeatable): for a model that uses operators outside PyTorch itself, e.g. torchvision's "
      "_C.so for torchvision::nms. torchvision's beside the linked PyTorch is loaded by itself.";

  // A .pt2 or a whole-model pickle runs in Python: which one, and where the model's classes are.
  PythonEngineOptions python;
  const std::string pythonHelp = "Python with PyTorch that runs .pt2 and whole-model pickle files (default: "
                                 "HOOKSCOPE_PYTHON, else the one HookScope was built with)";
  const std::string pythonPathHelp = "folder to import a pickled model's classes from (repeatable)";

  InspectOptions inspect;
  auto* inspectCmd = app.add_subcommand(
      "inspect", "Print the module tree (path, type, own and total parameters); with --input, run "
                 "one forward pass and add every module call's output shapes.");
  inspectCmd->add_option("model", inspect.model, "model file: TorchScript, torch.export (.pt2), torch.save(model)")
      ->required();
  inspectCmd->add_option("--python", python.python, pythonHelp);
  inspectCmd->add_option("--python-path", python.pythonPath, pythonPathHelp);
  inspectCmd->add_option("--input", inspect.inputs,
                         "synthetic input SHAPE[:DTYPE[:LOW:HIGH]], one per model input, e.g. "
                         "8x1x28x28 or 8x128:int64:0:30000");
  inspectCmd->add_option("--load-library", libraries, libraryHelp);
  inspectCmd->add_flag("!--no-confine", inspect.confine,
                       "do not confine the process (Landlock: no file writes; seccomp: no programs, processes or "
                       "network) while the model runs: only for a model you trust, on a kernel that refuses them");
  inspectCmd->add_option("--step-timeout", inspect.stepTimeout,
                         "SECONDS opening the model, or its forward on --input, may take before inspect gives up "
                         "(a __setstate__ or forward that never returns); 0: no limit")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  inspectCmd->add_flag("--trust", inspect.trust, "load a model whose TorchScript code reaches outside the process (__setstate__, torch.from_file, print, native operators...); without it such a model is refused with exit 9 and a list of what was found");

  CaptureOptions capture;
  // `--out ""` is a usage error (exit 2), not a folder that cannot be written (5).
  const CLI::Validator nonEmpty([](std::string& value) { return value.empty() ? std::string("an empty name names no folder") : std::string(); },
                                "FOLDER");
  auto* captureCmd = app.add_subcommand(
      "capture", "Run training steps with hooks on the chosen modules and write an export folder.");
  captureCmd->add_option("model", capture.model, "model file: TorchScript, torch.export (.pt2), torch.save(model)")
      ->required();
  captureCmd->add_option("--python", python.python, pythonHelp);
  captureCmd->add_option("--python-path", python.pythonPath, pythonPathHelp);
  captureCmd->add_option("--out", capture.out, "export folder to write")->required()->check(nonEmpty);
  captureCmd->add_option("--load-library", libraries, libraryHelp);
  captureCmd->add_flag("-v,--verbose", capture.verbose,
                       "a progress line per step (the default when standard error is not a terminal); on a terminal "
                       "one line is updated in place");
  captureCmd->add_flag("!--no-confine", capture.confine,
                       "do not confine the process (Landlock: no file writes but the export; seccomp: no programs, "
                       "processes or network) while the model runs");
  captureCmd->add_option("--step-timeout", capture.stepTimeout,
                         "SECONDS a step (or opening the model) may take: a step that takes longer (a forward that "
                         "never returns) ends the run, the steps before it are exported, exit 4; an open that takes "
                         "longer exits 3 (default: no limit)")
      ->check(CLI::NonNegativeNumber);
  captureCmd->add_flag("--trust", capture.trust, "load a model whose TorchScript code reaches outside the process (__setstate__, torch.from_file, print, native operators...); without it such a model is refused with exit 9 and a list of what was found");
  captureCmd->add_option("--hook", capture.hooks,
                         "glob on module paths, repeatable: 'layer1.*', 'fc', '*' for all "
                         "(the root's path is '' and '*' matches it)");
  captureCmd->add_option("--kinds", capture.kinds,
                         "comma-separated: activation,gradient,input,param,param_grad,update")
      ->capture_default_str();
  auto* inputOpt = captureCmd->add_option(
      "--input", capture.inputs,
      "synthetic input SHAPE[:DTYPE[:LOW:HIGH]], one per model input (default: the spec stored "
      "in the model file); floats without bounds are standard normal, integers default to [0, 10)");
  auto* dataOpt = captureCmd->add_option(
      "--data", capture.data,
      "torch.save file: a tensor, or a dict with \"inputs\" (tensor or tuple) and optional "
      "\"targets\"");
  inputOpt->excludes(dataOpt);
  captureCmd->add_option("--batch-size", capture.batchSize,
                         "slice the data file into batches of this many samples; step i uses "
                         "batch i modulo the number of batches")
      ->check(CLI::NonNegativeNumber);
  captureCmd->add_option("--steps", capture.steps, "number of steps")->capture_default_str()
      ->check(CLI::PositiveNumber);
  captureCmd->add_option("--loss", capture.loss,
                         "auto, cross_entropy, mse, mean or sum; auto (also the window's default) "
                         "is cross_entropy for integer targets, mse for float targets; without "
                         "targets, cross_entropy against fixed random classes for an [N, classes] "
                         "output, else mse against fixed random values")
      ->capture_default_str();
  captureCmd->add_option("--optimizer", capture.optimizer, "none, sgd or adam")->capture_default_str();
  captureCmd->add_option("--lr", capture.lr, "learning rate")->capture_default_str();
  captureCmd->add_option("--momentum", capture.momentum, "SGD momentum")->capture_default_str();
  captureCmd->add_option("--weight-decay", capture.weightDecay, "weight decay")->capture_default_str();
  captureCmd->add_flag("--eval", capture.eval, "run the model in eval mode (dropout off, batch norm frozen)");
  captureCmd->add_flag("--no-grad", capture.noGrad, "forward only: no backward, no optimizer");
  captureCmd->add_option("--seed", capture.seed, "seed of the synthetic inputs")->capture_default_str();
  captureCmd->add_option("--bins", capture.bins, "histogram bins")->capture_default_str()
      ->check(CLI::Range(1, 4096));
  captureCmd->add_option("--save-tensors", capture.saveTensors,
                         "glob on module paths whose full output tensors of the last step go "
                         "to tensors.pt (feature extraction), repeatable");
  captureCmd->add_option("--memory-cap", capture.memoryCapMiB,
                         "MiB the capture store may hold before it thins older steps")
      ->capture_default_str()->check(CLI::PositiveNumber);
  captureCmd->add_flag("--force", capture.force,
                       "replace an existing HookScope export folder (refused when it also holds files HookScope did "
                       "not write: they are named, never deleted)");
  captureCmd->add_option("--break", capture.breakOn,
                         "stop at the end of the step where this rule fires, write the export up to it and "
                         "exit with code 6 (repeatable): " + hookscope::ruleNameList() + ". Every firing goes to alerts.csv.");

  captureCmd->add_option("--threshold", capture.thresholds,
                         "RULE=VALUE: change a rule's threshold (repeatable): exploding_gradient (norm, default "
                         "1e3), vanishing_gradient (norm, 1e-8), dead_units (zero fraction, 0.9), saturation "
                         "(fraction at the bounds, 0.9), update_ratio (upper bound, 0.1; the lower is 1e-5 of it), "
                         "loss_plateau (window in steps, 50), fp16_overflow (fraction past 65504, 0), fp8_underflow "
                         "(fraction fp8 flushes, 0.01)");
  captureCmd->add_option("--clamp-grad", capture.clampGrad,
                         "PATTERN=V: clamp the gradient flowing back through the outputs of matching modules "
                         "to [-V, V], as a clamping Tensor.register_hook would (repeatable)");
  captureCmd->add_option("--scale-grad", capture.scaleGrad,
                         "PATTERN=F: multiply that gradient by F (repeatable)");
  captureCmd->add_option("--zero-grad", capture.zeroGrad, "PATTERN: zero that gradient (repeatable)");
  captureCmd->add_option("--zero-output", capture.zeroOutput,
                         "PATTERN: replace the output of matching modules with zeros (ablation), as a forward "
                         "hook returning zeros would (repeatable; tensor outputs only)");
  captureCmd->add_option("--mean-output", capture.meanOutput,
                         "PATTERN: replace that output with its mean (repeatable)");

  RecordOptions record;
  auto* recordCmd = app.add_subcommand(
      "record", "Wait for a training script that calls hookscope.attach() (or every rank of a torch.distributed "
                "job), hook it, and write the export folder when it closes or disconnects. Prints "
                "HOOKSCOPE_ADDRESS=... as its first line.");
  recordCmd->add_option("--out", record.out, "export folder to write")->required()->check(nonEmpty);
  recordCmd->add_option("--address", record.address,
                        "where to listen: unix:PATH (default: unix:$XDG_RUNTIME_DIR/hookscope.sock) or "
                        "tcp://HOST:PORT (127.0.0.1 unless told otherwise; a token is made and printed)");
  recordCmd->add_option("--hook", record.hooks, "module path pattern to hook (repeatable; default: every module)");
  recordCmd->add_option("--kinds", record.kinds,
                        "comma-separated kinds: activation, input, gradient, param, param_grad, update "
                        "(the last three need attach(model, optimizer))")
      ->capture_default_str();
  recordCmd->add_option("--bins", record.bins, "histogram bins")->capture_default_str()->check(CLI::Range(1, 4096));
  recordCmd->add_option("--memory-cap", record.memoryCapMiB, "MiB the capture store may hold before it thins older steps")
      ->capture_default_str()->check(CLI::PositiveNumber);
  recordCmd->add_option("--timeout", record.timeoutSeconds, "seconds to wait for a script (default: forever)");
  recordCmd->add_option("--ranks", record.ranks,
                        "ranks of a torch.distributed job to wait for (default: the world size the first rank reports)")
      ->check(CLI::Range(1, 1 << 20));
  recordCmd->add_option("--grace", record.graceSeconds,
                        "seconds the other ranks may take to attach after the first; then recording goes on with "
                        "those that did")
      ->capture_default_str()->check(CLI::PositiveNumber);
  recordCmd->add_flag("--force", record.force,
                      "replace an existing HookScope export folder (refused when it also holds files HookScope did "
                      "not write: they are named, never deleted)");
  recordCmd->add_option("--break", record.breakOn,
                        "stop the script (hookscope.Stopped is raised in its hs.step()) at the end of the step "
                        "where this rule fires, write the export and exit with code 6 (repeatable)");
  recordCmd->add_option("--threshold", record.thresholds, "RULE=VALUE: change a rule's threshold (repeatable)");

  ServeOptions serve;
  auto* serveCmd = app.add_subcommand(
      "serve", "Run a model file for a HookScope window, which starts this itself when it opens a model: the model "
               "runs in this process, confined (no file writes, programs or network), and the window shows what it "
               "captures and says when to step.");
  serveCmd->add_option("model", serve.model, "model file: TorchScript, torch.export (.pt2), torch.save(model)")
      ->required();
  serveCmd->add_option("--python", python.python, pythonHelp);
  serveCmd->add_option("--python-path", python.pythonPath, pythonPathHelp);
  serveCmd->add_option("--address", serve.address,
                       "the window's address (default: HOOKSCOPE_ADDRESS, else unix:$XDG_RUNTIME_DIR/hookscope.sock)");
  serveCmd->add_option("--load-library", libraries, libraryHelp);
  serveCmd->add_flag("--trust", serve.trust, "load a model whose TorchScript code reaches outside the process");
  serveCmd->add_flag("!--no-confine", serve.confine,
                     "do not confine the process (Landlock, seccomp): only for a model you trust, on a kernel that "
                     "refuses them");

  TensorBoardOptions tensorboard;
  auto* tensorboardCmd = app.add_subcommand(
      "export-tensorboard",
      "Write an export's histograms (every series, every step) and scalars (loss, lr, the script's scalars, each "
      "gradient's norm, NaN/Inf counts) as TensorBoard event files, with PyTorch's SummaryWriter; ranks become runs.");
  tensorboardCmd->add_option("run", tensorboard.run, "export folder")->required();
  tensorboardCmd->add_option("logdir", tensorboard.logdir, "TensorBoard log folder to write: new or empty")
      ->required()->check(nonEmpty);
  tensorboardCmd->add_option("--python", tensorboard.python,
                             "Python with torch and tensorboard (default: HOOKSCOPE_PYTHON, else the one HookScope "
                             "was built with)");

  ReportOptions report;
  auto* reportCmd = app.add_subcommand(
      "report", "Write a self-contained HTML report of an export (images embedded, no network): the loss and scalars, "
                "every hooked layer's gradient norm, a histogram-over-time heatmap per layer, the alerts and the run's "
                "configuration, drawn by the window's plot code without a display.");
  reportCmd->add_option("run", report.run, "export folder")->required();
  reportCmd->add_option("--out", report.out, "the HTML file to write")->required()->check(nonEmpty);
  reportCmd->add_option("--layer", report.layers,
                        "a layer to draw a heatmap of (repeatable; default: every hooked layer, up to 16)");
  reportCmd->add_flag("--force", report.force, "replace an existing file");

  std::string checkpoint, checkpointOther;
  bool checkpointConfine = true, checkpointCsv = false;
  auto* checkpointCmd = app.add_subcommand(
      "checkpoint", "Show a checkpoint's weights (a state_dict saved with torch.save, or a .safetensors file), read "
                    "without running any code: every tensor's statistics, NaN and Inf counted; with --compare, what "
                    "changed from it to another checkpoint, per tensor, largest relative change first.");
  checkpointCmd->add_option("file", checkpoint, "checkpoint file")->required();
  checkpointCmd->add_option("--compare", checkpointOther, "a second checkpoint: the change from FILE to it");
  checkpointCmd->add_flag("--csv", checkpointCsv,
                          "with --compare: CSV (tensor,status,norm_of_change,relative,nonfinite) for programs");
  checkpointCmd->add_option("--python", python.python, pythonHelp);
  checkpointCmd->add_flag("!--no-confine", checkpointConfine, "do not confine the process that reads the files");

  std::string showDir;
  auto* showCmd = app.add_subcommand("show", "Print a summary of an export folder.");
  showCmd->add_option("dir", showDir, "export folder")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kOk : kUsage;
  }
  // Every error that escapes a command (LibTorch's included) ends it with a message, not an abort.
  try {
#ifdef HOOKSCOPE_CLI_ENGINE
    if ((*inspectCmd || (*captureCmd && !capture.saveTensors.empty())) && !loadLibraries(libraries)) return kModelLoad;
    if (*inspectCmd) return runInspect(inspect);
    if (*serveCmd) return runServe(serve, libraries);
#else
    // Loading a model takes LibTorch (or Python), which this side never links.
    if (*inspectCmd) {
      python.inputs = inspect.inputs;
      python.trust = inspect.trust;
      python.confine = inspect.confine;
      return execEngineFor("inspect", inspect.model, python);
    }
    if (*checkpointCmd) {
      std::vector<std::string> arguments{"checkpoint", checkpoint};
      if (!checkpointOther.empty()) arguments.insert(arguments.end(), {"--compare", checkpointOther});
      if (!checkpointConfine) arguments.push_back("--no-confine");
      if (checkpointCsv) arguments.push_back("--csv");
      return execPythonEngine(python.python, arguments, "checkpoints are read by HookScope's Python engine");
    }
    if (*serveCmd) {
      python.address = serve.address;
      python.trust = serve.trust;
      python.confine = serve.confine;
      return execEngineFor("serve", serve.model, python);
    }
    // capture runs the model through `serve` in an engine process: it takes these from there.
    if (!python.python.empty()) ::setenv("HOOKSCOPE_PYTHON", python.python.c_str(), 1);
    if (!python.pythonPath.empty()) {
      std::string joined;
      for (const auto& dir : python.pythonPath) joined += (joined.empty() ? "" : ":") + dir;
      ::setenv("HOOKSCOPE_PYTHON_PATH", joined.c_str(), 1);
    }
#endif
    capture.libraries = libraries;
    if (*captureCmd) return runCapture(capture);
    if (*showCmd) return runShow(showDir);
    if (*recordCmd) return runRecord(record);
    if (*tensorboardCmd) return runExportTensorBoard(tensorboard);
    if (*reportCmd) return runReport(report);
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
