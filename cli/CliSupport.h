#pragma once
// What the commands of hookscope-cli share: messages, stop signals, rule options.

#include "store/CaptureStore.h"
#include "files/ExportFolder.h"
#include "files/ExportManifest.h"
#include "files/ExportTarget.h"
#include "rules/RuleEvaluator.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <set>
#include <string>
#include <vector>

namespace hookscope::cli {

/// Prints "hookscope-cli: MESSAGE" to standard error; returns `code`.
int error(int code, const std::string& message);
/// Prints that `model` holds code reaching outside HookScope (`findings`, a line each) and how to
/// load it anyway; returns kNeedsTrust.
int refuseUntrusted(const std::string& model, const std::string& findings);
/// Prints "hookscope-cli (note): MESSAGE" to standard error.
void note(const std::string& message);
/// The line note() prints, with its "\n".
std::string noteText(const std::string& message);

/// What --memory-cap says on a command that reads exports.
constexpr const char* kReadingCapHelp =
    "MiB an export's captures may take in memory; one larger is read at every k-th step (default: half the memory "
    "available, at least 512)";
/// readExport(dir) under readingCapBytes(mib) (--memory-cap); an export read at every k-th step is
/// said in a note, with how to read all of it.
bool readExportCapped(const std::string& dir, std::int64_t mib, ExportData* data, std::string* error);

/// Writes `text` to `path` (a file an output option named, already checked with
/// checkOutputFile); false, with *error saying what to check, when it cannot be written.
bool writeTextFile(const std::string& path, const std::string& text, std::string* error);

/// While alive: the first SIGINT or SIGTERM is recorded for the command to stop after its
/// current step and write what it has; a second one ends the process at once, as the signal
/// would have.
class StopSignals {
public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  /// The signal received, or 0.
  static int received();
  /// "SIGINT" or "SIGTERM".
  static std::string name(int signo);

private:
  struct Saved;
  Saved* m_saved;
};

/// While alive: a fatal signal in this process (SIGSEGV, SIGBUS, SIGFPE, SIGILL: LibTorch or a
/// model's code crashing) prints "hookscope-cli: the process crashed (SIGSEGV) MESSAGE" and exits
/// with `code`, instead of a bare "Segmentation fault". Scopes nest; the outer one is restored.
class CrashReport {
public:
  CrashReport(int code, const std::string& message);
  ~CrashReport();
  CrashReport(const CrashReport&) = delete;
  CrashReport& operator=(const CrashReport&) = delete;

private:
  int m_savedCode;
  std::string m_savedMessage;
};

/// Before a run: tidies interrupted writes in `out` (noting each), checks that an export may be
/// written there and locks it, so a run never ends in "cannot write". Null after reporting why.
std::unique_ptr<ExportLock> holdExportFolder(const std::string& out, bool force);

/// Calls `onTimeout` (on a thread of its own) when `seconds` pass without stepEnded(), counted from
/// construction; seconds <= 0: never. For a step that cannot be interrupted (a forward that loops).
class StepWatchdog {
public:
  StepWatchdog(double seconds, std::function<void()> onTimeout);
  ~StepWatchdog();
  StepWatchdog(const StepWatchdog&) = delete;
  StepWatchdog& operator=(const StepWatchdog&) = delete;
  void stepEnded();
  /// No timeout from here on.
  void stop();

private:
  std::mutex m_mutex;
  std::condition_variable m_changed;
  std::chrono::steady_clock::time_point m_last;
  bool m_stopped = false;
  std::thread m_thread;
};

/// Where a capture stands after one of its steps, for its progress line.
struct StepProgress {
  std::int64_t step = 0;        ///< the step that ended (from 0)
  std::int64_t steps = 0;       ///< steps asked for
  double loss = 0;              ///< NaN when the step reported none
  std::size_t captures = 0;     ///< in the store now
  std::size_t bytes = 0;        ///< the store's memory, against
  std::size_t capBytes = 0;     ///< its cap (thinning starts there)
};

/// The progress of a capture on standard error: on a terminal one line, rewritten in place
/// ("step 12/200  3.4 steps/s  ETA 55 s  loss 2.30  480 captures  1.2/512 MiB"); otherwise, or
/// with `everyStep`, a line per step.
void printStepProgress(const StepProgress& progress, std::chrono::steady_clock::time_point start, bool terminal,
                       bool everyStep);
/// "55 s", "3 min 20 s", "2 h 5 min".
std::string durationText(double seconds);

/// After a capture's export is written: says what it holds, then how the run ended, as an exit
/// code: `failure` (the run ended early: exit 4), an interruption ("SIGINT", "SIGTERM"), a break.
int reportCaptureEnd(const std::string& out, const CaptureStore& store, std::int64_t steps, std::size_t alerts,
                     const std::string& failure, const std::string& interrupted, const std::optional<Alert>& breakAlert,
                     const std::vector<HookedModule>& hooked, bool torchScript = true);
/// "note: 2 modules were not called <when>, …: a, b. A traced model …": why a hooked module
/// captured nothing, and what to do; "" when `modules` is empty.
std::string notCalledNote(const std::vector<std::string>& modules, const std::string& when, bool torchScript = true);

/// A load error of a confined model that is the confinement refusing the model's own code (a
/// file opened for writing, a program, a connection): said as such. Other errors as they are.
std::string confinedRefusal(const std::string& message, bool confined);

/// Splits "NAME=NUMBER" at its last '='; false unless a whole number follows it.
bool splitAssignment(const std::string& spec, std::string* name, double* value);

/// Parses --break rule names and --threshold RULE=VALUE; false with a usage message.
bool parseRuleOptions(const std::vector<std::string>& breakNames, const std::vector<std::string>& thresholds,
                      std::set<RuleKind>* breakOn, RuleSettings* settings, std::string* message);

} // namespace hookscope::cli
