#pragma once
// The window's side of a model file run out of its process: starts `hookscope-cli serve` on the
// file, waits for its hello on a private socket, and can always end it. A crash or a hang in
// the model (or in LibTorch's loader) ends that process, never the window.

#include "links/ScriptLink.h"

#include <sys/types.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hookscope {

class AttachListener;

/// The line of a process's error output that says what went wrong: a sanitizer's "ERROR:", an
/// uncaught exception's what(), HookScope's own "hookscope-cli:" line, else the first line that
/// is not part of a stack trace or a banner.
std::string firstMeaningfulLine(const std::string& text);

/// The exit code of an engine that refused to load a model whose code reaches outside the
/// process (the model-code check runs in the engine, which knows the operator libraries):
/// the findings are what it printed; the window asks, and starts it again with trust.
constexpr int kEngineNeedsTrust = 9;

/// A new private folder in TMPDIR (else /tmp) for a confined engine to write in, handed to it as
/// HOOKSCOPE_ENGINE_SCRATCH; "" with *error saying what to do when it cannot be made. Whoever
/// makes it removes it once the engine is gone: a confined process cannot remove its own folder.
std::string makeEngineScratch(std::string* error);

/// How to start an engine process.
struct EngineOptions {
  std::string program;  ///< the hookscope-cli executable
  std::string model;    ///< the model file
  bool trust = false;   ///< the user said to load a model whose code reaches outside the process
  std::vector<std::string> libraries;  ///< operator libraries to load first
  bool confine = true;  ///< Landlock and seccomp (see Confinement.h)
  bool echoErrors = true;  ///< copy what the engine writes to standard error to this process's
};

/// One running engine process and its link: its connection to the viewer.
class EngineProcess {
public:
  /// Starts the engine and waits for its hello: until it comes, `timeoutMs` passes (-1: no
  /// limit), `cancelled` says so (asked every 200 ms; may be empty), or the process ends (a model
  /// it cannot load). Null with a message, which quotes what the engine printed, when it does not
  /// come; the process is gone.
  /// `needsTrust`, when given, is set when the engine refused the model's code (kEngineNeedsTrust);
  /// `error` then holds its findings alone. `limitName` says where the user sets `timeoutMs` (the
  /// message when it passes names it).
  static std::unique_ptr<EngineProcess> start(const EngineOptions& options, std::shared_ptr<CaptureStore> store,
                                              const std::function<bool()>& cancelled, int timeoutMs, std::string* error,
                                              bool* needsTrust = nullptr,
                                              const std::string& limitName = "the open time limit");
  /// Kills the process if it still runs, and reaps it.
  ~EngineProcess();
  EngineProcess(const EngineProcess&) = delete;
  EngineProcess& operator=(const EngineProcess&) = delete;

  pid_t pid() const { return m_pid; }
  /// The accepted link, until someone takes it (AttachJob::add).
  std::unique_ptr<ScriptLink> takeLink() { return std::move(m_link); }
  /// Ends the process at once (SIGKILL).
  void kill();
  /// Waits up to `timeoutMs` (-1: forever) for the process to end; whether it has.
  bool wait(int timeoutMs);
  /// How it ended: "exited with code 2", "killed by signal 11 (SIGSEGV)"; "" while it runs.
  std::string exitText() const;
  /// Whether it ended by a signal HookScope did not send, or with a code other than 0.
  bool failed() const;
  /// Its exit code when it exited (-1: while it runs, or when a signal ended it).
  int exitCode() const;
  /// Waits up to `timeoutMs` until everything the engine wrote to its standard error was read
  /// (after it ended, the pipe may still hold its last words).
  void awaitErrors(int timeoutMs) const;
  /// What the engine wrote to its standard error: its first 8 KB and its last 8 KB.
  std::string errorOutput() const;
  /// Once it ended with kEngineNeedsTrust: the findings of the model-code check it printed.
  std::string findings() const;
  /// Once it ended before its hello: why `model` did not open, in the engine's words.
  std::string couldNotOpen(const std::string& model) const;
  /// The first line of what it wrote that says what went wrong (a sanitizer's or LibTorch's
  /// error, an uncaught exception), not the last line of a stack trace.
  std::string errorSummary() const;
  /// Everything it wrote to its standard error, whole: kept in this file once it failed (removed
  /// when it ends well); "" when it wrote nothing.
  std::string logPath() const;
  /// A failed engine in one paragraph: `errorSummary()`, and where its whole output is.
  std::string failureText() const;

private:
  /// The engine's connection, its hello ready to read; or why there is none: the engine ended
  /// (`ended`) or was given up on (`why`).
  struct Connection {
    int fd = -1;
    bool ended = false;
    std::string why;
  };

  EngineProcess() = default;
  /// Starts `hookscope-cli serve` in a process of its own, its standard error read by a thread.
  static std::unique_ptr<EngineProcess> launch(const EngineOptions& options, const std::string& address,
                                               std::string* error);
  /// Waits for the engine to connect to `listener` and say hello, within `timeoutMs` (-1: no limit).
  Connection awaitConnection(AttachListener& listener, const std::string& folder,
                             const std::function<bool()>& cancelled, int timeoutMs, const std::string& limitName);
  void drainErrors();

  pid_t m_pid = -1;
  int m_status = 0;
  bool m_reaped = false;
  bool m_killed = false;
  bool m_echo = true;
  int m_errFd = -1;
  std::thread m_errThread;
  mutable std::mutex m_mutex;
  std::string m_errorHead;  // the first bytes the engine wrote to its standard error
  std::string m_errors;     // the last ones, after the head
  std::size_t m_errorsLeftOut = 0;
  std::atomic<bool> m_errorsEnded{false};  // the engine's standard error reached its end
  std::string m_logPath;     // every byte it wrote to its standard error (up to kMaxLogBytes)
  std::FILE* m_log = nullptr;
  std::size_t m_logged = 0;
  bool m_logSaid = false;    // all the log holds was said (a refusal's findings): removed at the end
  mutable std::atomic<bool> m_logPointed{false};  // a message named the log (failureText): kept
  std::string m_scratch;     // the folder the engine may write in (HOOKSCOPE_ENGINE_SCRATCH): removed at the end
  std::unique_ptr<ScriptLink> m_link;
};

} // namespace hookscope
