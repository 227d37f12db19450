#pragma once
// The one way from the window to what it shows: SessionHost owns the session thread and the
// Session open on it (one at a time), takes every command as a call queued to that thread in
// order (none waits), and reports through its signals. No model runs in the window's process: a
// model file runs in an engine process (`hookscope-cli serve`), which speaks the attach wire
// like a training script, so a crash or a hang in the model never takes the window.

#include "state/RunState.h"
#include "state/SessionTypes.h"
#include "state/SessionView.h"

#include <QObject>
#include <QStringList>
#include <QThread>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace hookscope {
class EngineProcess;
}

class ScriptListener;
class Session;

class SessionHost : public QObject {
  Q_OBJECT

public:
  explicit SessionHost(QObject* parent = nullptr);
  /// Ends the open session (an engine process stops, scripts detach and train on) and the thread.
  ~SessionHost() override;

  // Queued to the session thread, in the order called.
  /// Opens a model file in a new engine process: opening now, then sessionOpened or openFailed
  /// (the open session stays until the new one is open). Unless `trusted`, its code is read
  /// first: a model whose code reaches outside the process is not opened, and trustNeeded says
  /// what was found. A checkpoint opens read-only, its weights captured once.
  void openModel(const QString& path, bool trusted = false);
  /// Gives up opening a model (the engine process that was opening it ends).
  void cancelOpen();
  /// Reopens an export folder, read-only.
  void openCapture(const QString& dir);
  /// Opens the model file of the open session again: fresh weights, the same hooks.
  void resetWeights();
  /// Waits for one training script at `address` ("" for HookScope's default), or every rank of
  /// one torch.distributed job: listening() with the address to give it, or listenFailed(). The
  /// first to attach replaces the open session; the other ranks of its job join it (rankAttached).
  /// Modules whose path matches one of `hooks` (fnmatch) are hooked for activations and
  /// gradients from its first step.
  void listen(const QString& address, const QStringList& hooks = QStringList());
  /// Stops waiting for a script (one attached stays).
  void stopListening();
  /// Runs `work` on the open session, on the session thread, in order with every other call
  /// (nothing open: it does not run). The window's commands to what is open go this way:
  /// `invoke([](Session& s) { s.setPaused(true); })`.
  void invoke(std::function<void(Session&)> work);
  void setMemoryCap(qint64 bytes);
  /// The memory cap of the captures held (what setMemoryCap set, once the session thread took it).
  std::size_t memoryCap() const { return m_capBytes.load(); }
  /// Rule thresholds, for this session and the ones opened after it.
  void setRuleSettings(const hookscope::RuleSettings& settings);
  /// The rules that pause a run when they fire (bit i: RuleKind i).
  void setBreakRules(quint32 mask);
  /// How long a step may take before the engine process is stopped and that is reported (<= 0:
  /// no limit).
  void setStepTimeLimit(int seconds);
  /// How long opening a model (the engine's start, its imports and the file's loading) may take
  /// before the engine is stopped and that is reported (<= 0: no limit). Its own limit: a busy
  /// machine's start-up says nothing of how long a step may take.
  void setOpenTimeLimit(int seconds) { m_openTimeLimit = seconds; }
  /// The operator libraries each engine process loads before a model (a missing one is reported
  /// by libraryFailed()).
  void setOperatorLibraries(const QStringList& paths);
  /// Writes the captures into `dir`; `interrupted`: the signal that ended the session early.
  void exportCaptures(const QString& dir, bool overwrite, const QString& interrupted = QString());

  /// The window's thread: what is open, as the window has been told (sessionOpened and
  /// viewChanged said it, in order with every other signal). The one copy the window keeps.
  const SessionView& view() const { return m_view; }

  // Any thread, at once.
  /// Where the open session is now (may be ahead of view()).
  RunState state() const;
  quint32 breakRules() const { return m_breakRules.load(); }
  int stepTimeLimit() const { return m_stepTimeLimit.load(); }
  int openTimeLimit() const { return m_openTimeLimit.load(); }

Q_SIGNALS:
  /// Something new is open (after viewChanged with the same value).
  void sessionOpened(const SessionView& view);
  /// What is open changed in any way (opened, its run state, its settled step, what it can do):
  /// the new value and the one before it.
  void viewChanged(const SessionView& now, const SessionView& before);
  /// An engine process is opening this model file (cancelOpen() gives up).
  void opening(const QString& path);
  void openFailed(const QString& message);
  /// The model's code reaches outside the process (`findings`, one per line): open it only
  /// when the user says so, with openModel(path, true).
  void trustNeeded(const QString& path, const QString& findings);
  void libraryFailed(const QString& message);
  void stepFinished(const StepSummary& summary);
  /// Every live rank of the attached job has ended this step: the job's alerts and its break.
  void jobStepSettled(const StepSummary& summary);
  /// Something the user should read in the status bar.
  void notice(const QString& message);
  /// A step or run failed; the session stays usable.
  void failed(const QString& message);
  /// The engine process running the model ended by itself: why. The captures stay.
  void engineStopped(const QString& message);
  void exportFinished(const QString& dir, const QString& error);
  /// Listening for a script at this address (the full form, token included).
  void listening(const QString& address);
  /// Cannot listen (the address is taken, not private, or a run is on): why.
  void listenFailed(const QString& message);
  /// A connection was refused (not a HookScope script, wrong token): why.
  void attachRefused(const QString& message);
  /// The attached script left (closed, disconnected, or detached), or every rank of its job did.
  void scriptDetached(const QString& reason);
  void rankAttached(int rank, const QString& who);
  void rankEnded(int rank, const QString& why);

private:
  /// Queues `work` to the session thread.
  void post(std::function<void()> work);
  /// Session thread: `session` becomes the open one; the one before ends.
  void replace(std::unique_ptr<Session> session);
  /// The open session's state, with the host's own (loading), to the window.
  void updateState(Session* from, const RunState& state);
  /// The newest step whose captures are all in moved on (from `from`'s thread).
  void updateSettled(Session* from, qint64 step);
  /// A rank of the attached job joined, or left and why (any thread; `from`: the session that
  /// said so, none for the listener, which serves the open job).
  void rankJoined(Session* from, int rank, const QString& who);
  void rankLeft(Session* from, int rank, const QString& why);
  /// Under the state lock: the value now, handed to the window's thread in order (`opened`: as
  /// a new session).
  void publishLocked(bool opened = false);
  void setLoading(bool loading);
  /// Session thread: the engine process that opened `path` becomes the open session.
  void adoptEngine(std::shared_ptr<hookscope::EngineProcess> engine, const QString& path);
  /// Load thread: a checkpoint's tensors captured once by hookscope-cli and shown read-only.
  void openCheckpoint(const QString& path, int limitSeconds);
  /// Session thread: an export (of `checkpoint`, when given) opened read-only.
  void openReview(const QString& dir, const QString& checkpoint);
  /// Session thread: starts waiting for a script.
  void startListening(const QString& address, const QStringList& hooks);

  QThread m_thread;
  QObject* m_context;  ///< lives on m_thread: what queued work runs on
  std::unique_ptr<Session> m_session;  ///< read and changed on m_thread only
  mutable std::mutex m_stateMutex;
  Session* m_current = nullptr;  ///< whose state is the window's (state lock)
  RunState m_state;
  std::shared_ptr<const SessionSummary> m_summary = std::make_shared<const SessionSummary>();  ///< m_current's (state lock)
  qint64 m_settled = -1;  ///< m_current's newest settled step (state lock)
  QSet<int> m_ranksAttached;          ///< m_current's (state lock)
  QMap<int, QString> m_ranksEnded;    ///< m_current's (state lock)
  QString m_scriptEnded;              ///< m_current's (state lock)
  SessionView m_view;     ///< the window's thread: view()
  std::atomic<quint32> m_breakRules{1u << unsigned(hookscope::RuleKind::NonFinite)};
  std::atomic<int> m_stepTimeLimit{120};
  std::atomic<int> m_openTimeLimit{120};
  std::atomic<std::size_t> m_capBytes{hookscope::CaptureStore::kDefaultCapBytes};  ///< set on the session thread
  // The session thread's own.
  hookscope::RuleSettings m_ruleSettings;
  QStringList m_libraries;
  std::thread m_loadThread;
  std::atomic<bool> m_loadCancel{false};
  std::unique_ptr<ScriptListener> m_listener;
  std::atomic<bool> m_closing{false};  ///< the host is ending: a script attaching now is not opened
};
