#pragma once

#include "state/RunState.h"
#include "state/SessionTypes.h"
#include "window/DiscardGuard.h"

#include <QMainWindow>
#include <QMap>
#include <QPointer>
#include <QSet>

class AlertsPanel;
class AttachDialog;
class AttachWatch;
class CheckpointCompare;
class ModuleTreeModel;
class ModuleTreePanel;
class PlotsPanel;
class QSplitter;
class QTabWidget;
class QTimer;
class QTreeView;
class RunControls;
class SessionHost;
class StatusLine;
class TensorBoardExport;
class WindowMenus;

/// HookScope's window: the module tree with hook checkboxes, run controls, live plots, laid
/// out and wired together; its parts live in their own classes (panels/, dialogs/, window/).
/// What is open lives in a Session on SessionHost's thread: the window sends it commands, reads
/// its RunState, and redraws on a coalescing timer, never once per capture.
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
  ModuleTreePanel* treePanel() const { return m_treePanel; }
  RunControls* runControls() const { return m_controls; }
  SessionHost* sessions() const { return m_sessions; }
  AlertsPanel* alerts() const { return m_alerts; }
  TensorBoardExport* tensorBoardExport() const { return m_tensorBoard; }
  DiscardGuard* discardGuard() const { return m_guard; }
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
  /// A problem, in a message box (or, not interactive, in lastMessage() and messageShown).
  void showMessage(const QString& title, const QString& text);
  const SessionSummary& summary() const { return m_summary; }
  QString modelPath() const { return m_summary.path; }
  std::shared_ptr<hookscope::CaptureStore> store() const { return m_summary.store; }
  bool reviewOnly() const { return m_summary.reviewOnly; }
  /// The open session's run state as the window last received it (SessionHost emits it whole
  /// on every change, in order with what happened; sessions()->state() is the live value).
  const RunState& runState() const { return m_state; }
  bool isRunning() const { return runState().running(); }
  /// Steps the open session has finished.
  qint64 stepsSeen() const { return runState().stepsDone; }

  /// Whether a training script (or a rank of its job) is attached now.
  bool scriptAttached() const { return m_summary.attached && isRunning(); }
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
  /// Closes without asking about captures: after a stop signal saved them (or tried to).
  void quitAfterSignal();
  /// Asks how long a step (or opening a model) may take before its engine process is stopped.
  void editStepTimeLimit();
  void editRuleThresholds();
  void editOperatorLibraries();
  void resetWeights();
  /// File > Open model and Open capture: a file dialog, then open.
  void chooseModel();
  void chooseCapture();
  /// File > Export plots: every plot as PNG, PDF and CSV into a folder.
  void exportAllPlots();
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
  void buildLayout();
  /// SessionHost's signals to the window's parts.
  void connectSessions();
  /// The window's size and splitters, the step time limit and operator libraries as last left.
  void restoreSettings();
  /// A model holds code that reaches outside HookScope: opens it only if the user says so.
  void askTrust(const QString& path, const QString& findings);
  void onSessionOpened(const SessionSummary& summary, const RunState& state);
  /// How the Run tab reads for what was opened.
  void describeOpened(const SessionSummary& summary);
  void onStepFinished(const StepSummary& summary);
  /// Every rank of the attached job ended a step the job checked: its alerts and break.
  void onJobStepSettled(const StepSummary& summary);
  /// Shows where an armed rule paused the run (selects the layer and the step).
  void showBreak(const hookscope::Alert& alert);
  void onRunState(const RunState& state);
  void scheduleRedraw();
  void redraw();
  void updateActions();
  void updateStatus();
  hookscope::RunConfig currentConfig();
  /// False, with a message saying where to type them, when the run has no inputs.
  bool checkInputsGiven(const hookscope::RunConfig& config);
  void rememberInputs();

  SessionHost* m_sessions;
  SessionSummary m_summary;
  ModuleTreeModel* m_tree;
  QString m_attachAddress;  ///< where the window last listened for scripts (token included)
  bool m_signalled = false;
  ModuleTreePanel* m_treePanel = nullptr;
  DiscardGuard* m_guard;
  hookscope::RuleSettings m_ruleSettings;
  RunControls* m_controls;
  PlotsPanel* m_plots;
  QSplitter* m_splitter = nullptr;
  class PaneSplit* m_split = nullptr;
  QTabWidget* m_sideTabs = nullptr;
  AlertsPanel* m_alerts = nullptr;
  class RedrawPacer* m_pacer;

public:
  /// Whether a coalesced redraw is due (tests wait for it to be done, not for a fixed time).
  bool redrawPending() const;

private:
  StatusLine* m_status;
  AttachWatch* m_attach = nullptr;
  TensorBoardExport* m_tensorBoard = nullptr;
  WindowMenus* m_menus = nullptr;
  QPointer<CheckpointCompare> m_lastCompare;
  RunState m_state;               ///< SessionHost's RunState as last received (runState())
  bool m_breakShown = false;     ///< the status bar shows where a breakpoint paused the run
  bool m_stoppingShown = false;  ///< the status bar says a Stop waits for the step in progress
  bool m_interactive = true;
  QString m_lastMessage;
  qint64 m_lastStep = -1;  ///< the newest step whose captures are all in, for the plots and the status line
};
