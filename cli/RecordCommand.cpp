// hookscope-cli record: waits for one training script, hooks it, writes an export folder.

#include "AttachListener.h"
#include "AttachSession.h"
#include "CliCommands.h"
#include "CliSupport.h"
#include "ExportFolder.h"
#include "ExportTarget.h"

#include <unistd.h>

#include <chrono>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

namespace hookscope::cli {

int runRecord(const RecordOptions& options) {
  std::string message;
  const std::uint8_t kinds = parseKindList(options.kinds, &message);
  if (!kinds) return error(kUsage, message.empty() ? "--kinds names no kind" : message);
  std::set<RuleKind> breakOn;
  RuleSettings ruleSettings;
  if (!parseRuleOptions(options.breakOn, options.thresholds, &breakOn, &ruleSettings, &message)) {
    return error(kUsage, message);
  }
  const auto lock = holdExportFolder(options.out, options.force);
  if (!lock) return kOutput;

  auto listener = AttachListener::open(options.address.empty() ? defaultAttachAddress() : options.address, &message);
  if (!listener) return error(kUsage, message);
  // The first line of standard output, for scripts and CI to pick up.
  std::cout << "HOOKSCOPE_ADDRESS=" << listener->address() << std::endl;
  note("waiting for a training script; in it: `import hookscope; hs = hookscope.attach(model, optimizer)` and "
       "`hs.step(loss)` after each step, run with HOOKSCOPE_ADDRESS=" + listener->address());
  StopSignals signals;

  auto store = std::make_shared<CaptureStore>(std::size_t(options.memoryCapMiB * 1024 * 1024));
  std::unique_ptr<AttachSession> session;
  const auto waitStart = std::chrono::steady_clock::now();
  while (!session) {
    if (StopSignals::received()) {
      return error(128 + StopSignals::received(), "interrupted before a script attached; nothing written");
    }
    if (options.timeoutSeconds > 0 &&
        std::chrono::steady_clock::now() - waitStart > std::chrono::duration<double>(options.timeoutSeconds)) {
      return error(kData, "no training script attached within " + std::to_string(int(options.timeoutSeconds)) +
                              " s; nothing written");
    }
    const int fd = listener->accept(200);
    if (fd < 0) continue;
    session = AttachSession::accept(fd, listener->parsed().tcp ? listener->parsed().token : "",
                                    !listener->parsed().tcp, store, &message);
    if (!session) note("refused a connection: " + message);
  }
  const auto& script = session->script();
  const auto& modules = session->modules();
  note("attached: " + script.name + " (pid " + std::to_string(script.pid) + " on " + script.host + ", PyTorch " +
       script.torch + ", " + script.device + ", " + std::to_string(modules.size()) + " modules)");

  const std::vector<std::string> patterns = options.hooks.empty() ? std::vector<std::string>{"*"} : options.hooks;
  for (const auto& pattern : patterns) {
    bool any = false;
    for (const auto& m : modules) any = any || matchesPattern(pattern, m.path);
    if (!any) {
      const std::string problem = "--hook '" + pattern + "' matches no module of " + script.name +
                                  " (its modules are named like '" + (modules.size() > 1 ? modules[1].path : "") + "')";
      session->stop("hookscope-cli record: " + problem);
      return error(kUsage, problem);
    }
  }
  std::vector<std::uint8_t> masks(modules.size(), 0);
  std::vector<HookedModule> hooked;
  for (std::size_t i = 0; i < modules.size(); ++i) {
    bool on = false;
    for (const auto& pattern : patterns) on = on || matchesPattern(pattern, modules[i].path);
    if (!on) continue;
    masks[i] = kinds;
    hooked.push_back({modules[i].path, captureKindNames(kinds)});
  }
  session->setAllHooks(masks);
  session->setBins(options.bins);
  session->setRuleSettings(ruleSettings);
  std::uint32_t breakMask = 0;
  for (auto rule : breakOn) breakMask |= 1u << unsigned(rule);
  session->setBreakRules(breakMask, /*stopOnBreak=*/true);

  // Signals are watched here; the session is served on its own thread.
  std::optional<Alert> breakAlert;
  const bool terminal = ::isatty(STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  std::int64_t dropped = 0;
  std::string ended;
  std::atomic<bool> done{false};
  std::thread server([&] {
    ended = session->serve([&](const AttachedStep& s) {
      if (s.breakAlert && !breakAlert) breakAlert = s.breakAlert;
      dropped += s.droppedCaptures;
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::ostringstream line;
      line << "step " << (s.step + 1);
      if (const auto loss = s.scalars.find("loss"); loss != s.scalars.end()) {
        line << "  loss " << std::setprecision(6) << loss->second;
      }
      line << "  " << s.captures << " captures" << std::fixed << std::setprecision(1) << "  "
           << double(s.step + 1) / std::max(seconds, 1e-9) << " steps/s";
      if (s.droppedCaptures) line << "  (" << s.droppedCaptures << " dropped: HookScope was behind)";
      if (terminal) {
        std::cerr << "\r" << line.str() << "   " << std::flush;
      } else {
        std::cerr << line.str() << "\n";
      }
    });
    done = true;
  });
  int stopSignal = 0;
  while (!done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!stopSignal && StopSignals::received()) {
      stopSignal = StopSignals::received();
      session->close();  // the script detaches and trains on
    }
  }
  server.join();
  if (terminal) std::cerr << "\n";
  note(script.name + ": " + ended);

  ExportManifest manifest;
  manifest.modelFile = script.name;
  manifest.hookscopeVersion = HOOKSCOPE_VERSION;
  manifest.config.bins = options.bins;
  manifest.config.optimizer = OptimizerKind::None;
  manifest.steps = session->stepsDone();
  manifest.hooked = hooked;
  manifest.interventions = session->interventions();
  manifest.thinning = store->thinning();
  manifest.memoryCapBytes = store->capBytes();
  manifest.script = script;
  manifest.script->ended = ended;
  manifest.gaps = session->gaps();
  if (stopSignal) manifest.interrupted = StopSignals::name(stopSignal);
  ExportOptions exportOptions;
  exportOptions.overwrite = options.force;
  exportOptions.lockHeld = true;
  exportOptions.extraFiles = {{"alerts.csv", alertsCsv(session->alerts())}};
  if (!writeExport(options.out, manifest, *store, {}, exportOptions, &message)) return error(kOutput, message);
  std::cerr << "wrote " << options.out << ": " << store->captureCount() << " captures of " << store->seriesKeys().size()
            << " series over " << session->stepsDone() << " steps, " << session->alerts().size() << " alerts";
  if (dropped) std::cerr << ", " << dropped << " captures dropped by the script (see gaps in manifest.json)";
  std::cerr << "\n";
  if (stopSignal) {
    return error(128 + stopSignal, "interrupted by " + manifest.interrupted + ": the script was detached and trains on; "
                                   "the export of what was received is in " + options.out);
  }
  if (breakAlert) {
    return error(kBreak, "stopped the script at step " + std::to_string(breakAlert->step) + " on " +
                             ruleName(breakAlert->rule) + ": " + breakAlert->message);
  }
  if (session->brokeProtocol()) return error(kData, ended);
  return kOk;
}

} // namespace hookscope::cli
