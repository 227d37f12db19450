#include "cli/CliSupport.h"

#include "cli/CliCommands.h"
#include "common/PrintableText.h"

#include <cerrno>

#include <filesystem>
#include <fstream>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <sstream>
#include <iomanip>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <set>

namespace hookscope::cli {

namespace {

std::atomic<int> g_stopSignal{0};

void onStopSignal(int signo) {
  if (g_stopSignal.exchange(signo) != 0) {
    ::signal(signo, SIG_DFL);
    ::raise(signo);
  }
}

// What the crash handler writes: set outside it, read inside it (which may only write and exit).
constexpr std::size_t kCrashMessageBytes = 4096;
char g_crashMessage[kCrashMessageBytes] = {};
std::size_t g_crashMessageLength = 0;
volatile sig_atomic_t g_crashCode = 0;  // 0: no scope is open, the signal ends the process as usual

void writeAll(const char* text, std::size_t length) {
  while (length > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, length);
    if (n <= 0) return;
    text += n;
    length -= std::size_t(n);
  }
}

void onCrash(int signo) {
  if (g_crashCode == 0) {
    ::signal(signo, SIG_DFL);
    ::raise(signo);
    return;
  }
  const char* name = signo == SIGSEGV ? "SIGSEGV" : signo == SIGBUS ? "SIGBUS" : signo == SIGFPE ? "SIGFPE" : "SIGILL";
  const char before[] = "\nhookscope-cli: the process crashed (";
  writeAll(before, sizeof before - 1);
  writeAll(name, std::strlen(name));
  writeAll(") ", 2);
  writeAll(g_crashMessage, g_crashMessageLength);
  writeAll("\n", 1);
  ::_exit(g_crashCode);
}

void installCrashHandler() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  // On a stack of its own, so that a crash by stack overflow on the main thread is reported too.
  static std::vector<char> alternate(std::size_t(SIGSTKSZ) * 4);
  stack_t stack{};
  stack.ss_sp = alternate.data();
  stack.ss_size = alternate.size();
  ::sigaltstack(&stack, nullptr);
  struct sigaction action {};
  action.sa_handler = onCrash;
  action.sa_flags = SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  for (const int signo : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::sigaction(signo, &action, nullptr);
}

void setCrashMessage(int code, const std::string& message) {
  g_crashCode = 0;
  g_crashMessageLength = std::min(message.size(), kCrashMessageBytes);
  std::memcpy(g_crashMessage, message.data(), g_crashMessageLength);
  g_crashCode = code;
}

} // namespace

CrashReport::CrashReport(int code, const std::string& message)
    : m_savedCode(g_crashCode), m_savedMessage(g_crashMessage, g_crashMessageLength) {
  installCrashHandler();
  setCrashMessage(code, printableText(message));
}

CrashReport::~CrashReport() { setCrashMessage(m_savedCode, m_savedMessage); }

namespace {
std::vector<std::string> g_commandLine;
}

void keepCommandLine(int argc, char** argv) { g_commandLine.assign(argv, argv + argc); }

std::filesystem::path programPath() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : self;
}

int execWords(std::vector<std::string> words) {
  std::vector<char*> argv;
  for (auto& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  return errno;
}

std::string enginePath() {
  const auto self = programPath();
  return self.empty() ? std::string("hookscope-engine") : (self.parent_path() / "hookscope-engine").string();
}

int execEngine() {
  const std::string engine = enginePath();
  std::vector<std::string> words = g_commandLine;
  if (words.empty()) words.push_back("hookscope-cli");
  words[0] = engine;
  const int failure = execWords(words);
  return error(kModelLoad, "cannot start " + engine + " (" + std::strerror(failure) +
                               "): hookscope-cli runs models through hookscope-engine, which is built and installed "
                               "beside it; build the whole project (scripts/build.sh) or install both");
}

int refuseUntrusted(const std::string& model, const std::string& findings) {
  return error(kNeedsTrust, model + " holds code that runs when it is opened or stepped and reaches outside HookScope:\n" +
                                findings + "Load it only if you trust where it came from: run again with --trust.");
}

int error(int code, const std::string& message) {
  std::cerr << "hookscope-cli: " << printableText(message) << "\n";
  return code;
}

std::string noteText(const std::string& message) { return "hookscope-cli (note): " + printableText(message) + "\n"; }

void note(const std::string& message) { std::cerr << noteText(message); }

bool readExportCapped(const std::string& dir, std::int64_t mib, ExportData* data, std::string* error) {
  const std::size_t cap = readingCapBytes(mib);
  if (!readExport(dir, data, error, cap)) return false;
  if (const std::string thinned = thinnedReadText(dir, *data->store, cap); !thinned.empty()) {
    note(thinned + ": what follows is of those steps; --memory-cap MIB reads more of them");
  }
  return true;
}

bool writeTextFile(const std::string& path, const std::string& text, std::string* error) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
  if (!file.flush()) {
    *error = "cannot write " + path + ": check that its folder exists and is writable";
    return false;
  }
  return true;
}

struct StopSignals::Saved {
  struct sigaction interrupt {}, terminate {};
};

StopSignals::StopSignals() : m_saved(new Saved) {
  struct sigaction action {};
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, &m_saved->interrupt);
  ::sigaction(SIGTERM, &action, &m_saved->terminate);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &m_saved->interrupt, nullptr);
  ::sigaction(SIGTERM, &m_saved->terminate, nullptr);
  delete m_saved;
}

int StopSignals::received() { return g_stopSignal.load(); }

std::string StopSignals::name(int signo) { return signo == SIGINT ? "SIGINT" : "SIGTERM"; }

std::unique_ptr<ExportLock> holdExportFolder(const std::string& out, bool force) {
  for (const auto& line : recoverInterruptedWrites(out)) note(line);
  if (std::string problem = checkExportTarget(out, force); !problem.empty()) {
    error(kOutput, problem);
    return nullptr;
  }
  std::string message;
  auto lock = ExportLock::acquire(out, &message);
  if (!lock) error(kOutput, message);
  return lock;
}

StepWatchdog::StepWatchdog(double seconds, std::function<void()> onTimeout) : m_last(std::chrono::steady_clock::now()) {
  if (!(seconds > 0)) return;
  const auto limit = std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
  m_thread = std::thread([this, limit, onTimeout = std::move(onTimeout)] {
    std::unique_lock<std::mutex> lock(m_mutex);
    while (!m_stopped) {
      if (m_changed.wait_until(lock, m_last + limit) == std::cv_status::timeout && !m_stopped &&
          std::chrono::steady_clock::now() >= m_last + limit) {
        lock.unlock();
        onTimeout();
        return;
      }
    }
  });
}

StepWatchdog::~StepWatchdog() {
  stop();
  if (m_thread.joinable()) m_thread.join();
}

void StepWatchdog::stepEnded() {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_last = std::chrono::steady_clock::now();
  m_changed.notify_all();
}

void StepWatchdog::stop() {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_stopped = true;
  m_changed.notify_all();
}

std::string durationText(double seconds) {
  const auto whole = std::int64_t(std::llround(std::max(0.0, seconds)));
  if (whole < 60) return std::to_string(whole) + " s";
  if (whole < 3600) return std::to_string(whole / 60) + " min " + std::to_string(whole % 60) + " s";
  return std::to_string(whole / 3600) + " h " + std::to_string(whole / 60 % 60) + " min";
}

void printStepProgress(const StepProgress& p, std::chrono::steady_clock::time_point start, bool terminal,
                       bool everyStep) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double rate = double(p.step + 1) / std::max(seconds, 1e-9);
  const auto mib = [](std::size_t bytes) {
    std::ostringstream text;
    text << std::fixed << std::setprecision(bytes < (std::size_t(10) << 20) ? 1 : 0) << double(bytes) / (1 << 20);
    return text.str();
  };
  std::ostringstream line;
  line << "step " << (p.step + 1) << "/" << p.steps << "  " << std::fixed << std::setprecision(1) << rate
       << " steps/s";
  if (p.step + 1 < p.steps) line << "  ETA " << durationText(double(p.steps - p.step - 1) / rate);
  line << std::defaultfloat << "  loss " << std::setprecision(6) << p.loss
       << (std::isfinite(p.loss) ? "" : " (not finite)") << "  " << p.captures << " captures  " << mib(p.bytes)
       << "/" << mib(p.capBytes) << " MiB";
  if (terminal && !everyStep) {
    std::cerr << "\r\033[K" << line.str() << std::flush;  // \033[K: nothing of a longer line before stays
  } else {
    std::cerr << line.str() << "\n";
  }
}

std::string notCalledNote(const std::vector<std::string>& modules, const std::string& when, bool torchScript) {
  if (modules.empty()) return "";
  std::string names;
  for (std::size_t i = 0; i < modules.size() && i < 8; ++i) names += (i ? ", " : "") + (modules[i].empty() ? "(root)" : modules[i]);
  if (modules.size() > 8) names += " and " + std::to_string(modules.size() - 8) + " more";
  return "note: " + std::to_string(modules.size()) + (modules.size() == 1 ? " module was" : " modules were") +
         " not called " + when + ", so no hook of theirs fired: " + printableText(names, false) +
         (torchScript ? ". A traced model keeps only the calls its trace took (a StochasticDepth or an identity whose "
                        "result was not used is gone from it): script the model (torch.jit.script) to keep them, or "
                        "hook their parent."
                      : ". A container (ModuleList, a TransformerEncoder's layers) is never called itself, nor is a "
                        "module whose parent uses its weights directly (MultiheadAttention's out_proj): hook the "
                        "modules that are called.");
}

int reportCaptureEnd(const std::string& out, const CaptureStore& store, std::int64_t steps, std::size_t alerts,
                     const std::string& failure, const std::string& interrupted, const std::optional<Alert>& breakAlert,
                     const std::vector<HookedModule>& hooked, bool torchScript) {
  std::cerr << "wrote " << out << ": " << store.captureCount() << " captures of " << store.seriesKeys().size()
            << " series over " << steps << " steps, " << alerts << " alerts\n";
  // A hooked module that captured nothing in any step was never called: said, with why.
  if (steps > 0) {
    std::set<std::string> captured;
    for (const auto& key : store.seriesKeys()) {
      if (!isParameterKind(key.kind)) captured.insert(key.module);
    }
    std::vector<std::string> silent;
    for (const auto& h : hooked) {
      const bool moduleKinds = std::any_of(h.kinds.begin(), h.kinds.end(), [](const std::string& k) {
        const auto kind = parseCaptureKind(k);
        return kind && !isParameterKind(*kind);
      });
      if (moduleKinds && !captured.count(h.module)) silent.push_back(h.module);
    }
    if (!silent.empty()) std::cerr << "hookscope-cli: " << notCalledNote(silent, "in any step", torchScript) << "\n";
  }
  if (!failure.empty()) {
    return error(kData, failure + "; the export of the " + std::to_string(steps) + " steps before is in " + out);
  }
  if (!interrupted.empty()) {
    const int signo = interrupted == "SIGINT" ? SIGINT : SIGTERM;
    error(128 + signo, "interrupted by " + interrupted + " after step " + std::to_string(steps) +
                           ": the export of the steps captured so far is in " + out + " (marked interrupted in its manifest)");
    return 128 + signo;
  }
  if (breakAlert) {
    return error(kBreak, std::string("stopped at step ") + std::to_string(breakAlert->step) + " on " +
                             ruleName(breakAlert->rule) + ": " + breakAlert->message);
  }
  return kOk;
}

std::string confinedRefusal(const std::string& message, bool confined) {
  if (!confined || (message.find("Permission denied") == std::string::npos &&
                    message.find("Operation not permitted") == std::string::npos)) {
    return message;
  }
  // LibTorch's advice (save the model again) does not fit: the file is fine, its code was stopped.
  std::string what = message.substr(0, message.find(". Check that the file is a TorchScript model"));
  return what + ".\nThat is the model's own code, run while the file is opened, doing what HookScope does not let a "
                "model do (writing a file, starting a program, opening a connection): it was refused, nothing was "
                "written, and the model was not opened. hookscope-cli inspect or capture --no-confine runs it "
                "unconfined: only for a model whose source you trust.";
}

bool splitAssignment(const std::string& spec, std::string* name, double* value) {
  const auto eq = spec.rfind('=');
  if (eq == std::string::npos) return false;
  char* end = nullptr;
  *value = std::strtod(spec.c_str() + eq + 1, &end);
  *name = spec.substr(0, eq);
  return end && *end == '\0';
}

bool parseRuleOptions(const std::vector<std::string>& breakNames, const std::vector<std::string>& thresholds,
                      std::set<RuleKind>* breakOn, RuleSettings* settings, std::string* message) {
  for (const auto& name : breakNames) {
    const auto rule = parseRuleName(name);
    if (!rule) {
      *message = "unknown --break rule '" + name + "'; use one of " + ruleNameList();
      return false;
    }
    breakOn->insert(*rule);
    if (*rule == RuleKind::Anomaly) settings->enabled[std::size_t(RuleKind::Anomaly)] = true;  // off until asked for
  }
  for (const auto& spec : thresholds) {
    std::string name;
    double value = 0;
    const bool assignment = splitAssignment(spec, &name, &value);
    const auto rule = parseRuleName(name);
    if (!assignment || !rule) {
      *message = "--threshold '" + spec + "' needs RULE=VALUE with a rule name and a number";
      return false;
    }
    if (!setRuleThreshold(*settings, *rule, value, message)) return false;
  }
  return true;
}

} // namespace hookscope::cli
