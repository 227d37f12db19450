#pragma once

#include "DiscardGuard.h"
#include "EngineTypes.h"

#include <QMainWindow>
#include <QPointer>
#include <QMap>
#include <QSet>
#include <QThread>

#include <functional>
#include <map>

class AlertsPanel;
class AttachDialog;
class AttachWatch;
class DiscardGuard;
class TensorBoardExport;
class CheckpointCompare;
class PythonSettings;
class EngineAdapter;
class ModuleTreeModel;
class ModuleTreePanel;
class PlotsPanel;
class QAction;
class QSplitter;
class QTabWidget;
class QTimer;
class QTreeView;
class RecentFiles;
class RunControls;
class StatusLine;

/// HookScope's window: the module tree with hook checkboxes, run controls, live plots, laid
/// out and wired together; its parts live in their own classes (ModuleTreePanel, PlotsPanel,
/// RunControls, AlertsPanel, DiscardGuard, RecentFiles, WindowShortcuts). The engine runs on
/// its own thread; this window only sends it commands and redraws on a coalescing timer, never
/// once per capture.
class MainWindow : public QMainWindow {
  Q_OBJECT

public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  /// Opens a model file (or an export folder) as if chosen in the File menu.
  void openPath(const QString& path);
  void openCapture(const QString& dir);
  /// Tests: show messages in lastMessage() instead of modal dialogs, and answer "no" to
  /// questions.
  void setInteractive(bool interactive);
  QString lastMessage() const { return m_lastMessage; }
  /// Why the last connection to the attach address was refused.
  QString lastRefusal() const;

  /// How the question "discard captures that were not exported?" is answered.
  using DiscardChoice = DiscardGuard::Choice;
  /// Tests: the answer given without a dialog, and the folder an Export answer writes to.
  void setDiscardAnswer(DiscardChoice choice, const QString& exportDir = QString());
  /// Times the window asked before discarding captures.
  int discardQuestions() const;
  /// Whether the store holds captures that no export has saved.
  bool hasUnexportedCaptures() const;

  ModuleTreeModel* treeModel() const { return m_tree; }
  QTreeView* treeView() const;
  PlotsPanel* plots() const { return m_plots; }
  RunControls* runControls() const { return m_controls; }
  EngineAdapter* engine() const { return m_engine; }
  AlertsPanel* alerts() const { return m_alerts; }
  TensorBoardExport* tensorBoardExport() const { return m_tensorBoard; }
  /// File > Compare checkpoints; with both given (tests), no file dialogs.
  void compareCheckpoints(const QString& first = QString(), const QString& second = QString());
  /// The last comparison opened (tests).
  CheckpointCompare* lastCompare() const;
  /// Arms or disarms a rule as a breakpoint (Run > Break on).
  void setBreakOn(hookscope::RuleKind rule, bool on);
  /// Sets a module's gradient intervention and marks it in the tree.
  void setGradientIntervention(int module, hookscope::GradientIntervention intervention);
  /// Sets a module's output intervention (ablation) and marks it in the tree.
  void setOutputIntervention(int module, hookscope::OutputIntervention intervention);
  /// Selects the layer with this dotted path in the tree (and so in the plots).
  void selectModule(const QString& path);
  /// Selects a layer in the tree and shows `step` in every plot.
  void jumpTo(qint64 step, const QString& module);
  QString modelPath() const { return m_summary.path; }
  std::shared_ptr<hookscope::CaptureStore> store() const { return m_summary.store; }
  bool reviewOnly() const { return m_summary.reviewOnly; }
  bool isRunning() const { return m_running; }
  qint64 stepsSeen() const { return m_stepsSeen; }

  /// Whether a training script (or a rank of its job) is attached now.
  bool scriptAttached() const { return m_summary.attached && m_running; }
  /// The attached job's ranks that joined, and why each that left did.
  const QSet<int>& ranksAttached() const;
  const QMap<int, QString>& ranksEnded() const;
  /// Where the window waits for a script, while it does.
  QString listeningAddress() const;
  AttachDialog* attachDialog() const;

public Q_SLOTS:
  /// Waits for a training script at `address` (empty: HookScope's default) and shows how to
  /// attach one (File > Attach to a training script).
  void attachScript(const QString& address = QString());
  void run();
  void pause();
  void stepOnce();
  void stop();
  /// Asks how long a step (or opening a model) may take before its engine process is stopped.
  void editStepTimeLimit();
  void resetWeights();
  /// Exports the captures into `dir`; `overwrite` replaces an earlier HookScope export there;
  /// `interrupted` names the signal that ended the session early, for the manifest.
  void exportCapturesTo(const QString& dir, bool overwrite, const QString& interrupted = QString());

Q_SIGNALS:
  void modelOpened(const QString& path);
  void messageShown(const QString& message);
  void exportDone(const QString& dir, const QString& error);
  /// The run paused on an armed rule at this module and step.
  void breakHit(const QString& module, qint64 step);
  /// Waiting for a training script at this address.
  void listening(const QString& address);
  /// The attached script left; its captures stay.
  void scriptDetached(const QString& reason);

protected:
  void closeEvent(QCloseEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

private:
  void buildActions();
  void buildLayout();
  /// The engine's signals to the window's parts.
  void connectEngine();
  /// The window's size and splitters, the step time limit and operator libraries as last left.
  void restoreSettings();
  /// A model holds code that reaches outside HookScope: opens it only if the user says so.
  void askTrust(const QString& path, const QString& findings);
  void onModelLoaded(const ModelSummary& summary);
  void onStepFinished(const StepSummary& summary);
  /// Every rank of the attached job ended a step the job checked: its alerts and break.
  void onJobStepSettled(const StepSummary& summary);
  /// Shows where an armed rule paused the run (selects the layer and the step).
  void showBreak(const hookscope::Alert& alert);
  void onRunState(bool running, bool paused);
  void showMessage(const QString& title, const QString& text);
  /// A model that was opening is not (it opened elsewhere, failed, or waits for the user's trust).
  void endLoading();
  void scheduleRedraw();
  void redraw();
  void updateActions();
  void updateStatus();
  void editRuleThresholds();
  void editOperatorLibraries();
  void exportAllPlots();
  hookscope::RunConfig currentConfig();
  /// False, with a message saying where to type them, when the run has no inputs.
  bool checkInputsGiven(const hookscope::RunConfig& config);
  void rememberInputs();

  QThread m_engineThread;
  EngineAdapter* m_engine;
  ModelSummary m_summary;
  ModuleTreeModel* m_tree;
  ModuleTreePanel* m_treePanel;
  DiscardGuard* m_guard;
  RecentFiles* m_recent = nullptr;
  hookscope::RuleSettings m_ruleSettings;
  RunControls* m_controls;
  PlotsPanel* m_plots;
  QSplitter* m_splitter;
  QTabWidget* m_sideTabs;
  AlertsPanel* m_alerts;
  QList<QAction*> m_breakActions;
  QTimer* m_redrawTimer;
  StatusLine* m_status;
  QAction* m_attachAction = nullptr;
  AttachWatch* m_attach = nullptr;
  QAction* m_openAction = nullptr;
  QAction* m_runAction = nullptr;
  QAction* m_pauseAction = nullptr;
  QAction* m_stepAction = nullptr;
  QAction* m_stopAction = nullptr;
  QAction* m_resetAction = nullptr;
  QAction* m_exportAction = nullptr;
  QAction* m_tensorBoardAction = nullptr;
  TensorBoardExport* m_tensorBoard = nullptr;
  PythonSettings* m_python = nullptr;
  QPointer<CheckpointCompare> m_lastCompare;
  bool m_breakShown = false;     ///< the status bar shows where a breakpoint paused the run
  bool m_stoppingShown = false;  ///< the status bar says a Stop waits for the step in progress
  bool m_running = false;
  bool m_loading = false;         ///< an engine process is opening a model
  bool m_engineStopped = false;   ///< the open model's engine process ended by itself
  bool m_paused = false;
  bool m_interactive = true;
  QString m_lastMessage;
  qint64 m_stepsSeen = 0;
  qint64 m_lastStep = -1;
  QString m_pendingOpen;
};
