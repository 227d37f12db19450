#pragma once

#include "EngineTypes.h"
#include "ExportManifest.h"

#include <QObject>

#include <atomic>
#include <mutex>
#include <memory>
#include <thread>

namespace hookscope {
class AttachJob;
class AttachListener;
} // namespace hookscope

/// The engine's front end: lives on its own thread, owns the model, runner and store, takes
/// commands as queued calls and reports through signals. Steps run one per event-loop turn,
/// so hook switches and other commands take effect between steps. Pause and stop are atomics
/// that any thread may set.
class EngineAdapter : public QObject {
  Q_OBJECT

public:
  explicit EngineAdapter(QObject* parent = nullptr);
  ~EngineAdapter() override;

  /// Any thread: pause takes effect before the next step; unpausing resumes the run.
  void setPaused(bool paused);
  /// Any thread: ends the run before the next step.
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

public Q_SLOTS:
  /// Loads operator libraries (those loaded already stay as they are); each failure is
  /// reported by libraryFailed().
  void loadOperatorLibraries(const QStringList& paths);
  /// Opens a model file. Unless `trusted`, its code is read first: a model whose code reaches
  /// outside the process (__setstate__, torch.from_file, print, native operators) is not
  /// loaded, and trustNeeded says what was found.
  void loadModel(const QString& path, bool trusted = false);
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
  bool prepare(const hookscope::RunConfig& config);
  /// The attach thread: waits for a script (and the other ranks of its job), then serves them
  /// until they leave.
  void attachLoop();
  /// On the attach thread: the job that a first script starts, with its callbacks.
  std::shared_ptr<hookscope::AttachJob> startJob(std::shared_ptr<hookscope::CaptureStore> store);
  /// On the engine thread: makes an attached script (the first rank of its job) the open "model".
  void adoptJob(std::shared_ptr<hookscope::AttachJob> job, std::shared_ptr<hookscope::CaptureStore> store,
                const hookscope::ScriptRecord& script, const std::vector<hookscope::ModuleInfo>& modules,
                const std::vector<std::uint8_t>& hooks);
  /// The attached job, or null (any thread).
  std::shared_ptr<hookscope::AttachJob> job() const;
  void exportAttached(const QString& dir, bool overwrite, const QString& interrupted);
  /// Closes the module's open record for `target` and opens one for `action` (if any).
  void logIntervention(const std::string& module, const std::string& target, const std::string& action);
  void runNext();
  bool doStep();
  void finishRun();

  mutable std::mutex m_modelMutex;  ///< guards swapping m_model against setHooks from other threads
  std::unique_ptr<hookscope::Model> m_model;
  std::unique_ptr<hookscope::StepRunner> m_runner;
  std::shared_ptr<hookscope::CaptureStore> m_store;
  hookscope::RunConfig m_config;
  std::vector<hookscope::ConfigRecord> m_configHistory;  ///< every configuration run, with its steps
  bool m_configured = false;
  bool m_wantShapes = true;
  qint64 m_remaining = 0;
  std::size_t m_capBytes = hookscope::CaptureStore::kDefaultCapBytes;
  std::atomic<bool> m_running{false};
  std::atomic<bool> m_paused{false};
  std::atomic<bool> m_stop{false};
  std::atomic<qint64> m_stepsDone{0};
  std::atomic<quint32> m_breakRules{1u << unsigned(hookscope::RuleKind::NonFinite)};
  std::unique_ptr<hookscope::RuleEngine> m_rules;
  hookscope::RuleSettings m_ruleSettings;
  std::vector<hookscope::InterventionRecord> m_interventions;  ///< toStep -1: still in force

  std::unique_ptr<hookscope::AttachListener> m_listener;
  std::shared_ptr<hookscope::AttachJob> m_job;  ///< guarded by m_modelMutex
  std::thread m_attachThread;
  std::atomic<bool> m_attachStop{false};
};
