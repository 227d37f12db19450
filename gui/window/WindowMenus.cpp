#include "window/WindowMenus.h"

#include "dialogs/PythonSettings.h"
#include "panels/ModuleTreePanel.h"
#include "panels/PlotsPanel.h"
#include "session/SessionHost.h"
#include "window/DiscardGuard.h"
#include "window/RecentFiles.h"
#include "window/RunComparer.h"
#include "window/SpikeFinder.h"
#include "window/TensorBoardExport.h"
#include "window/WindowShortcuts.h"

#include <QAction>
#include <QMainWindow>
#include <QMenuBar>
#include <QStyle>
#include <QToolBar>

using namespace hookscope;

WindowMenus::WindowMenus(const WindowParts& parts) : QObject(parts.frame), m_parts(parts) {
  buildFile();
  buildRun(parts.sessions->breakRules());
  buildView();
  WindowCommands* c = parts.commands;
  QMenu* settings = parts.frame->menuBar()->addMenu(tr("&Settings"));
  settings->addAction(tr("&Operator libraries…"), this, [c] { c->editOperatorLibraries(); });
  m_python = new PythonSettings(settings, parts.frame);
  settings->addAction(parts.guard->askAction());
  buildToolbar();
  new WindowShortcuts(parts.frame);  // after the menus: it reads their shortcuts
  connect(parts.sessions, &SessionHost::viewChanged, this, [this](const SessionView& now) { update(now); });
  update(parts.sessions->view());
}

void WindowMenus::buildFile() {
  QMainWindow* w = m_parts.frame;
  WindowCommands* c = m_parts.commands;
  QMenu* file = w->menuBar()->addMenu(tr("&File"));
  m_openAction = file->addAction(tr("&Open model…"), this, [c] { c->chooseModel(); });
  m_openAction->setShortcut(QKeySequence::Open);
  file->addAction(tr("Open &capture…"), this, [c] { c->chooseCapture(); })->setShortcut(QKeySequence(tr("Ctrl+Shift+O")));
  m_recent = new RecentFiles(file->addMenu(tr("Open &recent")), this);
  m_attachAction = file->addAction(tr("&Attach to a training script…"), this, [c] { c->attachScript(); });
  m_attachAction->setShortcut(QKeySequence(tr("Ctrl+Shift+A")));
  m_attachAction->setToolTip(tr("Wait for a PyTorch script that calls hookscope.attach(model) (Ctrl+Shift+A)"));
  file->addSeparator();
  m_exportAction = file->addAction(tr("&Export captures…"), m_parts.guard, &DiscardGuard::exportWithDialog);
  m_exportAction->setShortcut(QKeySequence(tr("Ctrl+E")));
  file->addAction(tr("Export &plots (PNG, PDF, CSV)…"), this, [c] { c->exportAllPlots(); });
  file->addAction(tr("&Compare checkpoints…"), this, [c] { c->compareCheckpoints(); })
      ->setToolTip(tr("Per tensor, what changed from one checkpoint to another, and what went NaN"));
  auto* comparer = new RunComparer(m_parts);
  file->addAction(tr("Compare with &run…"), comparer, &RunComparer::chooseAndCompare)
      ->setToolTip(tr("The run shown against an export, series by series: where they first diverge"));
  file->addAction(tr("&Go to first divergence"), comparer, &RunComparer::showFirstDivergence)
      ->setShortcut(QKeySequence(Qt::Key_F8));
  auto* spikes = new SpikeFinder(m_parts);
  QAction* firstMover = file->addAction(tr("Go to first &mover"), spikes, &SpikeFinder::showFirstMover);
  firstMover->setShortcut(QKeySequence(Qt::Key_F9));
  firstMover->setToolTip(tr("Where the loss left its band: the layer that left its own band first, at that step (F9)"));
  file->addAction(tr("Comparison &tolerance…"), comparer, &RunComparer::chooseTolerance)
      ->setToolTip(tr("The relative difference that counts as a divergence (default 1e-4)"));
  m_tensorBoardAction =
      file->addAction(tr("Export as &TensorBoard log…"), m_parts.tensorBoard, &TensorBoardExport::exportWithDialog);
  m_tensorBoardAction->setToolTip(tr("Histograms, gradient norms and scalars of every step as TensorBoard event files"));
  file->addSeparator();
  file->addAction(tr("&Quit"), w, &QWidget::close)->setShortcut(QKeySequence::Quit);
}

void WindowMenus::buildRun(quint32 breakRules) {
  WindowCommands* c = m_parts.commands;
  QMenu* run = m_parts.frame->menuBar()->addMenu(tr("&Run"));
  m_runAction = run->addAction(tr("&Run"), this, [c] { c->run(); });
  m_runAction->setShortcut(QKeySequence(Qt::Key_F5));
  m_pauseAction = run->addAction(tr("&Pause"), this, [c] { c->pause(); });
  m_pauseAction->setShortcut(QKeySequence(Qt::Key_F6));
  m_stepAction = run->addAction(tr("&Step"), this, [c] { c->stepOnce(); });
  m_stepAction->setShortcut(QKeySequence(Qt::Key_F10));
  m_stopAction = run->addAction(tr("S&top"), this, [c] { c->stop(); });
  m_stopAction->setShortcut(QKeySequence(tr("Shift+F5")));
  run->addSeparator();
  m_resetAction = run->addAction(tr("Reset &weights (reload file)"), this, [c] { c->resetWeights(); });
  run->addSeparator();
  QMenu* breakMenu = run->addMenu(tr("&Break on"));
  for (int i = 0; i < kRuleCount; ++i) {
    QAction* action = breakMenu->addAction(QString::fromLatin1(ruleName(RuleKind(i))));
    action->setCheckable(true);
    action->setChecked(breakRules & (1u << unsigned(i)));
    action->setToolTip(tr("Pause the run after the step where this rule fires"));
    connect(action, &QAction::toggled, this, [this, i](bool on) { Q_EMIT breakOnToggled(RuleKind(i), on); });
    m_breakActions.append(action);
  }
  run->addAction(tr("Rule &thresholds…"), this, [c] { c->editRuleThresholds(); });
  run->addAction(tr("Step time &limit…"), this, [c] { c->editStepTimeLimit(); })
      ->setToolTip(tr("How long a step may take before HookScope stops the engine process running the model"));
  run->addAction(tr("&Open time limit…"), this, [c] { c->editOpenTimeLimit(); })
      ->setToolTip(tr("How long opening a model (the engine's start and the file's loading) may take"));
}

void WindowMenus::buildView() {
  PlotsPanel* plots = m_parts.plots;
  QMenu* view = m_parts.frame->menuBar()->addMenu(tr("&View"));
  view->addAction(tr("&Follow latest step"), plots, [plots] { plots->setFollowLatest(true); })
      ->setShortcut(QKeySequence(tr("End")));
  view->addAction(tr("&Previous step"), plots, [plots] { plots->stepBy(-1); })->setShortcut(QKeySequence(Qt::Key_BracketLeft));
  view->addAction(tr("&Next step"), plots, [plots] { plots->stepBy(1); })->setShortcut(QKeySequence(Qt::Key_BracketRight));
  view->addAction(tr("Back &ten steps"), plots, [plots] { plots->stepBy(-10); })->setShortcut(QKeySequence(tr("Ctrl+[")));
  view->addAction(tr("Forward t&en steps"), plots, [plots] { plots->stepBy(10); })->setShortcut(QKeySequence(tr("Ctrl+]")));
  view->addSeparator();
  view->addAction(tr("&Distribution over steps"), plots, [plots] { plots->showPrecision(false); })
      ->setShortcut(QKeySequence(tr("Ctrl+Shift+D")));
  view->addAction(tr("P&recision over steps"), plots, [plots] { plots->showPrecision(true); })
      ->setShortcut(QKeySequence(tr("Ctrl+Shift+P")));
  view->addAction(tr("De&viation from each layer's band"), plots, &PlotsPanel::showDeviation)
      ->setShortcut(QKeySequence(tr("Ctrl+Shift+B")));
  view->addMenu(m_parts.treePanel->precisionMenu());
}

void WindowMenus::buildToolbar() {
  QToolBar* toolbar = m_parts.frame->addToolBar(tr("Run"));
  toolbar->setObjectName(QStringLiteral("runToolbar"));
  toolbar->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  toolbar->addAction(m_openAction);
  QStyle* style = m_parts.frame->style();
  m_attachAction->setIcon(style->standardIcon(QStyle::SP_DriveNetIcon));
  m_attachAction->setIconText(tr("Attach"));
  toolbar->addAction(m_attachAction);
  toolbar->addSeparator();
  m_runAction->setIcon(style->standardIcon(QStyle::SP_MediaPlay));
  m_pauseAction->setIcon(style->standardIcon(QStyle::SP_MediaPause));
  m_stepAction->setIcon(style->standardIcon(QStyle::SP_MediaSkipForward));
  m_stopAction->setIcon(style->standardIcon(QStyle::SP_MediaStop));
  m_resetAction->setIcon(style->standardIcon(QStyle::SP_BrowserReload));
  for (QAction* action : {m_runAction, m_pauseAction, m_stepAction, m_stopAction, m_resetAction}) {
    toolbar->addAction(action);
    if (!action->shortcut().isEmpty()) action->setToolTip(action->text().remove('&') + " (" + action->shortcut().toString() + ")");
  }
}

void WindowMenus::showBreakOn(RuleKind rule, bool on) {
  QAction* action = m_breakActions.value(int(rule));
  if (action && action->isChecked() != on) {
    QSignalBlocker block(action);
    action->setChecked(on);
  }
}

void WindowMenus::update(const SessionView& view) {
  // What each kind can do now is the session's to say (Session::abilities); here only names.
  const SessionAbilities& can = view.can;
  // Detach while a script is attached; once it left, or while a file opens in its place (Stop
  // cancels that), it is Stop again.
  const bool attached = view.attached() && view.scriptEnded.isEmpty() && !view.state.loading;
  m_runAction->setEnabled(can.run);
  m_runAction->setText(view.state.paused() ? tr("&Resume") : tr("&Run"));
  // Paused: Resume (F5) is the one way on; Pause stays Pause.
  m_pauseAction->setEnabled(can.pause);
  m_stepAction->setEnabled(can.step);
  m_stopAction->setEnabled(can.stop);
  m_stopAction->setText(attached ? tr("De&tach") : tr("S&top"));
  m_stopAction->setToolTip(attached ? tr("Detach (Shift+F5): the script's hooks go and it trains on without HookScope")
                                    : tr("Stop (Shift+F5)"));
  m_resetAction->setEnabled(can.reset);
  m_exportAction->setEnabled(can.exportCaptures);
  m_tensorBoardAction->setEnabled(can.exportCaptures);
  m_openAction->setEnabled(can.open);
  m_attachAction->setEnabled(can.attach);
}
