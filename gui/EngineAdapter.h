#pragma once

#include "EngineTypes.h"
#include "files/ExportManifest.h"

#include <QObject>

#include <atomic>
#include <mutex>
#include <memory>
#include <thread>

namespace hookscope {
class AttachJob;
class AttachListener;
class EngineProcess;
} // namespace hookscope

class QTimer;

/// The engine's front end: lives on its own thread, owns the store and the session behind it,
/// takes commands as queued calls and reports through signals. No model runs in the window's
/// process: a model file is run by an engine process (`hookscope-cli serve`, started here) that
/// speaks the attach protocol like a training script, so a crash or a hang in the model ends
/// that process and never the window or its captures.
class EngineAdapter : public QObject {
  Q_OBJECT

public:
  explicit EngineAdapter(QObject* parent = nullptr);
  ~EngineAdapter() override;

  /// Any thread: pause takes effect before the next step; unpausing resumes the run.
  void setPaused(bool paused);
  /// Resumes a paused run of a model file with `config` from its next step (the configuration
  /// history records the change); an attached script's loop just goes on.
  void resume(const hookscope::RunConfig& config);
  /// Any thread: ends the run after the step in progress; asked again while that step has not
  /// ended, ends it at once by stopping the engine process (the captures stay).
  void requestStop();
  bool isRunning() const { return m_running.load(); }
  /// Any thread: sets one module's hook mask (bits of hookscope::kindBit). Takes effect at
  /// the module's next call, also in the middle of a run.
  void setHooks(int module, quint8 mask);
  bool isPaused() const { return m_paused.load(); }
  /// Any thread: changes what flows back through a module's output from its next call on;
  /// the change is logged with the step, for the export's manifest.
  void setGradientIntervention(int module, hookscope::GradientIntervention intervention);
  /// Any thread: replaces a module's output from its next call on (logged like the above).
  void setOutputIntervention(int module, hookscope::OutputIntervention intervention);
  /// Any thread: the rules that pause a run when they fire (bit i: RuleKind i).
  void setBreakRules(quint32 mask);
  quint32 breakRules() const { return m_breakRules.load(); }
  /// Any thread: steps the engine has finished on the current model.
  qint64 stepsDone() const { return m_stepsDone.load(); }

  /// Any thread: how long a step (or opening a model) may take before the engine process is
  /// stopped and that is reported (<= 0: no limit).
  void setStepTimeLimit(int seconds) { m_stepTimeLimit = seconds; }
  int stepTimeLimit() const { return m_stepTimeLimit.load(); }
  /// Any thread: the process id of the engine running the open model file (-1: none).
  qint64 enginePid() const;

public Q_SLOTS:
  /// The operator libraries each engine process loads before a model (a missing one is
  /// reported by libraryFailed()).
  void loadOperatorLibraries(const QStringList& paths);
  /// Opens a model file in a new engine process: modelLoading now, then modelLoaded or
  /// loadFailed (the open model stays until the new one is open). Unless `trusted`, its code is
  /// read first: a model whose code reaches outside the process (__setstate__, torch.from_file,
  /// print, native operators) is not loaded, and trustNeeded says what was found.
  void loadModel(const QString& path, bool trusted = false);
  /// Gives up opening a model (the engine process that was loading it ends).
  void cancelLoad();
  void openCapture(const QString& dir);
  /// Runs `steps` steps with this configuration (<= 0: until stopped).
  void run(const hookscope::RunConfig& config, qint64 steps);
  /// Runs exactly one step (also while paused).
  void stepOnce(const hookscope::RunConfig& config);
  /// Reloads the model file: fresh weights, same hooks, captures cleared.
  void resetWeights();
  void setMemoryCap(qint64 bytes);
  /// Rule thresholds, for this model and the ones opened after it.
  void setRuleSettings(const hookscope::RuleSettings& settings);
  /// `interrupted`: the signal that ended the session early ("SIGINT"), for the manifest.
  void exportCaptures(const QString& dir, bool overwrite, const QString& interrupted = QString());
  /// Waits for one training script at `address` ("" for HookScope's default), or for every rank
  /// of one torch.distributed job; reports listening() with the address to give it, or
  /// listenFailed(). When the first attaches, it replaces the open model like opening a file
  /// (modelLoaded, with `attached` set); the other ranks of its job join it (rankAttached). Steps
  /// come as stepFinished, per rank; Run, Pause, Step and Stop (which detaches) act on every rank
  /// at the same step.
  void listen(const QString& address);
  /// Stops waiting for a script (one attached stays).
  void stopListening();

Q_SIGNALS:
  void modelLoaded(const ModelSummary& summary);
  /// An engine process is opening this model file (cancelLoad() gives up).
  void modelLoading(const QString& path);
  /// Something the user should read in the status bar ("Stopping after the step in progress…").
  void notice(const QString& message);
  /// The engine process running the model ended by itself (a crash, a step over the time
  /// limit, a second Stop): why. The captures stay; opening the model again starts a new one.
  void engineStopped(const QString& message);
  void loadFailed(const QString& message);
  /// The model's code reaches outside the process (`findings`, one per line): load it only
  /// when the user says so, with loadModel(path, true).
  void trustNeeded(const QString& path, const QString& findings);
  void libraryFailed(const QString& message);
  void stepFinished(const StepSummary& summary);
  void runStateChanged(bool running, bool paused);
  /// A step or run failed; the engine stays usable.
  void failed(const QString& message);
  void exportFinished(const QString& dir, const QString& error);
  /// Listening for a script at this address (the full form, token included).
  void listening(const QString& address);
  /// Cannot listen (the address is taken, not private, or a script is still attached): why.
  void listenFailed(const QString& message);
  /// A connection was refused (not a HookScope script, wrong token): why.
  void attachRefused(const QString& message);
  /// The attached script left (closed, disconnected, or Stop), or every rank of its job did;
  /// the captures stay.
  void scriptDetached(const QString& reason);
  /// A rank of the attached job joined (`who`: its script, pid and host) or left (`why`).
  void rankAttached(int rank, const QString& who);
  void rankEnded(int rank, const QString& why);
  /// Every live rank of the attached job has ended this step and the job has checked it: the
  /// job's own alerts (rank_divergence), and the break that paused every rank here, if any.
  void jobStepSettled(const StepSummary& summary);

private:
  /// Sends the engine a configuration that differs from the one it has; false when there is no
  /// engine to send it to.
  bool prepare(const hookscope::RunConfig& config);
  /// On the engine thread: makes a started engine process the open model.
  /// Load thread: a checkpoint's tensors captured once by hookscope-cli and shown read-only.
  void openCheckpoint(const QString& path, int limitSeconds);
  /// openCapture; with `checkpoint`, the export holds that checkpoint's weights (one step of
  /// param series) and is shown as the checkpoint: its path, name, parameter counts.
  void openCaptureOf(const QString& dir, const QString& checkpoint);
  void adoptEngine(std::shared_ptr<hookscope::EngineProcess> engine, const QString& path);
  /// Ends the open engine process on purpose (no engineStopped); the job is kept for its captures.
  void endEngine();
  /// Whether the open session is a model file's engine process.
  bool engineOpen() const;
  /// Every half second: stops an engine whose step is over the time limit.
  void checkStepTime();
  /// Kills the engine process in the middle of a step; `why` goes into engineStopped's message.
  void killEngine(const std::string& why);
  /// Steady-clock milliseconds, for m_busySince.
  static qint64 nowMs();
  /// The run ended (its steps done, stopped, or failed).
  void finishRun();
  /// The attach thread: waits for a script (and the other ranks of its job), then serves them
  /// until they leave.
  void attachLoop();
  /// On the attach thread: the job that a first script starts, with its callbacks.
  /// `engine`: the job of a model file's engine process, whose steps the window's runs count.
  std::shared_ptr<hookscope::AttachJob> startJob(std::shared_ptr<hookscope::CaptureStore> store, bool engine = false);
  /// On the engine thread: makes an attached script (the first rank of its job) the open "model".
  void adoptJob(std::shared_ptr<hookscope::AttachJob> job, std::shared_ptr<hookscope::CaptureStore> store,
                const hookscope::ScriptRecord& script, const std::vector<hookscope::ModuleInfo>& modules,
                const std::vector<std::uint8_t>& hooks);
  /// The attached job, or null (any thread).
  std::shared_ptr<hookscope::AttachJob> job() const;
  void exportAttached(const QString& dir, bool overwrite, const QString& interrupted);
  /// Closes the module's open record for `target` and opens one for `action` (if any).
  void logIntervention(const std::string& module, const std::string& target, const std::string& action);

  mutable std::mutex m_modelMutex;  ///< guards swapping m_job and m_engineProcess against other threads
  std::shared_ptr<hookscope::CaptureStore> m_store;
  hookscope::RunConfig m_config;
  std::vector<hookscope::ConfigRecord> m_configHistory;  ///< every configuration run, with its steps
  bool m_configured = false;
  std::atomic<qint64> m_remaining{0};  ///< steps left in the run (-1: until stopped)
  std::size_t m_capBytes = hookscope::CaptureStore::kDefaultCapBytes;
  std::atomic<bool> m_running{false};
  std::atomic<bool> m_paused{false};
  std::atomic<bool> m_stop{false};
  std::atomic<qint64> m_stepsDone{0};
  std::atomic<quint32> m_breakRules{1u << unsigned(hookscope::RuleKind::NonFinite)};
  hookscope::RuleSettings m_ruleSettings;
  std::vector<hookscope::InterventionRecord> m_interventions;  ///< of an export reopened
  std::vector<hookscope::Alert> m_reviewAlerts;                ///< of an export reopened

  // The engine process of the open model file.
  std::shared_ptr<hookscope::EngineProcess> m_engineProcess;  ///< guarded by m_modelMutex
  std::shared_ptr<std::atomic<bool>> m_engineEnding;  ///< set when the window ends it on purpose
  std::string m_killReason;  ///< why the window killed the engine mid-step (guarded by m_modelMutex)
  QString m_enginePath;
  std::atomic<bool> m_engineJob{false};  ///< the open job is (or was) a model file's engine process
  hookscope::ExportManifest m_reviewManifest;  ///< of an export reopened
  std::string m_engineSha256;
  QStringList m_libraries;
  std::thread m_loadThread;
  std::atomic<bool> m_loadCancel{false};
  std::atomic<int> m_stepTimeLimit{120};
  /// Milliseconds (steady clock) since which a step is awaited from the engine; 0: none.
  std::atomic<qint64> m_busySince{0};
  QTimer* m_watchdog = nullptr;

  std::unique_ptr<hookscope::AttachListener> m_listener;
  std::shared_ptr<hookscope::AttachJob> m_job;  ///< guarded by m_modelMutex
  std::thread m_attachThread;
  std::atomic<bool> m_attachStop{false};
};
