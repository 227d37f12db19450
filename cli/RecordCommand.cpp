// hookscope-cli record: waits for a training script (or every rank of a job), hooks it, writes an export folder.

#include "sessions/AttachJob.h"
#include "wire/AttachListener.h"
#include "sessions/AttachSession.h"
#include "cli/CliCommands.h"
#include "cli/CliSupport.h"
#include "files/ExportFolder.h"
#include "files/ExportTarget.h"

#include <unistd.h>

#include <chrono>
#include <iomanip>
#include <iostream>
#include <mutex>
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

  // What the job's callbacks use is declared first: the job (its destructor joins the rank
  // threads) goes before it.
  std::mutex outputMutex;
  const bool terminal = ::isatty(STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  std::atomic<std::int64_t> dropped{0};
  std::atomic<int> expected{0};
  auto store = std::make_shared<CaptureStore>(std::size_t(options.memoryCapMiB * 1024 * 1024));
  AttachJob job(store);
  std::uint32_t breakMask = 0;
  for (auto rule : breakOn) breakMask |= 1u << unsigned(rule);
  job.setBins(options.bins);
  job.setRuleSettings(ruleSettings);
  job.setBreakRules(breakMask, /*stopOnBreak=*/true);

  // Progress: one line per step of the lowest rank still attached; a note when a rank leaves.
  job.setOnStep([&](int rank, const AttachedStep& s) {
    dropped += s.droppedCaptures;
    const auto live = job.liveRanks();
    if (live.empty() || rank != live.front()) return;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::ostringstream line;
    line << "step " << (s.step + 1);
    if (const auto loss = s.scalars.find("loss"); loss != s.scalars.end()) {
      line << "  loss " << std::setprecision(6) << loss->second;
    }
    line << "  " << s.captures << " captures" << std::fixed << std::setprecision(1) << "  "
         << double(s.step + 1) / std::max(seconds, 1e-9) << " steps/s";
    if (expected > 1) line << "  ranks " << live.size() << "/" << expected;
    if (s.droppedCaptures) line << "  (" << s.droppedCaptures << " dropped: HookScope was behind)";
    std::lock_guard<std::mutex> lock(outputMutex);
    if (terminal) {
      std::cerr << "\r" << line.str() << "   " << std::flush;
    } else {
      std::cerr << line.str() << "\n";
    }
  });
  job.setOnEnded([&](int rank, const std::string& why) {
    std::lock_guard<std::mutex> lock(outputMutex);
    if (terminal) std::cerr << "\n";
    std::string name;
    for (const auto& s : job.scripts()) {
      if (s.rank == rank) name = s.name;
    }
    note(expected > 1 ? "rank " + std::to_string(rank) + ": " + why : name + ": " + why);
  });

  // Ranks attach until every expected rank has, or the grace period after the first ends.
  bool accepting = true;
  int stopSignal = 0;
  std::chrono::steady_clock::time_point firstAttach;
  const auto waitStart = std::chrono::steady_clock::now();
  const bool tcp = listener->parsed().tcp;
  while (true) {
    if (!stopSignal && StopSignals::received()) {
      stopSignal = StopSignals::received();
      if (job.ranks().empty()) {
        return error(128 + stopSignal, "interrupted before a script attached; nothing written");
      }
      job.close();  // the scripts detach and train on
      accepting = false;
    }
    const auto ranks = job.ranks();
    if (ranks.empty() && options.timeoutSeconds > 0 &&
        std::chrono::steady_clock::now() - waitStart > std::chrono::duration<double>(options.timeoutSeconds)) {
      return error(kData, "no training script attached within " + std::to_string(int(options.timeoutSeconds)) +
                              " s; nothing written");
    }
    if (accepting && !ranks.empty()) {
      if (int(ranks.size()) >= expected) {
        accepting = false;
        if (expected > 1) note("all " + std::to_string(expected) + " ranks attached");
      } else if (job.liveRanks().empty()) {
        accepting = false;  // the job ended before the others came
      } else if (std::chrono::steady_clock::now() - firstAttach > std::chrono::duration<double>(options.graceSeconds)) {
        accepting = false;
        note("only " + std::to_string(ranks.size()) + " of " + std::to_string(expected) + " ranks attached within " +
             std::to_string(int(options.graceSeconds)) + " s (--grace); recording those");
      }
    }
    if (!accepting && !ranks.empty() && job.waitEnded(0)) break;
    const int fd = listener->accept(accepting ? 200 : 50);
    if (fd < 0) continue;
    auto session = AttachSession::accept(fd, tcp ? listener->parsed().token : "", !tcp, store, &message);
    if (!session) {
      note("refused a connection: " + message);
      continue;
    }
    const ScriptRecord script = session->script();
    if (!accepting) {
      session->refuse(job.ranks().empty() ? "HookScope is shutting down"
                                          : "this recording of job '" + script.job + "' started without rank " +
                                                std::to_string(script.rank) + ", which attached too late (--grace)");
      note("refused rank " + std::to_string(script.rank) + " of " + script.name + ": it attached after recording began");
      continue;
    }
    if (job.ranks().empty()) {
      // The first rank: its modules decide the hooks, which every rank gets from its first step.
      const auto& modules = session->modules();
      const std::vector<std::string> patterns = options.hooks.empty() ? std::vector<std::string>{"*"} : options.hooks;
      for (const auto& pattern : patterns) {
        bool any = false;
        for (const auto& m : modules) any = any || matchesPattern(pattern, m.path);
        if (!any) {
          const std::string problem = "--hook '" + pattern + "' matches no module of " + script.name +
                                      " (its modules are named like '" + (modules.size() > 1 ? modules[1].path : "") + "')";
          session->refuse("hookscope-cli record: " + problem);
          return error(kUsage, problem);
        }
      }
      std::vector<std::uint8_t> masks(modules.size(), 0);
      for (std::size_t i = 0; i < modules.size(); ++i) {
        bool on = false;
        for (const auto& pattern : patterns) on = on || matchesPattern(pattern, modules[i].path);
        if (on) masks[i] = kinds;
      }
      job.setAllHooks(masks);
      expected = options.ranks > 0 ? options.ranks : script.worldSize;
      firstAttach = std::chrono::steady_clock::now();
    }
    const std::string who = script.name + " (pid " + std::to_string(script.pid) + " on " + script.host + ", PyTorch " +
                            script.torch + ", " + script.device + ", " + std::to_string(session->modules().size()) +
                            " modules)";
    if (!job.add(std::move(session), &message)) {
      note("refused " + who + ": " + message);
      continue;
    }
    note(script.worldSize > 1 || expected > 1
             ? "attached rank " + std::to_string(script.rank) + " of " + std::to_string(script.worldSize) +
                   (script.job.empty() ? "" : " of job " + script.job) + ": " + who
             : "attached: " + who);
  }

  const auto scripts = job.scripts();
  ExportManifest manifest = job.manifest();
  if (stopSignal) manifest.interrupted = StopSignals::name(stopSignal);
  const auto alerts = job.alerts();
  ExportOptions exportOptions;
  exportOptions.overwrite = options.force;
  exportOptions.lockHeld = true;
  exportOptions.extraFiles = {{"alerts.csv", alertsCsv(alerts)}};
  if (!writeExport(options.out, manifest, *store, {}, exportOptions, &message)) return error(kOutput, message);
  std::cerr << "wrote " << options.out << ": " << store->captureCount() << " captures of " << store->seriesKeys().size()
            << " series over " << manifest.steps << " steps";
  if (scripts.size() > 1) std::cerr << " of " << scripts.size() << " ranks";
  std::cerr << ", " << alerts.size() << " alerts";
  if (dropped) std::cerr << ", " << dropped << " captures dropped by the script (see gaps in manifest.json)";
  std::cerr << "\n";
  if (stopSignal) {
    return error(128 + stopSignal, "interrupted by " + manifest.interrupted + ": the script was detached and trains on; "
                                   "the export of what was received is in " + options.out);
  }
  if (const auto breakAlert = job.breakAlert()) {
    return error(kBreak, "stopped the " + std::string(scripts.size() > 1 ? "job" : "script") + " at step " +
                             std::to_string(breakAlert->step) + " on " + ruleName(breakAlert->rule) +
                             (scripts.size() > 1 ? " (rank " + std::to_string(breakAlert->rank) + ")" : "") + ": " +
                             breakAlert->message);
  }
  if (job.brokeProtocol()) {
    for (const auto& s : scripts) {
      if (s.ended.find("HookScope ended the connection") != std::string::npos) return error(kData, s.ended);
    }
    return error(kData, "a script broke the protocol");
  }
  if (scripts.size() > 1) {
    std::string lost;
    for (const auto& s : scripts) {
      if (s.ended.find("disconnected without closing") != std::string::npos) {
        lost += (lost.empty() ? "" : "; ") + std::string("rank ") + std::to_string(s.rank) + " " + s.ended;
      }
    }
    if (!lost.empty()) {
      return error(kRankLost, lost + ". The export holds every rank's captures up to then; the other ranks finished.");
    }
  }
  return kOk;
}

} // namespace hookscope::cli
