#include "window/MainWindow.h"

#include "dialogs/CheckpointCompare.h"
#include "session/CheckpointComparison.h"
#include "dialogs/OperatorLibrariesDialog.h"
#include "dialogs/RuleThresholdsDialog.h"
#include "dialogs/TrustQuestion.h"
#include "models/ModuleTreeModel.h"
#include "panels/AlertsPanel.h"
#include "panels/ModuleTreePanel.h"
#include "panels/PlotsPanel.h"
#include "panels/RunControls.h"
#include "panels/StatusLine.h"
#include "session/Session.h"
#include "session/SessionHost.h"
#include "window/AttachWatch.h"
#include "window/RecentFiles.h"
#include "window/PaneSplit.h"
#include "window/RedrawPacer.h"
#include "window/RunCommands.h"
#include "window/TensorBoardExport.h"
#include "window/WindowMenus.h"

#include <QCloseEvent>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QInputDialog>
#include <QLocale>
#include <QMessageBox>
#include <QMimeData>
#include <QScreen>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTreeView>

using namespace hookscope;

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent), m_sessions(new SessionHost(this)) {
  setWindowTitle(QStringLiteral("HookScope"));
  setAcceptDrops(true);
  m_pacer = new RedrawPacer([this] { redraw(); }, this);  // first: the parts made below may ask for a redraw
  m_plots = new PlotsPanel(this);
  m_tree = new ModuleTreeModel(this);
  m_controls = new RunControls(this);
  m_guard = new DiscardGuard(m_sessions, this);
  m_status = new StatusLine(statusBar());
  const auto status = [this](const QString& text, int ms) { m_status->say(text, ms); };
  connect(m_guard, &DiscardGuard::status, this, status);
  connect(m_guard, &DiscardGuard::problem, this, &MainWindow::showMessage);
  connect(m_guard, &DiscardGuard::exportDone, this, &MainWindow::exportDone);
  m_tensorBoard = new TensorBoardExport(m_sessions, this);
  connect(m_tensorBoard, &TensorBoardExport::status, this, status);
  connect(m_tensorBoard, &TensorBoardExport::problem, this, &MainWindow::showMessage);
  buildLayout();
  m_run = new RunCommands(m_sessions, m_controls, m_plots, m_status, m_guard, this, this);
  connect(m_run, &RunCommands::inputsMissing, this, [this] { m_sideTabs->setCurrentWidget(m_controls); });
  connect(m_run, &RunCommands::steppingOnce, this, [this] {
    if (!m_breakShown) return;  // "Paused at step 7 on …" is over once another step runs
    statusBar()->clearMessage();
    m_breakShown = false;
  });
  m_menus = new WindowMenus(WindowParts{this, this, m_sessions, m_plots, m_treePanel, m_tree, m_guard, m_tensorBoard});
  connect(m_menus, &WindowMenus::breakOnToggled, this, &MainWindow::setBreakOn);
  connect(m_menus->recentFiles(), &RecentFiles::chosen, this, &MainWindow::openPath);
  m_attach = new AttachWatch(m_sessions, m_plots, this);
  connect(m_attach, &AttachWatch::status, this, status);
  connect(m_attach, &AttachWatch::problem, this, &MainWindow::showMessage);
  connect(m_attach, &AttachWatch::changed, this, [this] {
    updateStatus();
    scheduleRedraw();
  });
  connect(m_attach, &AttachWatch::listening, this, [this](const QString& address) {
    m_attachAddress = address;
    Q_EMIT listening(address);
  });
  connect(m_attach, &AttachWatch::scriptDetached, this, [this](const QString& reason) {
    m_controls->showEnded(summary().fileName, reason);
    m_sideFold->fit();  // the note grew a line
    Q_EMIT scriptDetached(reason);
  });

  connectSessions();
  restoreSettings();
  updateStatus();
}

MainWindow::~MainWindow() = default;  // SessionHost, a child, ends the session and its thread

void MainWindow::connectSessions() {
  connect(m_sessions, &SessionHost::sessionOpened, this, &MainWindow::onSessionOpened);
  connect(m_sessions, &SessionHost::opening, this, [this](const QString& path) {
    m_status->setBusy(true);
    m_status->say(tr("Opening %1 in an engine process… Stop (Shift+F5) cancels.").arg(QFileInfo(path).fileName()));
  });
  connect(m_sessions, &SessionHost::notice, this, [this](const QString& message) {
    m_status->say(message, 15000);
    m_stoppingShown = isRunning();  // "Stopping after the step in progress…" is over when the run is
  });
  connect(m_sessions, &SessionHost::engineStopped, this, [this](const QString& message) {
    updateStatus();
    showMessage(tr("Engine stopped"), message);
  });
  connect(m_sessions, &SessionHost::openFailed, this, [this](const QString& message) {
    statusBar()->clearMessage();
    if (!isRunning()) m_status->setBusy(false);
    showMessage(tr("Cannot open"), message);
  });
  connect(m_sessions, &SessionHost::trustNeeded, this, &MainWindow::askTrust);
  connect(m_sessions, &SessionHost::libraryFailed, this, [this](const QString& message) {
    showMessage(tr("Operator library not loaded"), message);
  });
  connect(m_sessions, &SessionHost::stepFinished, this, &MainWindow::onStepFinished);
  connect(m_sessions, &SessionHost::jobStepSettled, this, &MainWindow::onJobStepSettled);
  connect(m_sessions, &SessionHost::viewChanged, this, &MainWindow::onViewChanged);
  connect(m_sessions, &SessionHost::failed, this, [this](const QString& message) {
    updateStatus();
    showMessage(tr("Step failed"), message);
  });
  connect(m_controls, &RunControls::memoryCapChanged, this, [this](qint64 bytes) {
    m_sessions->setMemoryCap(bytes);
    scheduleRedraw();
  });
  connect(m_plots, &PlotsPanel::moduleClicked, this, &MainWindow::selectModule);
  connect(m_plots, &PlotsPanel::shownChanged, this, &MainWindow::scheduleRedraw);
}

void MainWindow::restoreSettings() {
  QSettings settings;
  m_sessions->setStepTimeLimit(settings.value(QStringLiteral("engine/stepTimeLimit"), 120).toInt());
  m_sessions->setOpenTimeLimit(settings.value(QStringLiteral("engine/openTimeLimit"), 120).toInt());
  // Before any model is opened: the session thread takes calls in order.
  const QStringList libraries = settings.value(QStringLiteral("engine/operatorLibraries")).toStringList();
  if (!libraries.isEmpty()) m_sessions->setOperatorLibraries(libraries);
  // A size saved on another screen is kept only while it fits this one and is not shrunk to a
  // corner of it (a 1600x1000 size came back as 949x551 on a smaller screen).
  const QRect screenArea = screen() ? screen()->availableGeometry() : QRect(0, 0, 1400, 900);
  const bool restored = restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray()) &&
                        width() <= screenArea.width() && height() <= screenArea.height() &&
                        width() >= std::min(900, screenArea.width() * 4 / 5) &&
                        height() >= std::min(600, screenArea.height() * 4 / 5);
  restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
  if (!restored) {
    // 1400x900, or on a smaller screen (a 1024x700 laptop) what fits it with the title bar and
    // frame the window manager adds around this size: the whole screen was asked for, and the
    // status bar went below its bottom edge.
    const QSize frame = kFrameAllowance;
    resize(std::min(1400, screenArea.width() - frame.width()), std::min(900, screenArea.height() - frame.height()));
    move(screenArea.topLeft());
    return;  // the tree's share as PaneSplit gives it
  }
  m_split->keepUsers();
  m_splitter->restoreState(settings.value(QStringLiteral("window/splitter")).toByteArray());
}

void MainWindow::askTrust(const QString& path, const QString& findings) {
  statusBar()->clearMessage();  // the engine that checked the code has ended: nothing opens while the user decides
  if (!m_interactive) {
    showMessage(tr("Untrusted model"), trustQuestionText(path, findings));
  } else if (askToTrust(this, path, findings)) {
    m_sessions->openModel(path, /*trusted=*/true);
  } else {
    m_status->say(tr("Not opened: %1").arg(path), 8000);
  }
}

void MainWindow::buildLayout() {
  m_treePanel = new ModuleTreePanel(m_tree, this);
  connect(m_treePanel, &ModuleTreePanel::currentModuleChanged, this, [this](int module) {
    m_plots->setSelectedHooks(m_tree->hooks(module));
    const auto& info = m_tree->modules()[std::size_t(module)];
    m_plots->setSelectedModule(info.path, info.typeName);
  });
  connect(m_treePanel, &ModuleTreePanel::currentHooksChanged, m_plots, &PlotsPanel::setSelectedHooks);
  connect(m_treePanel, &ModuleTreePanel::hooksChanged, this, [this](const std::vector<std::uint8_t>& masks) {
    m_sessions->invoke([masks](Session& s) { s.setHooks(masks); });
  });
  connect(m_treePanel, &ModuleTreePanel::precisionColumnChanged, this, &MainWindow::scheduleRedraw);
  connect(m_treePanel, &ModuleTreePanel::gradientInterventionChanged, this, [this](int module, GradientIntervention g) {
    m_sessions->invoke([module, g](Session& s) { s.setGradientIntervention(module, g); });
  });
  connect(m_treePanel, &ModuleTreePanel::outputInterventionChanged, this, [this](int module, OutputIntervention o) {
    m_sessions->invoke([module, o](Session& s) { s.setOutputIntervention(module, o); });
  });
  // Splitters rather than docks: their sizes can be set, so the tree's columns all show.
  m_alerts = new AlertsPanel(this);
  connect(m_alerts, &AlertsPanel::alertActivated, this, [this](qint64 step, const QString& module, int rank, CaptureKind kind) {
    if (summary().worldSize > 1) m_plots->setRank(rank);
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
  m_sideFold = new SideFold(left, m_sideTabs);
  m_splitter = new QSplitter(Qt::Horizontal, this);
  m_splitter->setObjectName(QStringLiteral("mainSplitter"));
  m_splitter->addWidget(left);
  m_splitter->addWidget(m_plots);
  m_splitter->setStretchFactor(0, 0);
  m_splitter->setStretchFactor(1, 1);
  m_split = new PaneSplit(m_splitter, [this] { return m_treePanel->neededWidth(); });
  setCentralWidget(m_splitter);
}

void MainWindow::chooseModel() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a model or checkpoint (TorchScript, torch.export .pt2, pickled model, state dict)"),
                                                    QFileInfo(summary().path).absolutePath(), tr("Model files (*.pt *.pt2 *.pth *.ptl *.bin *.zip);;All files (*)"));
  if (!path.isEmpty()) openPath(path);
}

void MainWindow::chooseCapture() {
  if (isRunning() || runState().loading) {  // said before the folder is chosen, not after
    showMessage(tr("Cannot open"), tr("Stop the run (Shift+F5) before opening a capture; its captures stay."));
    return;
  }
  const QString dir = QFileDialog::getExistingDirectory(this, tr("Open HookScope export folder"),
                                                        DiscardGuard::lastExportFolder());
  if (!dir.isEmpty()) openCapture(dir);
}

void MainWindow::openPath(const QString& path) {
  if (QFileInfo(path).isDir() && QFileInfo::exists(path + QStringLiteral("/manifest.json"))) {
    openCapture(path);
    return;
  }
  if (!m_guard->confirm(tr("Opening %1").arg(QFileInfo(path).fileName()), [this, path] { openPath(path); })) return;
  m_run->rememberInputs();
  m_attach->stopWaiting();  // a file chosen instead of a script
  m_sessions->openModel(path);
}

void MainWindow::attachScript(const QString& address) {
  if (scriptAttached()) {
    showMessage(tr("Attach"), tr("%1 is attached: Stop (Shift+F5) detaches it first.").arg(summary().fileName));
    return;
  }
  if (!m_guard->confirm(tr("Attaching a script"), [this, address] { attachScript(address); })) return;
  // The address this window listened at before (`hookscope --address`, with its token): the
  // HOOKSCOPE_ADDRESS a user exported for it keeps connecting.
  m_sessions->listen(address.isEmpty() ? m_attachAddress : address, m_attachHooks);
}

void MainWindow::openCapture(const QString& dir) {
  if (!m_guard->confirm(tr("Opening %1").arg(QFileInfo(dir).fileName()), [this, dir] { openCapture(dir); })) return;
  m_run->rememberInputs();
  // Reading a long run's export takes seconds (a gigabyte: about ten): said, with the busy bar.
  qint64 bytes = 0;
  for (const QFileInfo& file : QDir(dir).entryInfoList(QDir::Files)) bytes += file.size();
  m_status->setBusy(true);
  m_status->say(tr("Reading the capture %1 (%2)…").arg(QFileInfo(dir).fileName(), QLocale().formattedDataSize(bytes)));
  m_sessions->openCapture(dir);
}

void MainWindow::setBreakOn(RuleKind rule, bool on) {
  const quint32 bit = 1u << unsigned(rule);
  m_sessions->setBreakRules(on ? (m_sessions->breakRules() | bit) : (m_sessions->breakRules() & ~bit));
  m_menus->showBreakOn(rule, on);
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
  m_sessions->setOperatorLibraries(paths);
}

void MainWindow::editRuleThresholds() {
  RuleThresholdsDialog dialog(m_ruleSettings, this);
  if (dialog.exec() != QDialog::Accepted) return;
  m_ruleSettings = dialog.settings();
  m_sessions->setRuleSettings(m_ruleSettings);
}

void MainWindow::selectModule(const QString& path) { m_treePanel->selectModule(path); }

void MainWindow::jumpTo(qint64 step, const QString& module) {
  selectModule(module);
  m_plots->scrubTo(step);
}

void MainWindow::onSessionOpened(const SessionView& view) {
  const SessionSummary& summary = view.opened();
  m_alerts->clear();
  m_alerts->setRanksShown(summary.worldSize > 1);
  m_status->restartRate(/*clear=*/true);
  if (!isRunning()) m_status->setBusy(false);  // a capture read (a model file's opening ends with its loading)
  m_alerts->addAlerts(summary.alerts);
  m_plots->setStore(summary.store);
  m_treePanel->showModel(summary);
  describeOpened(summary);
  m_sideFold->fit();  // a script's or a review's Run tab is a line or two: the tree gets the rest
  setWindowTitle(QStringLiteral("HookScope — %1").arg(summary.fileName));
  updateStatus();
  scheduleRedraw();  // the tree's numbers of a reopened export
  Q_EMIT modelOpened(summary.path);
}

void MainWindow::describeOpened(const SessionSummary& summary) {
  if (summary.attached) {
    m_status->restartRate();
    m_controls->showAttached(summary.fileName, summary.worldSize);
    // Short enough for a 1024 px status bar; the label under it names the script, pid and device.
    m_status->say(tr("Attached %1: tick Act, Grad or In to hook layers from its next step").arg(summary.fileName), 10000);
    return;
  }
  m_controls->showOpened(summary.reviewOnly, summary.recordedConfig, summary.recordedSteps, summary.recordedNote);
  if (summary.reviewOnly) return m_status->say(tr("Opened %1%2").arg(summary.fileName, summary.note.isEmpty() ? QString() : ": " + summary.note), 15000);
  // Short enough for a 1024 px status bar; the model's name there says how it is confined.
  m_status->say(summary.confinement.isEmpty() ? tr("Opened %1 in an engine process, not confined").arg(summary.fileName)
                                                         : tr("Opened %1 in a confined engine process").arg(summary.fileName),
                           8000);
  m_controls->recallInputs(summary.path, summary.exampleInput);
  m_menus->recentFiles()->add(summary.path);
}

void MainWindow::run() { m_run->run(); }
void MainWindow::pause() { m_run->pause(); }
void MainWindow::stepOnce() { m_run->stepOnce(); }
void MainWindow::stop() { m_run->stop(); }
void MainWindow::resetWeights() { m_run->resetWeights(); }

void MainWindow::editStepTimeLimit() {
  bool ok = false;
  const int seconds = QInputDialog::getInt(
      this, tr("Step time limit"),
      tr("A model runs in an engine process of its own. When one step takes longer than this, HookScope stops "
         "that process and says so; the captures stay.\n\nSeconds (0: no limit):"),
      m_sessions->stepTimeLimit(), 0, 7 * 24 * 3600, 10, &ok);
  if (!ok) return;
  QSettings().setValue(QStringLiteral("engine/stepTimeLimit"), seconds);
  m_sessions->setStepTimeLimit(seconds);
}

void MainWindow::editOpenTimeLimit() {
  bool ok = false;
  const int seconds = QInputDialog::getInt(
      this, tr("Open time limit"),
      tr("Opening a model starts an engine process, which imports PyTorch and loads the file: on a busy machine "
         "that alone can take a minute. When opening takes longer than this, HookScope stops that process and "
         "says so (a model whose loading code never ends).\n\nSeconds (0: no limit):"),
      m_sessions->openTimeLimit(), 0, 7 * 24 * 3600, 10, &ok);
  if (!ok) return;
  QSettings().setValue(QStringLiteral("engine/openTimeLimit"), seconds);
  m_sessions->setOpenTimeLimit(seconds);
}

void MainWindow::onStepFinished(const StepSummary& summary) {
  // In a job every rank reports each step: the rate counts the lowest rank still attached.
  if (summary.rank == m_attach->lowestLiveRank(summary.rank)) m_status->countStep();
  m_plots->setFinishedStep(view().settledStep);
  if (!summary.shapes.empty()) m_treePanel->showShapes(summary.shapes);
  if (!isRunning()) m_status->setBusy(false);
  m_alerts->addAlerts(summary.alerts);
  if (summary.breakAlert) {
    showBreak(*summary.breakAlert);
    return;
  }
  if (!summary.result.lossFinite) {
    m_status->say(view().opened().worldSize > 1 ? tr("Step %1: the loss of rank %2 is %3")
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
  m_plots->setFinishedStep(view().settledStep);
  m_alerts->addAlerts(summary.alerts);
  if (summary.breakAlert) {
    showBreak(*summary.breakAlert);
    return;
  }
  scheduleRedraw();
}

void MainWindow::showBreak(const hookscope::Alert& alert) {
  // Stopped on a breakpoint: show where, at that step (on the rank where it fired). The session
  // counts the run paused before it says where it broke (the menus follow that by themselves).
  if (summary().worldSize > 1) m_plots->setRank(alert.rank);
  m_plots->refresh();
  jumpTo(alert.step, QString::fromStdString(alert.module));
  m_plots->showKind(alert.kind);
  m_sideTabs->setCurrentWidget(m_alerts);
  m_alerts->highlight(alert);
  const QString where = summary().worldSize > 1 ? tr(" (rank %1; every rank waits at this step)").arg(alert.rank) : QString();
  m_status->say(tr("Paused at step %1 on %2%3: %4")
                               .arg(alert.step)
                               .arg(QString::fromLatin1(ruleName(alert.rule)), where, QString::fromStdString(alert.message)));
  m_breakShown = true;
  scheduleRedraw();
  Q_EMIT breakHit(QString::fromStdString(alert.module), alert.step);
}

void MainWindow::onViewChanged(const SessionView& now, const SessionView& before) {
  const RunState& state = now.state;
  const RunState& was = before.state;
  RunState counted = was;
  counted.stepsDone = state.stepsDone;
  if (counted == state && now.summary == before.summary) {  // one more step: drawn with the plots' next frame
    scheduleRedraw();
    return;
  }
  // An attached script reports its state after every step: the rate restarts only when a run
  // starts or resumes.
  const bool resumed = state.running() && !state.paused() && !(was.running() && !was.paused());
  if (!state.loading && was.loading) m_status->setBusy(false);
  if (!state.paused() && m_breakShown) {  // "Paused at step 7 on …" is over once the run goes on or stops
    statusBar()->clearMessage();
    m_breakShown = false;
  }
  if (!state.running() && m_stoppingShown) {
    m_status->say(tr("Stopped after step %1.").arg(state.stepsDone - 1), 5000);
    m_stoppingShown = false;
  }
  if (resumed) m_status->restartRate();
  updateStatus();
  scheduleRedraw();
}

void MainWindow::scheduleRedraw() {
  m_pacer->schedule();
}

void MainWindow::redraw() {
  m_plots->refresh();
  if (store()) m_treePanel->showValuesAt(*store(), m_plots->shownStep(), m_plots->shownRank());
  updateStatus();
}

const SessionView& MainWindow::view() const { return m_sessions->view(); }

void MainWindow::updateStatus() {
  StatusLine::State state;
  state.view = &view();
  state.listenAddress = m_attach->listeningAddress();
  m_status->show(state);
}

void MainWindow::showMessage(const QString& title, const QString& text) {
  m_lastMessage = text;
  m_status->say(text, 10000);
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
  if (!CheckpointCompare::chooseFiles(this, &a, &b)) return;
  auto* dialog = new CheckpointCompare(this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  auto* comparison = new CheckpointComparison(dialog);  // ends with the dialog
  connect(comparison, &CheckpointComparison::compared, dialog, &CheckpointCompare::showTable);
  connect(comparison, &CheckpointComparison::failed, dialog, &CheckpointCompare::showFailure);
  dialog->showReading(a, b);
  comparison->start(a, b);
  dialog->show();
  m_lastCompare = dialog;
}

void MainWindow::exportAllPlots() {
  const QString dir = QFileDialog::getExistingDirectory(this, tr("Export plots into folder"));
  if (dir.isEmpty()) return;
  const QStringList failed = m_plots->saveAll(dir);
  if (failed.isEmpty()) {
    m_status->say(tr("Plots exported to %1").arg(dir), 8000);
  } else {
    showMessage(tr("Export plots"), tr("Could not write %1 into %2: check that the folder is writable.").arg(failed.join(", "), dir));
  }
}

void MainWindow::quitAfterSignal() {
  m_signalled = true;
  close();
}

void MainWindow::closeEvent(QCloseEvent* event) {
  // A stop signal (a logout) quits whatever the export did: nothing waits for an answer.
  if (!m_signalled && !m_guard->confirm(tr("Quitting"), [this] { close(); })) {
    event->ignore();
    return;
  }
  m_run->rememberInputs();
  QSettings settings;
  settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
  settings.setValue(QStringLiteral("window/state"), saveState());
  settings.setValue(QStringLiteral("window/splitter"), m_splitter->saveState());
  m_sessions->invoke([](Session& s) { s.requestStop(); });
  event->accept();
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (event->mimeData()->hasUrls() && event->mimeData()->urls().size() == 1 && event->mimeData()->urls().front().isLocalFile()) {
    event->acceptProposedAction();
  }
}

void MainWindow::dropEvent(QDropEvent* event) {
  const QString path = event->mimeData()->urls().front().toLocalFile();
  if (isRunning()) {
    showMessage(tr("Cannot open"), tr("Stop the run before opening another model."));
    return;
  }
  openPath(path);
  event->acceptProposedAction();
}

bool MainWindow::redrawPending() const { return m_pacer->pending(); }
