#include "cli/CliCommands.h"
#include "cli/CliSupport.h"
#include "cli/CapturePlan.h"

#include "files/ExportFolder.h"
#include "common/InputSpec.h"
#include "common/ModelTypes.h"
#include "common/PrintableText.h"
#include "rules/RuleEvaluator.h"
#include "files/Sha256.h"
#ifdef HOOKSCOPE_CLI_ENGINE
// Only hookscope-engine, the LibTorch side, loads and runs models in its own process.
#include "engine/Confinement.h"
#include "engine/Model.h"
#include "engine/ModelArchiveScan.h"
#include "engine/OperatorLibraries.h"
#include "engine/StepRunner.h"
#endif

#include <fnmatch.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <tuple>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <memory>
#include <sstream>
#include <filesystem>

namespace hookscope::cli {

namespace {

#ifdef HOOKSCOPE_CLI_ENGINE
std::unique_ptr<Model> loadOrReport(const std::string& path, bool trust, bool confined, int* code) {
  std::string message;
  // The code in the archive is read as text before LibTorch runs any of it.
  std::vector<ArchiveFinding> findings;
  if (!trust && std::filesystem::is_regular_file(path) && scanModelArchive(path, &findings, &message) && !findings.empty()) {
    *code = refuseUntrusted(path, describeFindings(findings));
    return nullptr;
  }
  std::unique_ptr<Model> model;
  {
    CrashReport crash(kModelLoad, "while LibTorch read " + path +
                                      ": the file is damaged, or its code crashes LibTorch. Save it again with "
                                      "torch.jit.save; if it still crashes, report it with the file. Nothing was written.");
    model = Model::load(path, &message);
  }
  if (!model) *code = error(kModelLoad, confinedRefusal(message, confined));
  return model;
}

// From here on the model's code cannot write outside `writable`, start programs or reach the network.
bool confineOrReport(const std::vector<std::string>& writable, int* code) {
  Confinement done;
  std::string message;
  if (confineProcess(&done, &message, writable)) return true;
  *code = error(kModelLoad, message + "; --no-confine runs the model unconfined (only for a model you trust)");
  return false;
}

#endif

// Checks specs up front so a typo is a usage error, not a failed run.
bool validateSpecs(const std::vector<std::string>& specs, std::string* message) {
  for (const auto& text : specs) {
    InputSpec spec;
    if (!InputSpec::parse(text, &spec, message)) return false;
  }
  return true;
}

[[maybe_unused]] std::string displayName(const ModuleInfo& info) {
  return info.path.empty() ? "(root " + info.name + ")" : info.path;
}

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

} // namespace

#ifdef HOOKSCOPE_CLI_ENGINE
bool loadLibraries(const std::vector<std::string>& paths) {
  for (const auto& path : paths) {
    std::string message;
    if (!loadOperatorLibrary(path, &message)) {
      error(kModelLoad, message);
      return false;
    }
  }
  return true;
}

#endif

bool matchesPattern(const std::string& pattern, const std::string& path) {
  return ::fnmatch(pattern.c_str(), path.c_str(), 0) == 0;
}

#ifdef HOOKSCOPE_CLI_ENGINE

int runInspect(const InspectOptions& options) {
  std::string message;
  if (!validateSpecs(options.inputs, &message)) return error(kUsage, message);
  int code = kOk;
  if (options.confine && !confineOrReport({}, &code)) return code;
  // A __setstate__ or forward that never returns would hang inspect: it ends at the limit.
  std::atomic<bool> loaded{false};
  StepWatchdog watchdog(options.stepTimeout, [&] {
    const bool opened = loaded.load();
    std::ostringstream text;
    text << (opened ? "the model's forward on --input" : "opening " + options.model) << " did not end within "
         << options.stepTimeout << " s (--step-timeout), so inspect gave up: the model's "
         << (opened ? "forward" : "loading code (a __setstate__)")
         << " may never return; if it is just slow, raise --step-timeout (0: no limit). Nothing was written.";
    error(opened ? kData : kModelLoad, text.str());
    std::cerr.flush();
    ::_exit(opened ? kData : kModelLoad);
  });
  auto model = loadOrReport(options.model, options.trust, options.confine, &code);
  if (!model) return code;
  loaded = true;

  std::map<std::string, std::vector<std::string>> shapes;  // module -> "call k: shape" entries
  if (!options.inputs.empty()) {
    CrashReport crash(kData, "while " + options.model + " ran on --input: its code or this input crashes LibTorch. "
                             "Nothing was written.");
    auto store = std::make_shared<CaptureStore>();
    StepRunner runner(*model, store);
    RunConfig config;
    config.inputSpecs = options.inputs;
    config.noGrad = true;
    config.optimizer = OptimizerKind::None;
    config.train = false;
    if (!runner.configure(config, &message)) return error(kData, message);
    runner.setForwardOnly(true);  // shapes only: no loss is computed, so none can fail
    runner.probeShapes();
    StepResult result;
    if (!runner.step(&result, &message)) return error(kData, message);
    watchdog.stop();
    for (const auto& call : runner.outputShapes()) {
      std::string text;
      for (const auto& s : call.shapes) text += (text.empty() ? "" : ", ") + s;
      if (text.empty()) text = "(no tensor)";
      shapes[call.module].push_back(text);
    }
  }

  // Names come from the file: printed so that none can drive the terminal.
  std::ostringstream out;
  out << model->fileName() << ": " << model->modules().size() << " modules, "
      << model->modules()[0].totalParams << " parameters";
  if (!model->exampleInputSpec().empty()) out << ", input " << model->exampleInputSpec();
  out << "\n";
  out << std::left << std::setw(40) << "module" << std::setw(18) << "type" << std::right
      << std::setw(12) << "own params" << std::setw(14) << "total params";
  if (!shapes.empty()) out << "  output shape";
  out << "\n";
  std::vector<std::string> notCalled;
  for (const auto& info : model->modules()) {
    // Escaped before the columns are padded, so that they line up.
    const std::string name = std::string(std::size_t(info.depth) * 2, ' ') + printableText(displayName(info), false);
    out << std::left << std::setw(40) << name << std::setw(18) << printableText(info.typeName, false) << std::right
        << std::setw(12) << info.ownParams << std::setw(14) << info.totalParams;
    const auto found = shapes.find(info.path);
    if (found != shapes.end()) {
      const auto& calls = found->second;
      for (std::size_t c = 0; c < calls.size(); ++c) {
        out << (c ? "; " : "  ") << (calls.size() > 1 ? "call " + std::to_string(c) + ": " : "")
            << calls[c];
      }
    } else if (!shapes.empty()) {
      out << "  (not called)";
      notCalled.push_back(info.path);
    }
    out << "\n";
  }
  std::cout << printableText(out.str());
  if (!notCalled.empty()) std::cerr << "hookscope-cli: " << notCalledNote(notCalled, "on this input") << "\n";
  return kOk;
}

#endif

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
#ifndef HOOKSCOPE_CLI_ENGINE
  return kUsage;  // not reached: --save-tensors went to hookscope-engine above
}
#else
  int code = kOk;
  // The export is written in its folder's parent (a temporary folder, then renamed).
  const std::string exportParent = std::filesystem::path(exportTargetPath(options.out)).parent_path().string();
  if (options.confine && !confineOrReport({exportParent}, &code)) return code;
  auto model = loadOrReport(options.model, options.trust, options.confine, &code);
  if (!model) return code;

  CapturePlan plan;
  if (!planCapture(options, model->modules(), kinds, &plan, &message)) return error(kUsage, message);
  const auto& modules = model->modules();
  const std::vector<HookedModule>& hooked = plan.hooked;
  for (std::size_t i = 0; i < modules.size(); ++i) {
    if (plan.masks[i]) model->setHooks(int(i), plan.masks[i]);
  }
  std::vector<int> keep = plan.keep;
  std::vector<InterventionRecord> interventions;
  for (const auto& [i, gi] : plan.gradient) {
    model->setGradientIntervention(i, gi);
    interventions.push_back({modules[std::size_t(i)].path, "gradient", gi.describe(), 0, 0});
  }
  for (const auto& [i, oi] : plan.output) {
    model->setOutputIntervention(i, oi);
    interventions.push_back({modules[std::size_t(i)].path, "output", oi.describe(), 0, 0});
  }

  RunConfig config;
  if (!captureConfig(options, model->exampleInputSpec(), &config, &message)) return error(kUsage, message);

  auto store = std::make_shared<CaptureStore>(std::size_t(options.memoryCapMiB * 1024 * 1024));
  StepRunner runner(*model, store);
  if (!runner.configure(config, &message)) return error(kData, message);
  runner.keepTensors(keep);

  RuleEvaluator rules(ruleSettings);
  rules.setModuleTypes(model->moduleTypes());
  std::optional<Alert> breakAlert;
  const bool terminal = ::isatty(STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  if (StopSignals::received()) return 128 + StopSignals::received();

  // What the run has, as an export; `kept` adds the saved tensors (not from the watchdog's thread).
  auto exportRun = [&](std::int64_t steps, const std::string& interrupted, bool kept, std::string* problem) {
    ExportManifest manifest;
    manifest.modelFile = model->fileName();
    manifest.modelSha256 = sha256File(options.model);
    manifest.hookscopeVersion = HOOKSCOPE_VERSION;
    manifest.config = config;
    manifest.steps = steps;
    if (manifest.steps > 0) manifest.configurations = {{0, manifest.steps - 1, config}};
    manifest.hooked = hooked;
    manifest.interventions = interventions;
    for (auto& i : manifest.interventions) i.toStep = std::max<std::int64_t>(0, steps - 1);
    manifest.thinning = store->thinning();
    manifest.memoryCapBytes = store->capBytes();
    manifest.interrupted = interrupted;
    ExportOptions exportOptions;
    exportOptions.overwrite = options.force;
    exportOptions.lockHeld = true;
    exportOptions.extraFiles = {{"alerts.csv", alertsCsv(rules.alerts())}};
    return writeExport(options.out, manifest, *store, kept ? runner.keptTensorsPickle() : std::vector<char>{},
                       exportOptions, problem);
  };
  // A step that never ends (a forward that loops) cannot be interrupted inside LibTorch: past
  // --step-timeout the steps before it are exported from this thread and the process ends.
  std::atomic<std::int64_t> stepsEnded{0};
  StepWatchdog watchdog(options.stepTimeout, [&] {
    const std::int64_t steps = stepsEnded.load();
    std::string problem;
    const bool written = exportRun(steps, "step timeout", false, &problem);
    std::ostringstream text;
    // Steps are numbered from 0, as in stats.csv: say which one that is.
    text << "step " << steps << (steps == 0 ? " (the first)" : "") << " did not end within --step-timeout " << options.stepTimeout
         << " s (the model's forward may loop forever), so the run was ended; "
         << (written ? "the export of the " + std::to_string(steps) + " steps before it is in " + options.out
                     : "its export failed: " + problem);
    std::cerr << "\n";
    error(kData, text.str());
    std::cerr.flush();
    ::_exit(kData);
  });
  // Without --save-tensors the model runs in an engine process, and a crash there leaves the steps
  // before it to export; here it takes this process.
  std::optional<CrashReport> crash;
  crash.emplace(kData, "while " + options.model + " ran: its code or its input crashes LibTorch. Nothing was "
                       "written; without --save-tensors a crash leaves the steps before it exported.");
  const auto end = runner.run(options.steps, [&](const StepResult& r) {
    stepsEnded = r.step + 1;
    watchdog.stepEnded();
    if (StopSignals::received()) runner.requestStop();
    const auto fired = rules.evaluate(*store, r.step, runner.lastStepOrder());
    store->setAlertBytes(rules.bytes());
    for (const auto& alert : fired) {
      if (breakOn.count(alert.rule) && !breakAlert) {
        breakAlert = alert;
        runner.requestStop();
      }
    }
    printStepProgress({r.step, options.steps, r.loss, store->captureCount(), store->bytesUsed(), store->capBytes()},
                      start, terminal, options.verbose);
  }, &message);
  crash.reset();
  watchdog.stop();
  if (terminal && !options.verbose) std::cerr << "\n";
  if (end == StepRunner::RunEnd::Failed) return error(kData, message);

  const int stopSignal = StopSignals::received();
  const std::string interrupted = stopSignal == 0 ? "" : stopSignal == SIGINT ? "SIGINT" : "SIGTERM";
  if (!exportRun(runner.stepsDone(), interrupted, true, &message)) return error(kOutput, message);
  return reportCaptureEnd(options.out, *store, runner.stepsDone(), rules.alerts().size(), "", interrupted, breakAlert,
                          hooked);
}

#endif

} // namespace hookscope::cli
