#pragma once

#include "state/SessionView.h"
#include "window/DiscardGuard.h"
#include "window/WindowParts.h"

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
/// What is open lives in a Session on SessionHost's thread: the window sends it commands, and
/// it and its parts redraw from the one value SessionHost publishes (SessionView), on a
/// coalescing timer, never once per capture.
class MainWindow : public QMainWindow, public WindowCommands {
  Q_OBJECT

public:
  /// What a first window leaves of a screen smaller than its 1400x900 for the window manager's
  /// title bar and frame, which come on top of the size asked for.
  static constexpr QSize kFrameAllowance{8, 40};

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
  void compareCheckpoints(const QString& first = QString(), const QString& second = QString()) override;
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
  void jumpTo(qint64 step, const QString& module) override;
  /// A problem, in a message box (or, not interactive, in lastMessage() and messageShown).
  void showMessage(const QString& title, const QString& text) override;
  /// What is open, as the window was last told (SessionHost keeps it; the window keeps no copy).
  const SessionView& view() const;
  const SessionSummary& summary() const { return view().opened(); }
  QString modelPath() const { return summary().path; }
  std::shared_ptr<hookscope::CaptureStore> store() const { return summary().store; }
  bool reviewOnly() const { return summary().reviewOnly; }
  /// The open session's run state as the window last received it (SessionHost sends it whole
  /// on every change, in order with what happened; sessions()->state() is the live value).
  const RunState& runState() const { return view().state; }
  bool isRunning() const { return runState().running(); }
  /// Steps the open session has finished.
  qint64 stepsSeen() const { return runState().stepsDone; }

  /// Whether a training script (or a rank of its job) is attached now.
  bool scriptAttached() const { return view().attached() && isRunning(); }
  /// The attached job's ranks that joined, and why each that left did.
  const QSet<int>& ranksAttached() const;
  const QMap<int, QString>& ranksEnded() const;
  /// Where the window waits for a script, while it does.
  QString listeningAddress() const;
  AttachDialog* attachDialog() const;

public Q_SLOTS:
  /// Waits for a training script at `address` (empty: HookScope's default) and shows how to
  /// attach one (File > Attach to a training script).
  void attachScript(const QString& address = QString()) override;
  /// Module path patterns (fnmatch, as `hookscope-cli record --hook`) whose Act and Grad the
  /// next attached script gets ticked at once (`hookscope --attach --hook '*'`).
  void setAttachHooks(const QStringList& patterns) { m_attachHooks = patterns; }
  void run() override;
  void pause() override;
  void stepOnce() override;
  void stop() override;
  /// Closes without asking about captures: after a stop signal saved them (or tried to).
  void quitAfterSignal();
  /// Asks how long a step (or opening a model) may take before its engine process is stopped.
  void editStepTimeLimit() override;
  void editOpenTimeLimit() override;
  void editRuleThresholds() override;
  void editOperatorLibraries() override;
  void resetWeights() override;
  /// File > Open model and Open capture: a file dialog, then open.
  void chooseModel() override;
  void chooseCapture() override;
  /// File > Export plots: every plot as PNG, PDF and CSV into a folder.
  void exportAllPlots() override;
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
  void onSessionOpened(const SessionView& view);
  /// How the Run tab reads for what was opened.
  void describeOpened(const SessionSummary& summary);
  void onStepFinished(const StepSummary& summary);
  /// Every rank of the attached job ended a step the job checked: its alerts and break.
  void onJobStepSettled(const StepSummary& summary);
  /// Shows where an armed rule paused the run (selects the layer and the step).
  void showBreak(const hookscope::Alert& alert);
  /// Whatever changed in what is open: the status bar's passing words follow the run.
  void onViewChanged(const SessionView& now, const SessionView& before);
  void scheduleRedraw();
  void redraw();
  void updateStatus();

  SessionHost* m_sessions;
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
  class SideFold* m_sideFold = nullptr;
  QTabWidget* m_sideTabs = nullptr;
  AlertsPanel* m_alerts = nullptr;
  class RedrawPacer* m_pacer;
  class RunCommands* m_run = nullptr;

public:
  /// Whether a coalesced redraw is due (tests wait for it to be done, not for a fixed time).
  bool redrawPending() const;

private:
  StatusLine* m_status;
  AttachWatch* m_attach = nullptr;
  TensorBoardExport* m_tensorBoard = nullptr;
  WindowMenus* m_menus = nullptr;
  QPointer<CheckpointCompare> m_lastCompare;
  QStringList m_attachHooks;
  bool m_breakShown = false;     ///< the status bar shows where a breakpoint paused the run
  bool m_stoppingShown = false;  ///< the status bar says a Stop waits for the step in progress
  bool m_interactive = true;
  QString m_lastMessage;
};
