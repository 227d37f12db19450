// hookscope-cli record: waits for a training script (or every rank of a job), hooks it, writes an export folder.

#include "links/AttachJob.h"
#include "links/HelloGate.h"
#include "wire/AttachListener.h"
#include "links/ScriptLink.h"
#include "cli/CliCommands.h"
#include "cli/CliSupport.h"
#include "cli/StderrLines.h"
#include "files/ExportFolder.h"
#include "files/ExportTarget.h"
#include "common/PrintableText.h"
#include "store/Bands.h"

#include <unistd.h>

#include <CLI/CLI.hpp>

#include <chrono>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

namespace hookscope::cli {

namespace {

// One recording: the job its ranks join, its progress lines, and the export it ends with.
class Recording {
public:
  Recording(const RecordOptions& options, std::uint8_t kinds, const std::set<RuleKind>& breakOn,
            const RuleSettings& ruleSettings)
      : m_options(options),
        m_kinds(kinds),
        m_store(std::make_shared<CaptureStore>(std::size_t(options.memoryCapMiB * 1024 * 1024))),
        m_job(m_store) {
    std::uint32_t breakMask = 0;
    for (auto rule : breakOn) breakMask |= 1u << unsigned(rule);
    m_job.setBins(options.bins);
    m_job.setRuleSettings(ruleSettings);
    m_job.setBreakRules(breakMask, /*stopOnBreak=*/true);
    m_job.setOnStep([this](int rank, const AttachedStep& s) { progress(rank, s); });
    m_job.setOnEnded([this](int rank, const std::string& why) {
      std::lock_guard<std::mutex> lock(m_outputMutex);
      if (m_terminal) m_lines.post("\n");
      std::string name;
      for (const auto& s : m_job.scripts()) {
        if (s.rank == rank) name = s.name;
      }
      note(m_expected > 1 ? "rank " + std::to_string(rank) + ": " + why : name + ": " + why);
    });
  }

  /// Takes connections until every expected rank attached (or the grace period after the first
  /// ended, or a signal), then waits until every rank has left. kOk, or the exit code of the
  /// message it printed.
  int serve(AttachListener& listener);
  /// Writes the export and says how the recording ended (its exit code).
  int finish();

private:
  // Said through m_lines, in order with the progress lines (cli::note and cli::error write at
  // once): the recording's notes, and its errors once what waits is written.
  void note(const std::string& message) { m_lines.post(noteText(message)); }
  int error(int code, const std::string& message) const {
    m_lines.flush();
    return cli::error(code, message);
  }
  // Progress: one line per step of the lowest rank still attached.
  void progress(int rank, const AttachedStep& s);
  /// Whether more ranks may attach, and the note when that ends.
  bool stillAccepting(const std::vector<int>& ranks);
  /// The first rank: its modules decide the hooks, which every rank gets from its first step.
  /// False (after the message, with `code` set) when a --hook pattern matches none of them.
  bool hookFirst(ScriptLink& link, int* code);
  /// A connection that came: joined to the job, or refused with why. False (`code` set) to end.
  bool admit(std::unique_ptr<ScriptLink> link, bool accepting, int* code);
  /// How it ended when it was not clean: a break, a broken protocol, a rank lost; else kOk.
  int endingCode(const std::vector<ScriptRecord>& scripts) const;

  const RecordOptions& m_options;
  const std::uint8_t m_kinds;
  // What the job's callbacks use is declared first: the job (its destructor joins the rank
  // threads) goes before it.
  std::mutex m_outputMutex;
  mutable StderrLines m_lines;  ///< what it says while the scripts run (written by its own thread)
  const bool m_terminal = ::isatty(STDERR_FILENO);
  /// When the lowest rank's first step came, and its number (under m_outputMutex).
  std::optional<std::pair<std::chrono::steady_clock::time_point, std::int64_t>> m_firstStep;
  std::atomic<std::int64_t> m_dropped{0};
  std::atomic<int> m_expected{0};
  std::chrono::steady_clock::time_point m_firstAttach;
  int m_stopSignal = 0;
  std::shared_ptr<CaptureStore> m_store;
  AttachJob m_job;
};

void Recording::progress(int rank, const AttachedStep& s) {
  m_dropped += s.droppedCaptures;
  const auto live = m_job.liveRanks();
  if (live.empty() || rank != live.front()) return;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(m_outputMutex);
  std::ostringstream line;
  line << "step " << s.step;  // the export's own step number, with that step's loss
  if (const auto loss = s.scalars.find("loss"); loss != s.scalars.end()) {
    line << "  loss " << std::setprecision(6) << loss->second;
  }
  line << "  " << s.captures << " captures";
  // The rate of the steps received since the first, not since the recorder started (its wait
  // for a script, and the script's own start, are no step of the run).
  if (!m_firstStep) m_firstStep = std::make_pair(now, s.step);
  const double seconds = std::chrono::duration<double>(now - m_firstStep->first).count();
  if (s.step > m_firstStep->second && seconds > 0) {
    line << std::fixed << std::setprecision(1) << "  " << double(s.step - m_firstStep->second) / seconds
         << " steps/s";
  }
  if (m_expected > 1) line << "  ranks " << live.size() << "/" << m_expected;
  // Why, as the script said (the viewer behind, a tensor its statistics refused, ...).
  if (s.droppedCaptures) {
    std::string why = s.dropReason.empty() ? "see the gaps in manifest.json" : s.dropReason;
    if (why.size() > 200) why = cutAtCharacter(why, 200) + "...";  // a line, not a page
    line << "  (" << s.droppedCaptures << " dropped: " << why << ")";
  }
  m_lines.post(m_terminal ? "\r" + line.str() + "   " : line.str() + "\n");
}

bool Recording::stillAccepting(const std::vector<int>& ranks) {
  if (int(ranks.size()) >= m_expected) {
    if (m_expected > 1) note("all " + std::to_string(m_expected) + " ranks attached");
    return false;
  }
  if (m_job.liveRanks().empty()) return false;  // the job ended before the others came
  if (std::chrono::steady_clock::now() - m_firstAttach > std::chrono::duration<double>(m_options.graceSeconds)) {
    note("only " + std::to_string(ranks.size()) + " of " + std::to_string(m_expected) + " ranks attached within " +
         std::to_string(int(m_options.graceSeconds)) + " s (--grace); recording those");
    return false;
  }
  return true;
}

bool Recording::hookFirst(ScriptLink& link, int* code) {
  const auto& modules = link.modules();
  const ScriptRecord& script = link.script();
  const std::vector<std::string> patterns = m_options.hooks.empty() ? std::vector<std::string>{"*"} : m_options.hooks;
  for (const auto& pattern : patterns) {
    bool any = false;
    for (const auto& m : modules) any = any || matchesPattern(pattern, m.path);
    if (!any) {
      const std::string problem = "--hook '" + pattern + "' matches no module of " + script.name +
                                  " (its modules are named like '" + (modules.size() > 1 ? modules[1].path : "") + "')";
      link.refuse("hookscope-cli record: " + problem);
      *code = error(kUsage, problem);
      return false;
    }
  }
  std::vector<std::uint8_t> masks(modules.size(), 0);
  for (std::size_t i = 0; i < modules.size(); ++i) {
    bool on = false;
    for (const auto& pattern : patterns) on = on || matchesPattern(pattern, modules[i].path);
    if (on) masks[i] = m_kinds;
  }
  m_job.setAllHooks(masks);
  m_expected = m_options.ranks > 0 ? m_options.ranks : script.worldSize;
  m_firstAttach = std::chrono::steady_clock::now();
  return true;
}

bool Recording::admit(std::unique_ptr<ScriptLink> link, bool accepting, int* code) {
  const ScriptRecord script = link->script();
  if (!accepting) {
    link->refuse(m_job.ranks().empty() ? "HookScope is shutting down"
                                          : "this recording of job '" + script.job + "' started without rank " +
                                                std::to_string(script.rank) + ", which attached too late (--grace)");
    note("refused rank " + std::to_string(script.rank) + " of " + script.name + ": it attached after recording began");
    return true;
  }
  if (m_job.ranks().empty() && !hookFirst(*link, code)) return false;
  const std::string who = script.name + " (pid " + std::to_string(script.pid) + " on " + script.host + ", PyTorch " +
                          script.torch + ", " + script.device + ", " + std::to_string(link->modules().size()) +
                          " modules)";
  std::string message;
  if (!m_job.add(std::move(link), &message)) {
    note("refused " + who + ": " + message);
    return true;
  }
  note(script.worldSize > 1 || m_expected > 1
           ? "attached rank " + std::to_string(script.rank) + " of " + std::to_string(script.worldSize) +
                 (script.job.empty() ? "" : " of job " + script.job) + ": " + who
           : "attached: " + who);
  return true;
}

int Recording::serve(AttachListener& listener) {
  // Ranks attach until every expected rank has, or the grace period after the first ends.
  bool accepting = true;
  const auto waitStart = std::chrono::steady_clock::now();
  const bool tcp = listener.parsed().tcp;
  HelloGate gate(tcp ? listener.parsed().token : "", !tcp, m_store, [&listener] { listener.wake(); });
  while (true) {
    if (!m_stopSignal && StopSignals::received()) {
      m_stopSignal = StopSignals::received();
      if (m_job.ranks().empty()) return error(128 + m_stopSignal, "interrupted before a script attached; nothing written");
      m_job.close();  // the scripts detach and train on
      accepting = false;
    }
    const auto ranks = m_job.ranks();
    if (ranks.empty() && m_options.timeoutSeconds > 0 &&
        std::chrono::steady_clock::now() - waitStart > std::chrono::duration<double>(m_options.timeoutSeconds)) {
      return error(kData, "no training script attached within " + std::to_string(int(m_options.timeoutSeconds)) +
                              " s; nothing written");
    }
    if (accepting && !ranks.empty()) accepting = stillAccepting(ranks);
    if (!accepting && !ranks.empty() && m_job.waitEnded(0)) return kOk;
    // Each connection's hello is read on a thread of its own (a slow or idle peer delays no
    // one); an outcome wakes this wait.
    const int fd = listener.accept(accepting ? 200 : 50);
    if (fd >= 0) gate.add(fd);
    while (auto outcome = gate.next(0)) {
      if (!outcome->link) {
        note("refused " + (outcome->count > 1 ? std::to_string(outcome->count) + " connections" : std::string("a connection")) +
             ": " + outcome->refusal);
        continue;
      }
      int code = kOk;
      if (!admit(std::move(outcome->link), accepting, &code)) return code;
    }
  }
}

int Recording::finish() {
  m_lines.flush();
  const auto scripts = m_job.scripts();
  ExportManifest manifest = m_job.manifest();
  if (m_stopSignal) manifest.interrupted = StopSignals::name(m_stopSignal);
  const auto alerts = m_job.alerts();
  ExportOptions exportOptions;
  exportOptions.overwrite = m_options.force;
  exportOptions.lockHeld = true;
  exportOptions.extraFiles = {{"alerts.csv", alertsCsv(alerts)}};
  std::string message;
  if (!writeExport(m_options.out, manifest, *m_store, {}, exportOptions, &message)) return error(kOutput, message);
  std::cerr << "wrote " << m_options.out << ": " << m_store->captureCount() << " captures of "
            << m_store->seriesKeys().size() << " series over " << manifest.steps << " steps";
  if (scripts.size() > 1) std::cerr << " of " << scripts.size() << " ranks";
  std::cerr << ", " << alerts.size() << " alerts";
  if (m_dropped) std::cerr << ", " << m_dropped << " captures dropped by the script (see gaps in manifest.json)";
  std::cerr << "\n";
  // Where the loss's spike started, when it had one (explain says the rest).
  const FirstMovers spike = firstMovers(*m_store, manifest.modulePaths(), std::nullopt, m_store->bandSettings());
  const std::string more = " (hookscope-cli explain " + m_options.out + " says more)";
  if (!spike.movers.empty() && spike.loss) {
    std::cerr << printableText("the loss left its band at step " + std::to_string(spike.step) + "; " +
                               describeMovers(spike, 1).front() + more)
              << "\n";
  } else if (!spike.unfollowed.empty()) {
    const auto lines = describeMovers(spike, 1);  // why, "but N series left…", the first of them
    std::cerr << printableText("the loss never left its band, " + lines[1] + " " + lines[2].substr(2) + more) << "\n";
  }
  if (m_stopSignal) {
    return error(128 + m_stopSignal, "interrupted by " + manifest.interrupted +
                                         ": the script was detached and trains on; the export of what was received "
                                         "is in " + m_options.out);
  }
  return endingCode(scripts);
}

int Recording::endingCode(const std::vector<ScriptRecord>& scripts) const {
  if (const auto breakAlert = m_job.breakAlert()) {
    return error(kBreak, "stopped the " + std::string(scripts.size() > 1 ? "job" : "script") + " at step " +
                             std::to_string(breakAlert->step) + " on " + ruleName(breakAlert->rule) +
                             (scripts.size() > 1 ? " (rank " + std::to_string(breakAlert->rank) + ")" : "") + ": " +
                             breakAlert->message);
  }
  if (m_job.brokeProtocol()) {
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

/// Waits for one training script (or every rank of its job), hooks it and writes its export when it leaves.
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
  Recording recording(options, kinds, breakOn, ruleSettings);
  if (const int code = recording.serve(*listener); code != kOk) return code;
  return recording.finish();
}

} // namespace

Command addRecordCommand(CLI::App& app) {
  auto record = std::make_shared<RecordOptions>();
  auto* command = app.add_subcommand(
      "record", "Wait for a training script that calls hookscope.attach() (or every rank of a torch.distributed "
                "job), hook it, and write the export folder when it closes or disconnects. Prints "
                "HOOKSCOPE_ADDRESS=... as its first line.");
  command->add_option("--out", record->out, "export folder to write")->required()->check(nonEmptyFolder());
  command->add_option("--address", record->address,
                      "where to listen: unix:PATH (default: unix:$XDG_RUNTIME_DIR/hookscope.sock) or "
                      "tcp://HOST:PORT (127.0.0.1 unless told otherwise; a token is made and printed)");
  command->add_option("--hook", record->hooks, "module path pattern to hook (repeatable; default: every module)");
  command->add_option("--kinds", record->kinds,
                      "comma-separated kinds: activation, input, gradient, param, param_grad, update "
                      "(the last three need attach(model, optimizer))")
      ->capture_default_str();
  command->add_option("--bins", record->bins, "histogram bins")->capture_default_str()->check(CLI::Range(1, 4096));
  command->add_option("--memory-cap", record->memoryCapMiB, "MiB the capture store may hold before it thins older steps")
      ->capture_default_str()->check(CLI::PositiveNumber);
  command->add_option("--timeout", record->timeoutSeconds, "seconds to wait for a script (default: forever)");
  command->add_option("--ranks", record->ranks,
                      "ranks of a torch.distributed job to wait for (default: the world size the first rank reports)")
      ->check(CLI::Range(1, 1 << 20));
  command->add_option("--grace", record->graceSeconds,
                      "seconds the other ranks may take to attach after the first; then recording goes on with "
                      "those that did")
      ->capture_default_str()->check(CLI::PositiveNumber);
  command->add_flag("--force", record->force,
                    "replace an existing HookScope export folder (refused when it also holds files HookScope did "
                    "not write: they are named, never deleted)");
  command->add_option("--break", record->breakOn,
                      "stop the script (hookscope.Stopped is raised in its hs.step()) at the end of the step "
                      "where this rule fires, write the export and exit with code 6 (repeatable)");
  command->add_option("--threshold", record->thresholds, "RULE=VALUE: change a rule's threshold (repeatable)");

  return {command, [record] { return runRecord(*record); }};
}

} // namespace hookscope::cli
