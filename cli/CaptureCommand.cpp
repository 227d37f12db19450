// hookscope-cli capture: runs training steps with hooks on the chosen modules and writes an
// export folder. The model runs in an engine process (CaptureInEngine.cpp), or with
// --save-tensors in hookscope-engine itself (InProcessCommands.cpp).
#include "cli/CapturePlan.h"
#include "cli/CliSupport.h"
#ifdef HOOKSCOPE_CLI_ENGINE
#include "cli/InProcessCommands.h"
#endif

#include "common/InputSpec.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <tuple>

namespace hookscope::cli {

namespace {

// Indices of the modules whose path matches `pattern`, in tree order; without the root
// when only submodules may take part.
std::vector<int> matchingModules(const std::string& pattern, const std::vector<ModuleInfo>& modules,
                                 bool submodulesOnly = false) {
  std::vector<int> matched;
  for (std::size_t i = 0; i < modules.size(); ++i) {
    if (submodulesOnly && modules[i].path.empty()) continue;
    if (matchesPattern(pattern, modules[i].path)) matched.push_back(int(i));
  }
  return matched;
}

int runCapture(const CaptureOptions& options) {
#ifndef HOOKSCOPE_CLI_ENGINE
  // Full tensors never leave the process that holds them: the model runs in hookscope-engine.
  if (!options.saveTensors.empty()) return execEngine();
#endif
  std::string message;
  const std::uint8_t kinds = parseKindList(options.kinds, &message);
  if (!kinds) return error(kUsage, message.empty() ? "--kinds names no kind" : message);
  const auto loss = parseLossKind(options.loss);
  if (!loss) return error(kUsage, "unknown --loss '" + options.loss + "'; use auto, cross_entropy, mse, mean or sum");
  const auto optimizer = parseOptimizerKind(options.optimizer);
  if (!optimizer) return error(kUsage, "unknown --optimizer '" + options.optimizer + "'; use none, sgd or adam");
  if (!(options.lr > 0)) return error(kUsage, "--lr must be positive");
  if (!validateSpecs(options.inputs, &message)) return error(kUsage, message);
  std::set<RuleKind> breakOn;
  RuleSettings ruleSettings;
  if (!parseRuleOptions(options.breakOn, options.thresholds, &breakOn, &ruleSettings, &message)) {
    return error(kUsage, message);
  }
  const auto lock = holdExportFolder(options.out, options.force);
  if (!lock) return kOutput;
  StopSignals signals;
  // The model runs in an engine process (hookscope-cli serve), confined with no file writes at
  // all: a crash or a hang in it still leaves the export of the steps before. Saving full tensors
  // needs the model in this process.
  if (options.saveTensors.empty()) return runCaptureInEngine(options, kinds, breakOn, ruleSettings);
#ifdef HOOKSCOPE_CLI_ENGINE
  return runCaptureInProcess(options, kinds, breakOn, ruleSettings);
#else
  return kUsage;  // not reached: --save-tensors went to hookscope-engine above
#endif
}

} // namespace

namespace {

// capture's options of what is kept and what breaks or changes the run.
void addCaptureRuleOptions(CLI::App* command, CaptureOptions* capture) {
  command->add_option("--save-tensors", capture->saveTensors,
                      "glob on module paths whose full output tensors of the last step go "
                      "to tensors.pt (feature extraction), repeatable");
  command->add_option("--memory-cap", capture->memoryCapMiB,
                      "MiB the capture store may hold before it thins older steps")
      ->capture_default_str()->check(CLI::PositiveNumber);
  command->add_flag("--force", capture->force,
                    "replace an existing HookScope export folder (refused when it also holds files HookScope did "
                    "not write: they are named, never deleted)");
  command->add_option("--break", capture->breakOn,
                      "stop at the end of the step where this rule fires, write the export up to it and "
                      "exit with code 6 (repeatable): " + ruleNameList() + ". Every firing goes to alerts.csv.");
  command->add_option("--threshold", capture->thresholds,
                      "RULE=VALUE: change a rule's threshold (repeatable): exploding_gradient (norm, default "
                      "1e3), vanishing_gradient (norm, 1e-8), dead_units (zero fraction, 0.9), saturation "
                      "(fraction at the bounds, 0.9), update_ratio (upper bound, 0.1; the lower is 1e-5 of it), "
                      "loss_plateau (window in steps, 50), fp16_overflow (fraction past 65504, 0), fp8_underflow "
                      "(fraction fp8 flushes, 0.01)");
  command->add_option("--clamp-grad", capture->clampGrad,
                      "PATTERN=V: clamp the gradient flowing back through the outputs of matching modules "
                      "to [-V, V], as a clamping Tensor.register_hook would (repeatable)");
  command->add_option("--scale-grad", capture->scaleGrad,
                      "PATTERN=F: multiply that gradient by F (repeatable)");
  command->add_option("--zero-grad", capture->zeroGrad, "PATTERN: zero that gradient (repeatable)");
  command->add_option("--zero-output", capture->zeroOutput,
                      "PATTERN: replace the output of matching modules with zeros (ablation), as a forward "
                      "hook returning zeros would (repeatable; tensor outputs only)");
  command->add_option("--mean-output", capture->meanOutput,
                      "PATTERN: replace that output with its mean (repeatable)");
}

} // namespace

Command addCaptureCommand(CLI::App& app, SharedOptions& shared) {
  auto capture = std::make_shared<CaptureOptions>();
  auto* command = app.add_subcommand(
      "capture", "Run training steps with hooks on the chosen modules and write an export folder.");
  command->add_option("model", capture->model, "model file: TorchScript, torch.export (.pt2), torch.save(model)")
      ->required();
  command->add_option("--python", shared.python.python, kPythonHelp);
  command->add_option("--python-path", shared.python.pythonPath, kPythonPathHelp);
  command->add_option("--out", capture->out, "export folder to write")->required()->check(nonEmptyFolder());
  command->add_option("--load-library", shared.libraries, kLibraryHelp);
  command->add_flag("-v,--verbose", capture->verbose,
                    "a progress line per step (the default when standard error is not a terminal); on a terminal "
                    "one line is updated in place");
  command->add_flag("!--no-confine", capture->confine,
                    "do not confine the process (Landlock: no file writes but the export; seccomp: no programs, "
                    "processes or network) while the model runs");
  command->add_option("--step-timeout", capture->stepTimeout,
                      "SECONDS a step may take: a step that takes longer (a forward that never returns) ends the "
                      "run, the steps before it are exported, exit 4 (default: no limit)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--open-timeout", capture->openTimeout,
                      "SECONDS opening the model may take (the engine's start, PyTorch's import, the file's "
                      "loading): an open that takes longer exits 3; 0: no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  command->add_flag("--trust", capture->trust, "load a model whose TorchScript code reaches outside the process (__setstate__, torch.from_file, print, native operators...); without it such a model is refused with exit 9 and a list of what was found");
  command->add_option("--hook", capture->hooks,
                      "glob on module paths, repeatable: 'layer1.*', 'fc', '*' for all "
                      "(the root's path is '' and '*' matches it)");
  command->add_option("--kinds", capture->kinds,
                      "comma-separated: activation,gradient,input,param,param_grad,update")
      ->capture_default_str();
  auto* inputOpt = command->add_option(
                                       "--input", capture->inputs,
                                       "synthetic input SHAPE[:DTYPE[:LOW:HIGH]], one per model input (default: the spec stored "
                                       "in the model file); floats without bounds are standard normal, integers default to [0, 10)");
  auto* dataOpt = command->add_option(
                                      "--data", capture->data,
                                      "torch.save file: a tensor, or a dict with \"inputs\" (tensor or tuple) and optional "
                                      "\"targets\"");
  inputOpt->excludes(dataOpt);
  command->add_option("--batch-size", capture->batchSize,
                      "slice the data file into batches of this many samples; step i uses "
                      "batch i modulo the number of batches")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--steps", capture->steps, "number of steps")->capture_default_str()
      ->check(CLI::PositiveNumber);
  command->add_option("--loss", capture->loss,
                      "auto, cross_entropy, mse, mean or sum; auto (also the window's default) "
                      "is cross_entropy for integer targets, mse for float targets; without "
                      "targets, cross_entropy against fixed random classes for an [N, classes] "
                      "output, else mse against fixed random values")
      ->capture_default_str();
  command->add_option("--optimizer", capture->optimizer, "none, sgd or adam")->capture_default_str();
  command->add_option("--lr", capture->lr, "learning rate")->capture_default_str();
  command->add_option("--momentum", capture->momentum, "SGD momentum")->capture_default_str();
  command->add_option("--weight-decay", capture->weightDecay, "weight decay")->capture_default_str();
  command->add_flag("--eval", capture->eval, "run the model in eval mode (dropout off, batch norm frozen)");
  command->add_flag("--no-grad", capture->noGrad, "forward only: no backward, no optimizer");
  command->add_option("--seed", capture->seed, "seed of the synthetic inputs")->capture_default_str();
  command->add_option("--bins", capture->bins, "histogram bins")->capture_default_str()
      ->check(CLI::Range(1, 4096));
  addCaptureRuleOptions(command, capture.get());
  return {command, [capture, &shared] {
#ifdef HOOKSCOPE_CLI_ENGINE
    if (!capture->saveTensors.empty() && !loadLibraries(shared.libraries)) return int(kModelLoad);
#else
    // The model runs through `serve` in an engine process: it takes these from there.
    if (!shared.python.python.empty()) ::setenv("HOOKSCOPE_PYTHON", shared.python.python.c_str(), 1);
    if (!shared.python.pythonPath.empty()) {
      std::string joined;
      for (const auto& dir : shared.python.pythonPath) joined += (joined.empty() ? "" : ":") + dir;
      ::setenv("HOOKSCOPE_PYTHON_PATH", joined.c_str(), 1);
    }
#endif
    capture->libraries = shared.libraries;
    return runCapture(*capture);
  }};
}

bool planCapture(const CaptureOptions& options, const std::vector<ModuleInfo>& modules, std::uint8_t kinds,
                 CapturePlan* plan, std::string* message) {
  const std::vector<std::string> patterns = options.hooks.empty() ? std::vector<std::string>{"*"} : options.hooks;
  for (const auto& pattern : patterns) {
    if (matchingModules(pattern, modules).empty()) {
      *message = "--hook '" + pattern + "' matches no module; `hookscope-cli inspect " + options.model +
                 "` lists the module paths";
      return false;
    }
  }
  plan->masks.assign(modules.size(), 0);
  for (std::size_t i = 0; i < modules.size(); ++i) {
    bool on = false;
    for (const auto& pattern : patterns) on = on || matchesPattern(pattern, modules[i].path);
    if (!on) continue;
    plan->masks[i] = kinds;
    plan->hooked.push_back({modules[i].path, captureKindNames(kinds)});
  }
  for (const auto& pattern : options.saveTensors) {
    const std::vector<int> matched = matchingModules(pattern, modules);
    if (matched.empty()) {
      *message = "--save-tensors '" + pattern + "' matches no module";
      return false;
    }
    plan->keep.insert(plan->keep.end(), matched.begin(), matched.end());
  }
  auto intervene = [&](const std::vector<std::string>& specs, GradientIntervention::Kind kind, bool needsValue,
                       const char* option) -> bool {
    for (const auto& spec : specs) {
      std::string pattern = spec;
      double value = 0;
      if (needsValue) {
        if (!splitAssignment(spec, &pattern, &value) || !std::isfinite(value) ||
            (kind == GradientIntervention::Clamp && value <= 0)) {
          *message = std::string(option) + " '" + spec + "' needs PATTERN=VALUE with a " +
                     (kind == GradientIntervention::Clamp ? "positive" : "finite") + " value";
          return false;
        }
      }
      const std::vector<int> matched = matchingModules(pattern, modules);
      if (matched.empty()) {
        *message = std::string(option) + " '" + pattern + "' matches no module";
        return false;
      }
      for (const int i : matched) plan->gradient.push_back({i, GradientIntervention{kind, value}});
    }
    return true;
  };
  if (!intervene(options.clampGrad, GradientIntervention::Clamp, true, "--clamp-grad") ||
      !intervene(options.scaleGrad, GradientIntervention::Scale, true, "--scale-grad") ||
      !intervene(options.zeroGrad, GradientIntervention::Zero, false, "--zero-grad")) {
    return false;
  }
  for (const auto& [patterns, kind, option] :
       {std::tuple{&options.zeroOutput, OutputIntervention::Zero, "--zero-output"},
        std::tuple{&options.meanOutput, OutputIntervention::Mean, "--mean-output"}}) {
    for (const auto& pattern : *patterns) {
      const std::vector<int> matched = matchingModules(pattern, modules, /*submodulesOnly=*/true);
      if (matched.empty()) {
        *message = std::string(option) + " '" + pattern + "' matches no submodule";
        return false;
      }
      for (const int i : matched) plan->output.push_back({i, OutputIntervention{kind}});
    }
  }
  return true;
}

bool captureConfig(const CaptureOptions& options, const std::string& exampleInput, RunConfig* config,
                   std::string* message, bool needsInput) {
  config->inputSpecs = options.inputs;
  config->dataFile = options.data;
  if (needsInput && config->inputSpecs.empty() && config->dataFile.empty()) {
    if (exampleInput.empty()) {
      *message = "the model file stores no input shape: give --input SHAPE (e.g. --input 8x3x224x224) or --data FILE";
      return false;
    }
    // The example inputs, one spec each ("8x1x28x28 8x16:int64:0:100").
    std::istringstream specs(exampleInput);
    for (std::string spec; specs >> spec;) config->inputSpecs.push_back(spec);
  }
  config->batchSize = options.batchSize;
  config->loss = *parseLossKind(options.loss);
  config->optimizer = *parseOptimizerKind(options.optimizer);
  config->lr = options.lr;
  config->momentum = options.momentum;
  config->weightDecay = options.weightDecay;
  config->train = !options.eval;
  config->noGrad = options.noGrad;
  config->seed = options.seed;
  config->bins = options.bins;
  return true;
}

} // namespace hookscope::cli
