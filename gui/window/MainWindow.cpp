#include "MainWindow.h"

#include "AlertsPanel.h"
#include "AttachDialog.h"
#include "AttachWatch.h"
#include "DiscardGuard.h"
#include "PythonSettings.h"
#include "TensorBoardExport.h"
#include "CheckpointCompare.h"
#include "EngineAdapter.h"
#include "ModuleTreePanel.h"
#include "OperatorLibrariesDialog.h"
#include "PlotsPanel.h"
#include "RecentFiles.h"
#include "RuleThresholdsDialog.h"
#include "RunControls.h"
#include "StatusLine.h"
#include "WindowShortcuts.h"
#include "models/ModuleTreeModel.h"
#include "plots/PlotPage.h"

#include <QAction>
#include <QCloseEvent>
#include <QDir>
#include <QSplitter>
#include <QTabWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QDialog>
#include <QInputDialog>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QScreen>
#include <QPushButton>
#include <QSettings>
#include <QStatusBar>
#include <QTimer>
#include <QToolBar>
#include <QTreeView>

using namespace hookscope;

namespace {
constexpr int kRedrawMs = 33;  // at most about 30 redraws per second

QString settingsKeyFor(const QString& path) {
  return QStringLiteral("inputs/") + QString::fromLatin1(QFileInfo(path).absoluteFilePath().toUtf8().toBase64(QByteArray::Base64UrlEncoding));
}
} // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent), m_engine(new EngineAdapter) {
  registerEngineTypes();
  setWindowTitle(QStringLiteral("HookScope"));
  setAcceptDrops(true);
  m_engine->moveToThread(&m_engineThread);
  connect(&m_engineThread, &QThread::finished, m_engine, &QObject::deleteLater);
  m_engineThread.setObjectName(QStringLiteral("HookScope engine"));
  m_engineThread.start();

  m_plots = new PlotsPanel(this);
  m_tree = new ModuleTreeModel(this);
  m_controls = new RunControls(this);
  m_guard = new DiscardGuard(m_engine, this);
  connect(m_guard, &DiscardGuard::status, this, [this](const QString& text, int ms) { statusBar()->showMessage(text, ms); });
  connect(m_guard, &DiscardGuard::problem, this, &MainWindow::showMessage);
  connect(m_guard, &DiscardGuard::exportDone, this, &MainWindow::exportDone);
  m_tensorBoard = new TensorBoardExport(m_engine, this);
  connect(m_tensorBoard, &TensorBoardExport::status, this, [this](const QString& text, int ms) { statusBar()->showMessage(text, ms); });
  connect(m_tensorBoard, &TensorBoardExport::problem, this, &MainWindow::showMessage);
  buildLayout();
  buildActions();
  m_attach = new AttachWatch(m_engine, m_plots, this);
  connect(m_attach, &AttachWatch::status, this, [this](const QString& text, int ms) { statusBar()->showMessage(text, ms); });
  connect(m_attach, &AttachWatch::problem, this, &MainWindow::showMessage);
  connect(m_attach, &AttachWatch::changed, this, [this] {
    updateActions();
    updateStatus();
    scheduleRedraw();
  });
  connect(m_attach, &AttachWatch::listening, this, &MainWindow::listening);
  connect(m_attach, &AttachWatch::scriptDetached, this, &MainWindow::scriptDetached);

  m_redrawTimer = new QTimer(this);
  m_redrawTimer->setSingleShot(true);
  m_redrawTimer->setInterval(kRedrawMs);
  connect(m_redrawTimer, &QTimer::timeout, this, &MainWindow::redraw);

  m_status = new StatusLine(statusBar());

  connectEngine();
  restoreSettings();
  updateActions();
  updateStatus();
}

MainWindow::~MainWindow() {
  m_engine->requestStop();
  m_engineThread.quit();
  m_engineThread.wait();
}

void MainWindow::connectEngine() {
  connect(m_engine, &EngineAdapter::modelLoaded, this, &MainWindow::onModelLoaded);
  connect(m_engine, &EngineAdapter::modelLoading, this, [this](const QString& path) {
    m_loading = true;
    m_status->setBusy(true);
    statusBar()->showMessage(tr("Opening %1 in an engine process… Stop (Shift+F5) cancels.").arg(QFileInfo(path).fileName()));
    updateActions();
  });
  connect(m_engine, &EngineAdapter::notice, this, [this](const QString& message) {
    statusBar()->showMessage(message, 15000);
    m_stoppingShown = m_running;  // "Stopping after the step in progress…" is over when the run is
  });
  connect(m_engine, &EngineAdapter::engineStopped, this, [this](const QString& message) {
    m_engineStopped = true;
    updateActions();
    updateStatus();
    showMessage(tr("Engine stopped"), message);
  });
  connect(m_engine, &EngineAdapter::loadFailed, this, [this](const QString& message) {
    endLoading();
    showMessage(tr("Cannot open"), message);
  });
  connect(m_engine, &EngineAdapter::trustNeeded, this, &MainWindow::askTrust);
  connect(m_engine, &EngineAdapter::libraryFailed, this, [this](const QString& message) {
    showMessage(tr("Operator library not loaded"), message);
  });
  connect(m_engine, &EngineAdapter::stepFinished, this, &MainWindow::onStepFinished);
  connect(m_engine, &EngineAdapter::jobStepSettled, this, &MainWindow::onJobStepSettled);
  connect(m_engine, &EngineAdapter::runStateChanged, this, &MainWindow::onRunState);
  connect(m_engine, &EngineAdapter::failed, this, [this](const QString& message) {
    updateStatus();
    showMessage(tr("Step failed"), message);
  });
  connect(m_controls, &RunControls::memoryCapChanged, this, [this](qint64 bytes) {
    QMetaObject::invokeMethod(m_engine, [engine = m_engine, bytes] { engine->setMemoryCap(bytes); });
    scheduleRedraw();
  });
  connect(m_plots, &PlotsPanel::moduleClicked, this, &MainWindow::selectModule);
  connect(m_plots, &PlotsPanel::shownChanged, this, &MainWindow::scheduleRedraw);
}

void MainWindow::restoreSettings() {
  QSettings settings;
  m_engine->setStepTimeLimit(settings.value(QStringLiteral("engine/stepTimeLimit"), 120).toInt());
  // Before any model is opened: the engine takes queued calls in order.
  const QStringList libraries = settings.value(QStringLiteral("engine/operatorLibraries")).toStringList();
  if (!libraries.isEmpty()) {
    QMetaObject::invokeMethod(m_engine, [engine = m_engine, libraries] { engine->loadOperatorLibraries(libraries); });
  }
  // A size saved on another screen is kept only while it fits this one and is not shrunk to a
  // corner of it (a 1600x1000 size came back as 949x551 on a smaller screen).
  const QRect screenArea = screen() ? screen()->availableGeometry() : QRect(0, 0, 1400, 900);
  const bool restored = restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray()) &&
                        width() <= screenArea.width() && height() <= screenArea.height() &&
                        width() >= std::min(900, screenArea.width() * 4 / 5) &&
                        height() >= std::min(600, screenArea.height() * 4 / 5);
  restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
  if (!restored) {
    // 1400x900, or the whole screen when it is smaller (a 1024x700 laptop screen).
    resize(std::min(1400, screenArea.width()), std::min(900, screenArea.height()));
    // The tree gets the width its columns need (all of them show at 1024 px), the plots the rest.
    const int tree = std::max(width() * 2 / 5, m_treePanel->neededWidth());
    m_splitter->setSizes({tree, width() - tree});
    return;
  }
  m_splitter->restoreState(settings.value(QStringLiteral("window/splitter")).toByteArray());
}

void MainWindow::askTrust(const QString& path, const QString& findings) {
  const QString text = tr("%1 holds code that runs when it is opened or stepped and reaches outside HookScope:\n\n%2\n"
                          "Open it only if you trust where it came from.")
                           .arg(QFileInfo(path).fileName(), findings);
  endLoading();  // the engine that checked the code has ended: nothing opens while the user decides
  if (!m_interactive) {
    showMessage(tr("Untrusted model"), text);
    return;
  }
  QMessageBox box(QMessageBox::Warning, tr("Untrusted model"), text, QMessageBox::Cancel, this);
  box.setTextFormat(Qt::PlainText);  // the file's name and code, as they are
  QPushButton* open = box.addButton(tr("Open anyway"), QMessageBox::AcceptRole);
  box.setDefaultButton(QMessageBox::Cancel);
  box.exec();
  if (box.clickedButton() != open) {
    statusBar()->showMessage(tr("Not opened: %1").arg(path), 8000);
    return;
  }
  m_pendingOpen = path;
  QMetaObject::invokeMethod(m_engine, [engine = m_engine, path] { engine->loadModel(path, /*trusted=*/true); });
}

void MainWindow::buildLayout() {
  m_treePanel = new ModuleTreePanel(m_tree, m_engine, this);
  connect(m_treePanel, &ModuleTreePanel::currentModuleChanged, this, [this](int module) {
    m_plots->setSelectedHooks(m_tree->hooks(module));
    m_plots->setSelectedModule(m_tree->modules()[std::size_t(module)].path);
  });
  connect(m_treePanel, &ModuleTreePanel::currentHooksChanged, m_plots, &PlotsPanel::setSelectedHooks);
  // Splitters rather than docks: their sizes can be set, so the tree's columns all show.
  m_alerts = new AlertsPanel(this);
  connect(m_alerts, &AlertsPanel::alertActivated, this, [this](qint64 step, const QString& module, int rank, CaptureKind kind) {
    if (m_summary.worldSize > 1) m_plots->setRank(rank);
    jumpTo(step, module);
    m_plots->showKind(kind);  // the series the rule fired on: a gradient's, not the activation
  });
  m_sideTabs = new QTabWidget(this);
  m_sideTabs->addTab(m_controls, tr("Run"));
  m_sideTabs->addTab(m_alerts, tr("Alerts"));
  auto* left = new QSplitter(Qt::Vertical, this);
  left->addWidget(m_treePanel);
  left->addWidget(m_sideTabs);
  left->setStretchFactor(0, 1);
  left->setStretchFactor(1, 0);
  m_splitter = new QSplitter(Qt::Horizontal, this);
  m_splitter->setObjectName(QStringLiteral("mainSplitter"));
  m_splitter->addWidget(left);
  m_splitter->addWidget(m_plots);
  m_splitter->setStretchFactor(0, 0);
  m_splitter->setStretchFactor(1, 1);
  m_splitter->setSizes({590, 900});
  setCentralWidget(m_splitter);
}

void MainWindow::buildActions() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  m_openAction = file->addAction(tr("&Open model…"), this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open TorchScript model"), QFileInfo(m_summary.path).absolutePath(),
                                                      tr("Model files (*.pt *.pt2 *.pth *.ptl *.bin *.zip);;All files (*)"));
    if (!path.isEmpty()) openPath(path);
  });
  m_openAction->setShortcut(QKeySequence::Open);
  file->addAction(tr("Open &capture…"), this, [this] {
    if (m_running || m_loading) {  // said before the folder is chosen, not after
      showMessage(tr("Cannot open"), tr("Stop the run (Shift+F5) before opening a capture; its captures stay."));
      return;
    }
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open HookScope export folder"),
                                                          DiscardGuard::lastExportFolder());
    if (!dir.isEmpty()) openCapture(dir);
  })->setShortcut(QKeySequence(tr("Ctrl+Shift+O")));
  m_recent = new RecentFiles(file->addMenu(tr("Open &recent")), this);
  connect(m_recent, &RecentFiles::chosen, this, &MainWindow::openPath);
  m_attachAction = file->addAction(tr("&Attach to a training script…"), this, [this] { attachScript(); });
  m_attachAction->setShortcut(QKeySequence(tr("Ctrl+Shift+A")));
  m_attachAction->setToolTip(tr("Wait for a PyTorch script that calls hookscope.attach(model) (Ctrl+Shift+A)"));
  file->addSeparator();
  m_exportAction = file->addAction(tr("&Export captures…"), m_guard, &DiscardGuard::exportWithDialog);
  m_exportAction->setShortcut(QKeySequence(tr("Ctrl+E")));
  file->addAction(tr("Export &plots (PNG, PDF, CSV)…"), this, &MainWindow::exportAllPlots);
  file->addAction(tr("&Compare checkpoints…"), this, [this] { compareCheckpoints(); })
      ->setToolTip(tr("Per tensor, what changed from one checkpoint to another, and what went NaN"));
  m_tensorBoardAction = file->addAction(tr("Export as &TensorBoard log…"), m_tensorBoard, &TensorBoardExport::exportWithDialog);
  m_tensorBoardAction->setToolTip(tr("Histograms, gradient norms and scalars of every step as TensorBoard event files"));
  file->addSeparator();
  file->addAction(tr("&Quit"), this, &QWidget::close)->setShortcut(QKeySequence::Quit);

  QMenu* runMenu = menuBar()->addMenu(tr("&Run"));
  m_runAction = runMenu->addAction(tr("&Run"), this, &MainWindow::run);
  m_runAction->setShortcut(QKeySequence(Qt::Key_F5));
  m_pauseAction = runMenu->addAction(tr("&Pause"), this, &MainWindow::pause);
  m_pauseAction->setShortcut(QKeySequence(Qt::Key_F6));
  m_stepAction = runMenu->addAction(tr("&Step"), this, &MainWindow::stepOnce);
  m_stepAction->setShortcut(QKeySequence(Qt::Key_F10));
  m_stopAction = runMenu->addAction(tr("S&top"), this, &MainWindow::stop);
  m_stopAction->setShortcut(QKeySequence(tr("Shift+F5")));
  runMenu->addSeparator();
  m_resetAction = runMenu->addAction(tr("Reset &weights (reload file)"), this, &MainWindow::resetWeights);
  runMenu->addSeparator();
  QMenu* breakMenu = runMenu->addMenu(tr("&Break on"));
  for (int i = 0; i < kRuleCount; ++i) {
    QAction* action = breakMenu->addAction(QString::fromLatin1(ruleName(RuleKind(i))));
    action->setCheckable(true);
    action->setChecked(m_engine->breakRules() & (1u << unsigned(i)));
    action->setToolTip(tr("Pause the run after the step where this rule fires"));
    connect(action, &QAction::toggled, this, [this, i](bool on) { setBreakOn(RuleKind(i), on); });
    m_breakActions.append(action);
  }
  runMenu->addAction(tr("Rule &thresholds…"), this, &MainWindow::editRuleThresholds);
  runMenu->addAction(tr("Step time &limit…"), this, &MainWindow::editStepTimeLimit)
      ->setToolTip(tr("How long a step may take before HookScope stops the engine process running the model"));

  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->addAction(tr("&Follow latest step"), this, [this] { m_plots->setFollowLatest(true); })->setShortcut(QKeySequence(tr("End")));
  view->addAction(tr("&Previous step"), this, [this] { m_plots->stepBy(-1); })->setShortcut(QKeySequence(Qt::Key_BracketLeft));
  view->addAction(tr("&Next step"), this, [this] { m_plots->stepBy(1); })->setShortcut(QKeySequence(Qt::Key_BracketRight));
  view->addAction(tr("Back &ten steps"), this, [this] { m_plots->stepBy(-10); })->setShortcut(QKeySequence(tr("Ctrl+[")));
  view->addAction(tr("Forward t&en steps"), this, [this] { m_plots->stepBy(10); })->setShortcut(QKeySequence(tr("Ctrl+]")));

  QMenu* settingsMenu = menuBar()->addMenu(tr("&Settings"));
  settingsMenu->addAction(tr("&Operator libraries…"), this, &MainWindow::editOperatorLibraries);
  m_python = new PythonSettings(settingsMenu, this);
  settingsMenu->addAction(m_guard->askAction());

  QToolBar* toolbar = addToolBar(tr("Run"));
  toolbar->setObjectName(QStringLiteral("runToolbar"));
  toolbar->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  toolbar->addAction(m_openAction);
  m_attachAction->setIcon(style()->standardIcon(QStyle::SP_DriveNetIcon));
  m_attachAction->setIconText(tr("Attach"));
  toolbar->addAction(m_attachAction);
  toolbar->addSeparator();
  m_runAction->setIcon(style()->standardIcon(QStyle::SP_MediaPlay));
  m_pauseAction->setIcon(style()->standardIcon(QStyle::SP_MediaPause));
  m_stepAction->setIcon(style()->standardIcon(QStyle::SP_MediaSkipForward));
  m_stopAction->setIcon(style()->standardIcon(QStyle::SP_MediaStop));
  m_resetAction->setIcon(style()->standardIcon(QStyle::SP_BrowserReload));
  for (QAction* action : {m_runAction, m_pauseAction, m_stepAction, m_stopAction, m_resetAction}) {
    toolbar->addAction(action);
    if (!action->shortcut().isEmpty()) action->setToolTip(action->text().remove('&') + " (" + action->shortcut().toString() + ")");
  }
  new WindowShortcuts(this);  // after the menus: it reads their shortcuts
}

void MainWindow::openPath(const QString& path) {
  if (QFileInfo(path).isDir() && QFileInfo::exists(path + QStringLiteral("/manifest.json"))) {
    openCapture(path);
    return;
  }
  if (!m_guard->confirm(tr("Opening %1").arg(QFileInfo(path).fileName()), [this, path] { openPath(path); })) return;
  rememberInputs();
  m_attach->stopWaiting();  // a file chosen instead of a script
  m_pendingOpen = path;
  QMetaObject::invokeMethod(m_engine, [engine = m_engine, path] { engine->loadModel(path); });
}

void MainWindow::attachScript(const QString& address) {
  if (scriptAttached()) {
    showMessage(tr("Attach"), tr("%1 is attached: Stop (Shift+F5) detaches it first.").arg(m_summary.fileName));
    return;
  }
  if (!m_guard->confirm(tr("Attaching a script"), [this, address] { attachScript(address); })) return;
  QMetaObject::invokeMethod(m_engine, [engine = m_engine, address] { engine->listen(address); });
}

void MainWindow::openCapture(const QString& dir) {
  if (!m_guard->confirm(tr("Opening %1").arg(QFileInfo(dir).fileName()), [this, dir] { openCapture(dir); })) return;
  rememberInputs();
  m_pendingOpen = dir;
  QMetaObject::invokeMethod(m_engine, [engine = m_engine, dir] { engine->openCapture(dir); });
}

void MainWindow::setBreakOn(RuleKind rule, bool on) {
  const quint32 bit = 1u << unsigned(rule);
  m_engine->setBreakRules(on ? (m_engine->breakRules() | bit) : (m_engine->breakRules() & ~bit));
  QAction* action = m_breakActions.value(int(rule));
  if (action && action->isChecked() != on) {
    QSignalBlocker block(action);
    action->setChecked(on);
  }
}

void MainWindow::setGradientIntervention(int module, GradientIntervention intervention) {
  m_treePanel->setGradientIntervention(module, intervention);
}

void MainWindow::setOutputIntervention(int module, OutputIntervention intervention) {
  m_treePanel->setOutputIntervention(module, intervention);
}

void MainWindow::editOperatorLibraries() {
  const QString key = QStringLiteral("engine/operatorLibraries");
  OperatorLibrariesDialog dialog(QSettings().value(key).toStringList(), this);
  if (dialog.exec() != QDialog::Accepted) return;
  const QStringList paths = dialog.paths();
  QSettings().setValue(key, paths);
  QMetaObject::invokeMethod(m_engine, [engine = m_engine, paths] { engine->loadOperatorLibraries(paths); });
}

void MainWindow::editRuleThresholds() {
  RuleThresholdsDialog dialog(m_ruleSettings, this);
  if (dialog.exec() != QDialog::Accepted) return;
  m_ruleSettings = dialog.settings();
  QMetaObject::invokeMethod(m_engine, [engine = m_engine, settings = m_ruleSettings] { engine->setRuleSettings(settings); });
}

void MainWindow::selectModule(const QString& path) { m_treePanel->selectModule(path); }

void MainWindow::jumpTo(qint64 step, const QString& module) {
  selectModule(module);
  m_plots->scrubTo(step);
}

void MainWindow::onModelLoaded(const ModelSummary& summary) {
  m_summary = summary;
  m_loading = false;
  m_engineStopped = false;
  m_guard->setCaptures(summary);
  m_alerts->clear();
  m_alerts->setRanksShown(summary.worldSize > 1);
  m_pendingOpen.clear();
  m_stepsSeen = 0;
  m_lastStep = -1;
  m_status->restartRate(/*clear=*/true);
  m_attach->reset(summary.worldSize, summary.attached);
  m_alerts->addAlerts(summary.alerts);
  m_plots->setStore(summary.store);
  m_treePanel->showModel(summary);
  if (summary.attached) {
    m_running = true;  // an attached script is running from the start (runStateChanged follows)
    m_paused = false;
    m_status->restartRate();
    m_controls->setEditable(false);
    m_controls->setNote(
        summary.worldSize > 1
            ? tr("<b>%1 is attached</b> with the ranks of its torch.distributed job (%2 ranks): their own data, loss "
                 "and optimizer are used, not these. Pause, Step and breakpoints act on every rank at the same step.")
                  .arg(summary.fileName.toHtmlEscaped())
                  .arg(summary.worldSize)
            : tr("<b>%1 is attached</b>: its own data, loss and optimizer are used, not these.")
                  .arg(summary.fileName.toHtmlEscaped()));
    // Short enough for a 1024 px status bar; the label under it names the script, pid and device.
    statusBar()->showMessage(tr("Attached %1: tick Act, Grad or In to hook layers from its next step").arg(summary.fileName), 10000);
  } else if (!summary.reviewOnly) {
    // Short enough for a 1024 px status bar; the model's name there says how it is confined.
    statusBar()->showMessage(summary.confinement.isEmpty() ? tr("Opened %1 in an engine process, not confined").arg(summary.fileName)
                                                           : tr("Opened %1 in a confined engine process").arg(summary.fileName),
                             8000);
    QSettings settings;
    const QString remembered = settings.value(settingsKeyFor(summary.path)).toString();
    m_controls->setInputSpecs(!remembered.isEmpty() ? remembered : summary.exampleInput);
    m_recent->add(summary.path);
  }
  if (!summary.attached) {
    m_controls->setEditable(!summary.reviewOnly);
    m_controls->setNote(QString());
  }
  setWindowTitle(QStringLiteral("HookScope — %1").arg(summary.fileName));
  updateActions();
  updateStatus();
  scheduleRedraw();  // the tree's numbers of a reopened export
  Q_EMIT modelOpened(summary.path);
}

hookscope::RunConfig MainWindow::currentConfig() {
  rememberInputs();
  return m_controls->config();
}

bool MainWindow::checkInputsGiven(const hookscope::RunConfig& config) {
  if (!config.inputSpecs.empty() || !config.dataFile.empty()) return true;
  m_sideTabs->setCurrentWidget(m_controls);
  showMessage(tr("No input"), tr("Type the shape of each model input into the Run tab's Inputs box (e.g. 8x1x28x28, "
                                 "or 8x128:int64:0:30000 for token ids), or choose a data file."));
  return false;
}

void MainWindow::rememberInputs() {
  if (m_summary.path.isEmpty() || m_summary.reviewOnly || m_summary.attached || m_controls->inputSpecs().isEmpty()) return;
  QSettings().setValue(settingsKeyFor(m_summary.path), m_controls->inputSpecs());
}

void MainWindow::run() {
  if (m_summary.reviewOnly || m_summary.path.isEmpty()) return;
  if (m_running && !m_paused) return;
  if (!m_running && m_summary.attached) return;
  // A run (or a resumed one) shows its newest steps, also after the user scrubbed back.
  m_plots->setFollowLatest(true);
  if (m_running && m_summary.attached) {  // the script's own loop goes on
    m_engine->setPaused(false);
    return;
  }
  const RunConfig config = currentConfig();
  if (!checkInputsGiven(config)) return;
  if (m_running) {  // resumed: what the Run tab says now applies from the next step
    QMetaObject::invokeMethod(m_engine, [engine = m_engine, config] { engine->resume(config); });
    return;
  }
  const qint64 steps = m_controls->steps();
  m_status->restartRate();
  QMetaObject::invokeMethod(m_engine, [engine = m_engine, config, steps] { engine->run(config, steps); });
}

void MainWindow::pause() {
  if (m_running && !m_paused) m_engine->setPaused(true);
}

void MainWindow::stepOnce() {
  if (m_summary.reviewOnly || m_summary.path.isEmpty() || (m_running && !m_paused)) return;
  const RunConfig config = currentConfig();
  if (!m_summary.attached && !checkInputsGiven(config)) return;
  m_plots->setFollowLatest(true);  // show the step about to run, also after a break
  if (m_breakShown) {  // "Paused at step 7 on …" is over once another step runs
    statusBar()->clearMessage();
    m_breakShown = false;
  }
  m_status->setBusy(true);  // a single step of a large model can take a while
  QMetaObject::invokeMethod(m_engine, [engine = m_engine, config] { engine->stepOnce(config); });
}

void MainWindow::stop() {
  if (m_loading) {
    QMetaObject::invokeMethod(m_engine, [engine = m_engine] { engine->cancelLoad(); });
    return;
  }
  m_engine->requestStop();
}

void MainWindow::editStepTimeLimit() {
  bool ok = false;
  const int seconds = QInputDialog::getInt(
      this, tr("Step time limit"),
      tr("A model runs in an engine process of its own. When one step (or opening the model) takes longer than "
         "this, HookScope stops that process and says so; the captures stay.\n\nSeconds (0: no limit):"),
      m_engine->stepTimeLimit(), 0, 7 * 24 * 3600, 10, &ok);
  if (!ok) return;
  QSettings().setValue(QStringLiteral("engine/stepTimeLimit"), seconds);
  m_engine->setStepTimeLimit(seconds);
}

void MainWindow::resetWeights() {
  if (m_summary.reviewOnly || m_summary.attached || m_summary.path.isEmpty() || m_running) return;
  if (!m_guard->confirm(tr("Resetting the weights"), [this] { resetWeights(); })) return;
  QMetaObject::invokeMethod(m_engine, [engine = m_engine] { engine->resetWeights(); });
}

void MainWindow::onStepFinished(const StepSummary& summary) {
  ++m_stepsSeen;
  // In a job every rank reports each step: the rate counts the lowest rank still attached.
  if (summary.rank == m_attach->lowestLiveRank(summary.rank)) m_status->countStep();
  m_lastStep = std::max<qint64>(m_lastStep, summary.finishedStep);
  m_plots->setFinishedStep(m_lastStep);
  if (!summary.shapes.empty()) {
    std::vector<std::pair<std::string, QString>> shapes;
    for (const auto& call : summary.shapes) {
      if (call.call != 0) continue;
      shapes.emplace_back(call.module, QString::fromStdString(call.shapes.empty() ? std::string("—") : call.shapes.front()) +
                                           (call.shapes.size() > 1 ? QStringLiteral(" …") : QString()));
    }
    m_tree->setOutputShapes(shapes);
  }
  if (!m_running) m_status->setBusy(false);
  m_alerts->addAlerts(summary.alerts);
  if (summary.breakAlert) {
    showBreak(*summary.breakAlert);
    return;
  }
  if (!summary.result.lossFinite) {
    statusBar()->showMessage(m_summary.worldSize > 1 ? tr("Step %1: the loss of rank %2 is %3")
                                                           .arg(summary.result.step)
                                                           .arg(summary.rank)
                                                           .arg(summary.result.loss)
                                                     : tr("Step %1: the loss is %2").arg(summary.result.step).arg(summary.result.loss),
                             10000);
  }
  scheduleRedraw();
}

void MainWindow::onJobStepSettled(const StepSummary& summary) {
  // Every live rank has ended this step: all its captures are in.
  m_lastStep = std::max<qint64>(m_lastStep, summary.finishedStep);
  m_plots->setFinishedStep(m_lastStep);
  m_alerts->addAlerts(summary.alerts);
  if (summary.breakAlert) {
    showBreak(*summary.breakAlert);
    return;
  }
  scheduleRedraw();
}

void MainWindow::showBreak(const hookscope::Alert& alert) {
  // Stopped on a breakpoint: show where, at that step (on the rank where it fired). The run is
  // paused from here, whether or not the engine's word of it (runStateChanged) came yet.
  if (m_running && !m_paused) {
    m_paused = true;
    updateActions();
  }
  if (m_summary.worldSize > 1) m_plots->setRank(alert.rank);
  m_plots->refresh();
  jumpTo(alert.step, QString::fromStdString(alert.module));
  m_plots->showKind(alert.kind);
  m_sideTabs->setCurrentWidget(m_alerts);
  m_alerts->highlight(alert);
  const QString where = m_summary.worldSize > 1 ? tr(" (rank %1; every rank waits at this step)").arg(alert.rank) : QString();
  statusBar()->showMessage(tr("Paused at step %1 on %2%3: %4")
                               .arg(alert.step)
                               .arg(QString::fromLatin1(ruleName(alert.rule)), where, QString::fromStdString(alert.message)));
  m_breakShown = true;
  scheduleRedraw();
  Q_EMIT breakHit(QString::fromStdString(alert.module), alert.step);
}

void MainWindow::onRunState(bool running, bool paused) {
  // An attached script reports its state after every step: the rate restarts only when a run
  // starts or resumes.
  const bool resumed = running && !paused && !(m_running && !m_paused);
  m_running = running;
  m_paused = paused;
  if (!paused && m_breakShown) {  // "Paused at step 7 on …" is over once the run goes on or stops
    statusBar()->clearMessage();
    m_breakShown = false;
  }
  if (!running && m_stoppingShown) {
    statusBar()->showMessage(tr("Stopped after step %1.").arg(m_engine->stepsDone() - 1), 5000);
    m_stoppingShown = false;
  }
  if (resumed) m_status->restartRate();
  updateActions();
  updateStatus();
  scheduleRedraw();
}

void MainWindow::scheduleRedraw() {
  if (!m_redrawTimer->isActive()) m_redrawTimer->start();
}

void MainWindow::redraw() {
  m_plots->refresh();
  if (m_summary.store) m_treePanel->showValuesAt(*m_summary.store, m_plots->shownStep(), m_plots->shownRank());
  updateStatus();
}

void MainWindow::updateActions() {
  // An attached script runs its own loop: it can be resumed, paused, stepped and detached,
  // never started again or reset from here.
  const bool attached = m_summary.attached;
  const bool model = !m_summary.path.isEmpty() && !m_summary.reviewOnly && (!attached || m_running);
  m_runAction->setEnabled(model && (!m_running || m_paused));
  m_runAction->setText(m_running && m_paused ? tr("&Resume") : tr("&Run"));
  // Paused: Resume (F5) is the one way on; Pause stays Pause.
  m_pauseAction->setEnabled(model && m_running && !m_paused);
  m_stepAction->setEnabled(model && (attached ? m_paused : (!m_running || m_paused)));
  m_stopAction->setEnabled(m_running || m_loading);
  m_stopAction->setText(attached ? tr("De&tach") : tr("S&top"));
  m_stopAction->setToolTip(attached ? tr("Detach (Shift+F5): the script's hooks go and it trains on without HookScope")
                                    : tr("Stop (Shift+F5)"));
  m_resetAction->setEnabled(model && !attached && !m_running);
  m_exportAction->setEnabled(!m_summary.path.isEmpty());
  m_tensorBoardAction->setEnabled(!m_summary.path.isEmpty());
  m_openAction->setEnabled(!m_running && !m_loading);
  m_attachAction->setEnabled(!m_running);
}

void MainWindow::updateStatus() {
  StatusLine::State state;
  state.summary = &m_summary;
  state.ranksAttached = &m_attach->ranksAttached();
  state.ranksEnded = &m_attach->ranksEnded();
  state.listenAddress = m_attach->listeningAddress();
  state.lastStep = m_lastStep;
  state.running = m_running;
  state.paused = m_paused;
  state.engineStopped = m_engineStopped;
  state.scriptEnded = m_attach->scriptEnded();
  m_status->show(state);
}

void MainWindow::endLoading() {
  m_loading = false;
  statusBar()->clearMessage();
  updateActions();
  updateStatus();
  m_pendingOpen.clear();
}

void MainWindow::showMessage(const QString& title, const QString& text) {
  m_lastMessage = text;
  statusBar()->showMessage(text, 10000);
  Q_EMIT messageShown(text);
  if (!m_interactive) return;
  // Messages quote the model's and LibTorch's own words: plain text, never read as HTML (a name
  // with "<" would otherwise swallow the rest and the line breaks).
  QMessageBox box(QMessageBox::Warning, title, text, QMessageBox::Ok, this);
  box.setTextFormat(Qt::PlainText);
  box.exec();
}

void MainWindow::setInteractive(bool interactive) {
  m_interactive = interactive;
  m_guard->setInteractive(interactive);
  m_attach->setInteractive(interactive);
}

QTreeView* MainWindow::treeView() const { return m_treePanel->view(); }

QString MainWindow::lastRefusal() const { return m_attach->lastRefusal(); }
const QSet<int>& MainWindow::ranksAttached() const { return m_attach->ranksAttached(); }
const QMap<int, QString>& MainWindow::ranksEnded() const { return m_attach->ranksEnded(); }
QString MainWindow::listeningAddress() const { return m_attach->listeningAddress(); }
AttachDialog* MainWindow::attachDialog() const { return m_attach->dialog(); }

int MainWindow::discardQuestions() const { return m_guard->questions(); }

void MainWindow::setDiscardAnswer(DiscardChoice choice, const QString& exportDir) { m_guard->setAnswer(choice, exportDir); }

bool MainWindow::hasUnexportedCaptures() const { return m_guard->hasUnexported(); }

void MainWindow::exportCapturesTo(const QString& dir, bool overwrite, const QString& interrupted) {
  m_guard->exportTo(dir, overwrite, interrupted);
}

CheckpointCompare* MainWindow::lastCompare() const { return m_lastCompare; }

void MainWindow::compareCheckpoints(const QString& first, const QString& second) {
  QString a = first, b = second;
  if (a.isEmpty()) {
    const QString filter = tr("Checkpoints (*.pt *.pth *.bin *.safetensors *.ckpt);;All files (*)");
    a = QFileDialog::getOpenFileName(this, tr("Compare checkpoints: the first (before)"), QString(), filter);
    if (a.isEmpty()) return;
    b = QFileDialog::getOpenFileName(this, tr("Compare checkpoints: the second (after)"), QFileInfo(a).absolutePath(), filter);
    if (b.isEmpty()) return;
  }
  auto* dialog = new CheckpointCompare(this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->compare(a, b);
  dialog->show();
  m_lastCompare = dialog;
}

void MainWindow::exportAllPlots() {
  const QString dir = QFileDialog::getExistingDirectory(this, tr("Export plots into folder"));
  if (dir.isEmpty()) return;
  QStringList failed;
  for (PlotPage* page : m_plots->pages()) {
    const QString base = QDir(dir).filePath(page->title().toLower().replace(' ', '_'));
    const bool ok = page->savePng(base + QStringLiteral(".png")) && page->savePdf(base + QStringLiteral(".pdf")) &&
                    page->saveCsv(base + QStringLiteral(".csv"));
    if (!ok) failed << page->title();
  }
  if (failed.isEmpty()) {
    statusBar()->showMessage(tr("Plots exported to %1").arg(dir), 8000);
  } else {
    showMessage(tr("Export plots"), tr("Could not write %1 into %2: check that the folder is writable.").arg(failed.join(", "), dir));
  }
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (!m_guard->confirm(tr("Quitting"), [this] { close(); })) {
    event->ignore();
    return;
  }
  rememberInputs();
  QSettings settings;
  settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
  settings.setValue(QStringLiteral("window/state"), saveState());
  settings.setValue(QStringLiteral("window/splitter"), m_splitter->saveState());
  m_engine->requestStop();
  event->accept();
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (event->mimeData()->hasUrls() && event->mimeData()->urls().size() == 1 && event->mimeData()->urls().front().isLocalFile()) {
    event->acceptProposedAction();
  }
}

void MainWindow::dropEvent(QDropEvent* event) {
  const QString path = event->mimeData()->urls().front().toLocalFile();
  if (m_running) {
    showMessage(tr("Cannot open"), tr("Stop the run before opening another model."));
    return;
  }
  openPath(path);
  event->acceptProposedAction();
}
