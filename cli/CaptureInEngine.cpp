// hookscope-cli capture with the model in an engine process (`hookscope-cli serve`), as the
// window runs it: confined (no file writes at all), and a crash or a step that never ends in it
// still leaves this process to export the steps before.
#include "cli/CapturePlan.h"
#include "cli/CliSupport.h"

#include "links/AttachJob.h"
#include "links/EngineProcess.h"
#include "files/ExportFolder.h"
#include "files/ModelFileKind.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <iostream>
#include <mutex>

namespace hookscope::cli {

namespace {

/// What the job's threads tell the capture's wait: a failure, and that something changed.
struct JobEvents {
  std::mutex mutex;
  std::condition_variable changed;
  std::string failure;

  void notify(const std::string& failed = std::string()) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!failed.empty() && failure.empty()) failure = failed;
    changed.notify_all();
  }
  std::string failed() {
    std::lock_guard<std::mutex> lock(mutex);
    return failure;
  }
};

/// How the wait for the steps ended, when not with all of them in.
struct WaitEnd {
  std::string why;          ///< the engine did not run all its steps, and why
  std::string interrupted;  ///< "SIGINT", "SIGTERM", "step timeout" (the manifest's word)
};

/// The engine with the model open, or null with *exitCode: TorchScript runs in
/// `hookscope-engine serve`, without a hop through hookscope-cli; any other file in
/// `hookscope-cli serve`, which hands a .pt2 or a pickle to the Python engine and says what
/// another file is.
std::unique_ptr<EngineProcess> openEngine(const CaptureOptions& options, bool torchScript,
                                          std::shared_ptr<CaptureStore> store, int* exitCode) {
  EngineOptions engineOptions;
  const auto self = programPath();
  engineOptions.program = torchScript || self.empty() ? enginePath() : self.string();
  engineOptions.model = options.model;
  engineOptions.trust = options.trust;
  engineOptions.confine = options.confine;
  engineOptions.libraries = options.libraries;
  engineOptions.echoErrors = false;  // its messages are ours: printed once, below
  std::string message;
  // Opening the model (the engine's start, its imports, the file's loading) has a limit of its own:
  // a busy machine's start-up says nothing of how long a step may take.
  const int openLimitMs = options.openTimeout > 0 ? int(std::min(options.openTimeout * 1000, double(INT_MAX))) : -1;
  // Ctrl+C while the model opens (a __setstate__ that never ends) gives up the open.
  bool needsTrust = false;
  auto engine = EngineProcess::start(engineOptions, std::move(store), [] { return StopSignals::received() != 0; },
                                     openLimitMs, &message, &needsTrust, "--open-timeout");
  if (engine) return engine;
  if (needsTrust) {
    *exitCode = refuseUntrusted(options.model, message);
    return nullptr;
  }
  // An engine that ended said what is wrong with the model itself: its words, as this process's.
  const std::string ended = "HookScope could not open " + options.model + ":\n";
  *exitCode = error(kModelLoad, message.rfind(ended, 0) == 0 ? message.substr(ended.size()) : message);
  return nullptr;
}

/// Hooks, interventions, rules and breaks as planned; the job paused until told how many steps.
void configureJob(AttachJob& job, const CapturePlan& plan, const std::set<RuleKind>& breakOn,
                  const RuleSettings& ruleSettings) {
  job.pause();
  job.setAllHooks(plan.masks);
  for (const auto& [i, gi] : plan.gradient) job.setGradientIntervention(i, gi);
  for (const auto& [i, oi] : plan.output) job.setOutputIntervention(i, oi);
  job.setRuleSettings(ruleSettings);
  std::uint32_t breakMask = 0;
  for (const RuleKind rule : breakOn) breakMask |= 1u << unsigned(rule);
  job.setBreakRules(breakMask, /*stopOnBreak=*/true);
}

/// Waits until every step is in, the engine fails, breaks, ends, or a signal or the time limit
/// says so.
WaitEnd awaitSteps(AttachJob& job, EngineProcess& engine, JobEvents& events, const CaptureOptions& options) {
  WaitEnd end;
  bool askedToStop = false;
  auto lastProgress = std::chrono::steady_clock::now();
  std::int64_t lastSettled = -1;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(events.mutex);
      events.changed.wait_for(lock, std::chrono::milliseconds(100));
      if (!events.failure.empty()) return end;
    }
    const std::int64_t settled = job.settledStep();
    if (settled + 1 >= options.steps || job.breakAlert()) return end;
    if (job.waitEnded(0)) {
      // A break's stop ends the engine at once: it may be over before the check above saw the
      // break (or the last step), which is then why it ended, not a failure.
      if (job.breakAlert() || job.settledStep() + 1 >= options.steps) return end;
      engine.wait(3000);
      end.why = "the engine process running the model stopped: it " + engine.exitText();
      const std::string said = engine.failureText();
      if (!said.empty() && engine.failed()) end.why += " (it said: " + said + ")";
      return end;
    }
    if (settled != lastSettled) {
      lastSettled = settled;
      lastProgress = std::chrono::steady_clock::now();
    }
    if (StopSignals::received() && !askedToStop) {
      askedToStop = true;  // after the step in progress, as a run in this process would
      end.interrupted = StopSignals::received() == SIGINT ? "SIGINT" : "SIGTERM";
      job.pause();
    }
    if (askedToStop && !job.pausedSteps().empty()) return end;
    if (options.stepTimeout > 0 &&
        std::chrono::steady_clock::now() - lastProgress > std::chrono::duration<double>(options.stepTimeout)) {
      engine.kill();
      end.interrupted = "step timeout";
      // Steps are numbered from 0, as in stats.csv: say which one that is.
      end.why = "step " + std::to_string(settled + 1) + (settled < 0 ? " (the first)" : "") +
                " did not end within --step-timeout " + std::to_string(int(options.stepTimeout)) +
                " s (the model's forward may loop forever), so the run was ended";
      return end;
    }
  }
}

}  // namespace

int runCaptureInEngine(const CaptureOptions& options, std::uint8_t kinds, const std::set<RuleKind>& breakOn,
                       const RuleSettings& ruleSettings) {
  ModelFileInfo info;
  std::string message;
  const bool torchScript = identifyModelFile(options.model, &info, &message) && info.kind == ModelFileKind::TorchScript;
  auto store = std::make_shared<CaptureStore>(std::size_t(options.memoryCapMiB * 1024 * 1024));
  int exitCode = 0;
  auto engine = openEngine(options, torchScript, store, &exitCode);
  if (!engine) return exitCode;
  auto link = engine->takeLink();
  const EngineHello hello = *link->engine();
  CapturePlan plan;
  if (!planCapture(options, link->modules(), kinds, &plan, &message)) return error(kUsage, message);
  RunConfig config;
  // A checkpoint runs nothing: its steps need no input.
  const bool weightsOnly = info.kind == ModelFileKind::Checkpoint || info.kind == ModelFileKind::SafeTensors;
  if (!captureConfig(options, hello.exampleInput, &config, &message, !weightsOnly)) return error(kUsage, message);

  // What the job's callbacks touch is declared before the job: its threads may still call them
  // until the job is destroyed, on every way out of this function.
  JobEvents events;
  const bool terminal = ::isatty(STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  AttachJob job(store);
  job.setOnEngineEvent([&](int, const std::string& event, const std::string& text) {
    events.notify(event == "failed" ? text : std::string());
  });
  job.setOnStep([&](int, const AttachedStep& step) {
    const auto loss = step.scalars.find("loss");
    printStepProgress({step.step, options.steps, loss == step.scalars.end() ? std::nan("") : loss->second,
                       store->captureCount(), store->bytesUsed(), store->capBytes()},
                      start, terminal, options.verbose);
  });
  job.setOnSettled([&](std::int64_t, const std::vector<Alert>&, const std::optional<Alert>&) { events.notify(); });
  job.setOnEnded([&](int, const std::string&) { events.notify(); });
  configureJob(job, plan, breakOn, ruleSettings);
  if (!job.add(std::move(link), &message)) return error(kData, message);
  job.configure(runConfigText(config));
  job.step(int(std::min<std::int64_t>(options.steps, INT_MAX)));

  const WaitEnd end = awaitSteps(job, *engine, events, options);
  if (terminal && !options.verbose) std::cerr << "\n";
  job.close();  // the engine ends
  if (const std::string failed = events.failed(); !failed.empty()) return error(kData, failed);
  job.waitEnded(10000);

  ExportManifest manifest = job.modelFileManifest(std::filesystem::path(options.model).filename().string(), hello.sha256,
                                                  {{0, -1, config}});
  manifest.interrupted = end.interrupted;
  ExportOptions exportOptions;
  exportOptions.overwrite = options.force;
  exportOptions.lockHeld = true;
  const auto alerts = job.alerts();
  exportOptions.extraFiles = {{"alerts.csv", alertsCsv(alerts)}};
  if (!writeExport(options.out, manifest, *store, {}, exportOptions, &message)) return error(kOutput, message);
  return reportCaptureEnd(options.out, *store, manifest.steps, alerts.size(), end.why, end.interrupted,
                          job.breakAlert(), plan.hooked, torchScript);
}

} // namespace hookscope::cli
