#include "MainWindow.h"

#include "AlertsPanel.h"
#include "AttachDialog.h"
#include "ExportTarget.h"
#include "EngineAdapter.h"
#include "GradNormDelegate.h"
#include "OperatorLibrariesDialog.h"
#include "PlotsPanel.h"
#include "RunControls.h"
#include "models/ModuleTreeModel.h"
#include "plots/PlotPage.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QSplitter>
#include <QTabWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QDialog>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QInputDialog>
#include <QKeyEvent>
#include <QAbstractSpinBox>
#include <QPlainTextEdit>
#include <QTextEdit>
#include <QCheckBox>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QScreen>
#include <QPushButton>
#include <QSettings>
#include <QSortFilterProxyModel>
#include <QStatusBar>
#include <QTimer>
#include <QToolBar>
#include <QToolButton>
#include <QTreeView>
#include <QVBoxLayout>

using namespace hookscope;

namespace {
constexpr int kRedrawMs = 33;  // at most about 30 redraws per second
constexpr int kMaxRecent = 8;
// Settings: the folder of the last export, and the remembered answer to "discard captures?".
const char* const kLastExportKey = "paths/lastExport";
const char* const kDiscardAnswerKey = "prompts/unexportedCaptures";

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
  buildLayout();
  buildActions();
  m_attachDialog = new AttachDialog(this);
  connect(m_attachDialog, &AttachDialog::cancelled, this, [this] {
    m_listenAddress.clear();
    QMetaObject::invokeMethod(m_engine, [engine = m_engine] { engine->stopListening(); });
    statusBar()->showMessage(tr("Stopped waiting for a training script"), 5000);
  });

  m_redrawTimer = new QTimer(this);
  m_redrawTimer->setSingleShot(true);
  m_redrawTimer->setInterval(kRedrawMs);
  connect(m_redrawTimer, &QTimer::timeout, this, &MainWindow::redraw);

  m_modelLabel = new QLabel(tr("no model"), this);
  m_stepLabel = new QLabel(this);
  m_rateLabel = new QLabel(this);
  m_memoryLabel = new QLabel(this);
  m_busy = new QProgressBar(this);
  m_busy->setRange(0, 0);
  m_busy->setMaximumWidth(120);
  m_busy->setVisible(false);
  m_busy->setToolTip(tr("The engine is running steps"));
  statusBar()->addWidget(m_modelLabel, 1);
  statusBar()->addPermanentWidget(m_busy);
  statusBar()->addPermanentWidget(m_stepLabel);
  statusBar()->addPermanentWidget(m_rateLabel);
  statusBar()->addPermanentWidget(m_memoryLabel);

  connect(m_engine, &EngineAdapter::modelLoaded, this, &MainWindow::onModelLoaded);
  connect(m_engine, &EngineAdapter::modelLoading, this, [this](const QString& path) {
    m_loading = true;
    m_busy->setVisible(true);
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
  connect(m_engine, &EngineAdapter::trustNeeded, this, [this](const QString& path, const QString& findings) {
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
  });
  connect(m_engine, &EngineAdapter::libraryFailed, this, [this](const QString& message) {
    showMessage(tr("Operator library not loaded"), message);
  });
  connect(m_engine, &EngineAdapter::stepFinished, this, &MainWindow::onStepFinished);
  connect(m_engine, &EngineAdapter::jobStepSettled, this, &MainWindow::onJobStepSettled);
  connect(m_engine, &EngineAdapter::rankAttached, this, [this](int rank, const QString& who) {
    m_ranksAttached.insert(rank);
    m_ranksEnded.remove(rank);
    m_plots->setRankNote(rank, QString());
    statusBar()->showMessage(tr("Rank %1 of %2 attached: %3").arg(rank).arg(m_summary.worldSize).arg(who), 8000);
    updateStatus();
  });
  connect(m_engine, &EngineAdapter::rankEnded, this, [this](int rank, const QString& why) {
    m_ranksEnded.insert(rank, why);
    m_plots->setRankNote(rank, why.contains(QStringLiteral("without closing")) ? tr("lost") : tr("left"));
    // A rank that dies mid-run is news; the last ones leaving are said by scriptDetached.
    if (m_ranksEnded.size() < m_ranksAttached.size()) {
      statusBar()->showMessage(tr("Rank %1 left: %2. The other ranks are still recorded.").arg(rank).arg(why), 15000);
    }
    updateStatus();
    scheduleRedraw();
  });
  connect(m_engine, &EngineAdapter::runStateChanged, this, &MainWindow::onRunState);
  connect(m_engine, &EngineAdapter::failed, this, [this](const QString& message) {
    updateStatus();
    showMessage(tr("Step failed"), message);
  });
  connect(m_engine, &EngineAdapter::exportFinished, this, [this](const QString& dir, const QString& error) {
    auto then = std::move(m_afterExport);
    m_afterExport = nullptr;
    if (error.isEmpty()) {
      m_exportedVersion = m_exportingVersion;
      m_exportedStore = m_summary.store.get();
      QSettings().setValue(kLastExportKey, QFileInfo(dir).absolutePath());
      statusBar()->showMessage(tr("Exported captures to %1").arg(dir), 8000);
    } else {
      showMessage(tr("Export failed"), error);
    }
    Q_EMIT exportDone(dir, error);
    if (error.isEmpty() && then) then();  // what waited for the export: reset, open, quit
  });
  connect(m_engine, &EngineAdapter::listening, this, [this](const QString& address) {
    m_listenAddress = address;
    m_attachDialog->setAddress(address);
    if (m_interactive) {
      m_attachDialog->show();
      m_attachDialog->raise();
    }
    statusBar()->showMessage(tr("Waiting for a training script: run it with HOOKSCOPE_ADDRESS=%1").arg(address));
    Q_EMIT listening(address);
  });
  connect(m_engine, &EngineAdapter::listenFailed, this, [this](const QString& message) {
    showMessage(tr("Cannot attach"), message);
  });
  connect(m_engine, &EngineAdapter::attachRefused, this, [this](const QString& message) {
    m_lastRefusal = message;
    statusBar()->showMessage(tr("Refused a connection: %1").arg(message), 10000);
  });
  connect(m_engine, &EngineAdapter::scriptDetached, this, [this](const QString& reason) {
    m_listenAddress.clear();
    updateActions();
    updateStatus();
    showMessage(tr("Script detached"), tr("%1. Its captures stay: File > Export captures (Ctrl+E) keeps them.").arg(reason));
    Q_EMIT scriptDetached(reason);
  });
  connect(m_tree, &ModuleTreeModel::hooksChanged, this, [this](const QVector<QPair<int, quint8>>& changes) {
    for (const auto& [module, mask] : changes) m_engine->setHooks(module, mask);
    const int selected = m_tree->moduleAt(m_filter->mapToSource(m_treeView->currentIndex()));
    if (selected >= 0) m_plots->setSelectedHooks(m_tree->hooks(selected));
  });
  connect(m_controls, &RunControls::memoryCapChanged, this, [this](qint64 bytes) {
    QMetaObject::invokeMethod(m_engine, [engine = m_engine, bytes] { engine->setMemoryCap(bytes); });
    scheduleRedraw();
  });
  connect(m_plots, &PlotsPanel::moduleClicked, this, &MainWindow::selectModule);
  connect(m_plots, &PlotsPanel::shownChanged, this, &MainWindow::scheduleRedraw);

  QSettings settings;
  m_engine->setStepTimeLimit(settings.value(QStringLiteral("engine/stepTimeLimit"), 120).toInt());
  // Before any model is opened: the engine takes queued calls in order.
  const QStringList libraries = settings.value(QStringLiteral("engine/operatorLibraries")).toStringList();
  if (!libraries.isEmpty()) {
    QMetaObject::invokeMethod(m_engine, [engine = m_engine, libraries] { engine->loadOperatorLibraries(libraries); });
  }
  restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
  restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
  if (!settings.contains(QStringLiteral("window/geometry"))) {
    // 1400x900, or the whole screen when it is smaller (a 1024x700 laptop screen).
    const QRect screenArea = screen() ? screen()->availableGeometry() : QRect(0, 0, 1400, 900);
    resize(std::min(1400, screenArea.width()), std::min(900, screenArea.height()));
    m_splitter->setSizes({width() * 2 / 5, width() * 3 / 5});
  }
  m_splitter->restoreState(settings.value(QStringLiteral("window/splitter")).toByteArray());
  rebuildRecentMenu();
  updateActions();
  updateStatus();
}

MainWindow::~MainWindow() {
  m_engine->requestStop();
  m_engineThread.quit();
  m_engineThread.wait();
}

void MainWindow::buildLayout() {
  auto* treePanel = new QWidget(this);
  auto* layout = new QVBoxLayout(treePanel);
  layout->setContentsMargins(4, 4, 4, 4);
  auto* filterRow = new QHBoxLayout();
  m_filterEdit = new QLineEdit(treePanel);
  m_filterEdit->setPlaceholderText(tr("Filter by name or type"));
  m_filterEdit->setClearButtonEnabled(true);
  auto* hookType = new QToolButton(treePanel);
  hookType->setText(tr("Hook all of type…"));
  connect(hookType, &QToolButton::clicked, this, &MainWindow::hookAllOfType);
  filterRow->addWidget(m_filterEdit, 1);
  filterRow->addWidget(hookType);
  m_filter = new QSortFilterProxyModel(this);
  m_filter->setSourceModel(m_tree);
  m_filter->setRecursiveFilteringEnabled(true);
  m_filter->setFilterCaseSensitivity(Qt::CaseInsensitive);
  m_filter->setFilterKeyColumn(-1);
  connect(m_filterEdit, &QLineEdit::textChanged, this, [this](const QString& text) {
    m_filter->setFilterFixedString(text);
    m_treeView->expandAll();
  });
  m_treeView = new QTreeView(treePanel);
  m_treeView->setModel(m_filter);
  m_treeView->setUniformRowHeights(true);
  m_treeView->setAlternatingRowColors(true);
  m_treeView->setItemDelegateForColumn(ModuleTreeModel::GradNorm, new GradNormDelegate(m_treeView));
  m_treeView->header()->setStretchLastSection(false);
  m_treeView->header()->setSectionResizeMode(ModuleTreeModel::Name, QHeaderView::Interactive);
  m_treeView->setColumnWidth(ModuleTreeModel::Name, 130);
  m_treeView->setColumnWidth(ModuleTreeModel::Type, 90);
  m_treeView->setColumnWidth(ModuleTreeModel::OutputShape, 90);
  m_treeView->setColumnWidth(ModuleTreeModel::Params, 56);
  for (int c : {ModuleTreeModel::Act, ModuleTreeModel::Grad, ModuleTreeModel::In}) m_treeView->setColumnWidth(c, 38);
  m_treeView->setColumnWidth(ModuleTreeModel::GradNorm, 64);
  // The tick boxes and the gradient norm next to the name, so they show at any width; type,
  // shape and parameter count after them.
  QHeaderView* header = m_treeView->header();
  int visual = 1;
  for (int c : {ModuleTreeModel::Act, ModuleTreeModel::Grad, ModuleTreeModel::In, ModuleTreeModel::GradNorm, ModuleTreeModel::Params}) {
    header->moveSection(header->visualIndex(c), visual++);
  }
  m_treeView->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(m_treeView, &QWidget::customContextMenuRequested, this, &MainWindow::showTreeMenu);
  connect(m_treeView->selectionModel(), &QItemSelectionModel::currentChanged, this, [this](const QModelIndex& current) {
    const QModelIndex source = m_filter->mapToSource(current);
    const int module = m_tree->moduleAt(source);
    if (module >= 0) {
      m_plots->setSelectedHooks(m_tree->hooks(module));
      m_plots->setSelectedModule(m_tree->modules()[std::size_t(module)].path);
    }
  });
  layout->addLayout(filterRow);
  layout->addWidget(m_treeView, 1);
  // Splitters rather than docks: their sizes can be set, so the tree's columns all show.
  m_alerts = new AlertsPanel(this);
  connect(m_alerts, &AlertsPanel::alertActivated, this, [this](qint64 step, const QString& module, int rank) {
    if (m_summary.worldSize > 1) m_plots->setRank(rank);
    jumpTo(step, module);
  });
  m_sideTabs = new QTabWidget(this);
  m_sideTabs->addTab(m_controls, tr("Run"));
  m_sideTabs->addTab(m_alerts, tr("Alerts"));
  auto* left = new QSplitter(Qt::Vertical, this);
  left->addWidget(treePanel);
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
                                                      tr("TorchScript models (*.pt *.pth *.ptl *.zip);;All files (*)"));
    if (!path.isEmpty()) openPath(path);
  });
  m_openAction->setShortcut(QKeySequence::Open);
  file->addAction(tr("Open &capture…"), this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open HookScope export folder"),
                                                          QSettings().value(kLastExportKey).toString());
    if (!dir.isEmpty()) openCapture(dir);
  })->setShortcut(QKeySequence(tr("Ctrl+Shift+O")));
  m_recentMenu = file->addMenu(tr("Open &recent"));
  m_attachAction = file->addAction(tr("&Attach to a training script…"), this, [this] { attachScript(); });
  m_attachAction->setShortcut(QKeySequence(tr("Ctrl+Shift+A")));
  m_attachAction->setToolTip(tr("Wait for a PyTorch script that calls hookscope.attach(model) (Ctrl+Shift+A)"));
  file->addSeparator();
  m_exportAction = file->addAction(tr("&Export captures…"), this, &MainWindow::exportCaptures);
  m_exportAction->setShortcut(QKeySequence(tr("Ctrl+E")));
  file->addAction(tr("Export &plots (PNG, PDF, CSV)…"), this, &MainWindow::exportAllPlots);
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
  m_askDiscardAction = settingsMenu->addAction(tr("&Ask before discarding captures"));
  m_askDiscardAction->setCheckable(true);
  m_askDiscardAction->setChecked(!QSettings().contains(kDiscardAnswerKey));
  m_askDiscardAction->setToolTip(tr("Ask Export / Discard / Cancel before a reset, an open or quitting drops captures not exported"));
  connect(m_askDiscardAction, &QAction::toggled, this, [](bool ask) {
    if (ask) QSettings().remove(kDiscardAnswerKey);
    else if (!QSettings().contains(kDiscardAnswerKey))
      QSettings().setValue(kDiscardAnswerKey, QStringLiteral("discard"));
  });

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
  // Window-wide shortcuts win over a widget's own bindings (a line edit takes Ctrl+E as "end
  // of line", a tree view takes [ for its keyboard search). In text fields, plain keys stay
  // text and editing keys.
  for (QAction* action : menuBar()->findChildren<QAction*>()) {
    for (const QKeySequence& key : action->shortcuts()) {
      if (key.count() != 1) continue;
      const QKeyCombination combo = key[0];
      const bool functionKey = combo.key() >= Qt::Key_F1 && combo.key() <= Qt::Key_F35;
      const bool chord = functionKey || (combo.keyboardModifiers() & (Qt::ControlModifier | Qt::AltModifier));
      (chord ? m_windowShortcuts : m_plainShortcuts).insert(combo.toCombined());
    }
  }
  qApp->installEventFilter(this);
}

bool MainWindow::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::ShortcutOverride) {
    const int combo = static_cast<QKeyEvent*>(event)->keyCombination().toCombined();
    auto* widget = qobject_cast<QWidget*>(watched);
    const bool textField = qobject_cast<QLineEdit*>(widget) || qobject_cast<QAbstractSpinBox*>(widget) ||
                           qobject_cast<QTextEdit*>(widget) || qobject_cast<QPlainTextEdit*>(widget);
    // Not delivered to the widget and left unaccepted: the shortcut map runs the action.
    if (widget && widget->window() == this &&
        (m_windowShortcuts.contains(combo) || (!textField && m_plainShortcuts.contains(combo)))) {
      return true;
    }
  }
  return QMainWindow::eventFilter(watched, event);
}

void MainWindow::openPath(const QString& path) {
  if (QFileInfo(path).isDir() && QFileInfo::exists(path + QStringLiteral("/manifest.json"))) {
    openCapture(path);
    return;
  }
  if (!confirmDiscard(tr("Opening %1").arg(QFileInfo(path).fileName()), [this, path] { openPath(path); })) return;
  rememberInputs();
  if (!m_listenAddress.isEmpty()) {  // a file chosen instead of a script: stop waiting for one
    m_listenAddress.clear();
    m_attachDialog->hide();
    QMetaObject::invokeMethod(m_engine, [engine = m_engine] { engine->stopListening(); });
  }
  m_pendingOpen = path;
  QMetaObject::invokeMethod(m_engine, [engine = m_engine, path] { engine->loadModel(path); });
}

void MainWindow::attachScript(const QString& address) {
  if (scriptAttached()) {
    showMessage(tr("Attach"), tr("%1 is attached: Stop (Shift+F5) detaches it first.").arg(m_summary.fileName));
    return;
  }
  if (!confirmDiscard(tr("Attaching a script"), [this, address] { attachScript(address); })) return;
  QMetaObject::invokeMethod(m_engine, [engine = m_engine, address] { engine->listen(address); });
}

void MainWindow::openCapture(const QString& dir) {
  if (!confirmDiscard(tr("Opening %1").arg(QFileInfo(dir).fileName()), [this, dir] { openCapture(dir); })) return;
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
  if (m_summary.reviewOnly) return;
  m_engine->setGradientIntervention(module, intervention);
  m_interventions[module].first = intervention;
  markInterventions(module);
}

void MainWindow::setOutputIntervention(int module, OutputIntervention intervention) {
  if (m_summary.reviewOnly || module <= 0) return;
  m_engine->setOutputIntervention(module, intervention);
  m_interventions[module].second = intervention;
  markInterventions(module);
}

void MainWindow::markInterventions(int module) {
  const auto& [gradient, output] = m_interventions[module];
  m_tree->setIntervention(module, QString::fromStdString(gradient.describe()), QString::fromStdString(output.describe()));
}

void MainWindow::markRecordedInterventions(const std::vector<InterventionRecord>& records) {
  std::map<int, std::pair<QStringList, QStringList>> marks;  // module -> gradient, output
  for (const auto& r : records) {
    const int module = m_tree->moduleOf(r.module);
    if (module < 0) continue;
    const QString text = QStringLiteral("%1 (steps %2–%3)").arg(QString::fromStdString(r.action)).arg(r.fromStep).arg(r.toStep);
    (r.target == "output" ? marks[module].second : marks[module].first) << text;
  }
  for (const auto& [module, texts] : marks) {
    m_tree->setIntervention(module, texts.first.join(QStringLiteral("; ")), texts.second.join(QStringLiteral("; ")));
  }
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
  QDialog dialog(this);
  dialog.setWindowTitle(tr("Rule thresholds"));
  auto* form = new QFormLayout(&dialog);
  std::vector<std::pair<RuleKind, QLineEdit*>> edits;
  for (int i = 1; i < kRuleCount; ++i) {  // non_finite has none
    const auto rule = RuleKind(i);
    auto* edit = new QLineEdit(QString::number(ruleThreshold(m_ruleSettings, rule), 'g', 6), &dialog);
    edit->setToolTip(QString::fromLatin1(ruleThresholdMeaning(rule)));
    form->addRow(QStringLiteral("%1 (%2)").arg(QString::fromLatin1(ruleName(rule)), QString::fromLatin1(ruleThresholdMeaning(rule))), edit);
    edits.emplace_back(rule, edit);
  }
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
  form->addRow(buttons);
  connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
  connect(buttons, &QDialogButtonBox::accepted, &dialog, [&] {
    RuleSettings settings = m_ruleSettings;
    for (const auto& [rule, edit] : edits) {
      bool ok = false;
      const double value = edit->text().toDouble(&ok);
      std::string error;
      if (!ok || !setRuleThreshold(settings, rule, value, &error)) {
        QMessageBox::warning(&dialog, tr("Rule thresholds"),
                             ok ? QString::fromStdString(error) : tr("%1 is not a number.").arg(edit->text()));
        edit->setFocus();
        return;
      }
    }
    m_ruleSettings = settings;
    QMetaObject::invokeMethod(m_engine, [engine = m_engine, settings] { engine->setRuleSettings(settings); });
    dialog.accept();
  });
  dialog.exec();
}

void MainWindow::showTreeMenu(const QPoint& at) {
  const int module = m_tree->moduleAt(m_filter->mapToSource(m_treeView->indexAt(at)));
  if (module < 0 || m_summary.reviewOnly) return;
  QMenu menu(this);
  menu.addSection(tr("Gradient through this output"));
  menu.addAction(tr("Clamp to [-v, v]…"), this, [this, module] {
    bool ok = false;
    const double v = QInputDialog::getDouble(this, tr("Clamp gradient"),
                                             tr("Clamp each element of the gradient through this output to [-v, v].\nv ="),
                                             1.0, 1e-12, 1e12, 6, &ok);
    if (ok) setGradientIntervention(module, {GradientIntervention::Clamp, v});
  });
  menu.addAction(tr("Scale by…"), this, [this, module] {
    bool ok = false;
    const double f = QInputDialog::getDouble(this, tr("Scale gradient"),
                                             tr("Multiply the gradient through this output by\nfactor ="), 0.5, -1e12, 1e12, 6, &ok);
    if (ok) setGradientIntervention(module, {GradientIntervention::Scale, f});
  });
  menu.addAction(tr("Zero it"), this, [this, module] { setGradientIntervention(module, {GradientIntervention::Zero, 0}); });
  menu.addAction(tr("Leave it"), this, [this, module] { setGradientIntervention(module, {}); })
      ->setEnabled(m_interventions[module].first.kind != GradientIntervention::None);
  if (module > 0) {
    menu.addSection(tr("Output of this module"));
    menu.addAction(tr("Zero it (ablate)"), this, [this, module] { setOutputIntervention(module, {OutputIntervention::Zero}); });
    menu.addAction(tr("Replace with its mean"), this, [this, module] { setOutputIntervention(module, {OutputIntervention::Mean}); });
    menu.addAction(tr("Leave it"), this, [this, module] { setOutputIntervention(module, {}); })
        ->setEnabled(m_interventions[module].second.kind != OutputIntervention::None);
  }
  menu.exec(m_treeView->viewport()->mapToGlobal(at));
}

void MainWindow::selectModule(const QString& path) {
  const int module = m_tree->moduleOf(path.toStdString());
  if (module < 0) return;
  m_treeView->setCurrentIndex(m_filter->mapFromSource(m_tree->indexOfModule(module)));
  m_treeView->scrollTo(m_treeView->currentIndex());
}

void MainWindow::jumpTo(qint64 step, const QString& module) {
  selectModule(module);
  m_plots->scrubTo(step);
}

void MainWindow::onModelLoaded(const ModelSummary& summary) {
  m_summary = summary;
  m_loading = false;
  m_engineStopped = false;
  m_exportedStore = nullptr;
  m_alerts->clear();
  m_alerts->setRanksShown(summary.worldSize > 1);
  m_interventions.clear();  // a loaded (or reloaded) model starts without interventions
  m_pendingOpen.clear();
  m_stepsSeen = 0;
  m_lastStep = -1;
  m_stepsPerSecond = 0;
  m_ranksAttached.clear();
  m_ranksEnded.clear();
  m_tree->setModules(summary.modules, summary.hooks, summary.reviewOnly);
  m_alerts->addAlerts(summary.alerts);
  markRecordedInterventions(summary.interventions);
  m_treeView->expandToDepth(1);
  m_plots->setStore(summary.store);
  m_treeView->setCurrentIndex(m_filter->mapFromSource(m_tree->indexOfModule(0)));
  if (summary.attached) {
    m_running = true;  // an attached script is running from the start (runStateChanged follows)
    m_paused = false;
    m_rateClock.restart();
    m_rateSteps = 0;
    m_attachDialog->hide();
    m_listenAddress.clear();
    m_controls->setEditable(false);
    m_controls->setNote(
        summary.worldSize > 1
            ? tr("<b>%1 is attached</b> with the ranks of its torch.distributed job (%2 ranks): their own data, loss "
                 "and optimizer are used, not these. Pause, Step and breakpoints act on every rank at the same step.")
                  .arg(summary.fileName.toHtmlEscaped())
                  .arg(summary.worldSize)
            : tr("<b>%1 is attached</b>: its own data, loss and optimizer are used, not these.")
                  .arg(summary.fileName.toHtmlEscaped()));
    statusBar()->showMessage(tr("Attached: %1. Tick Act/Grad/In to hook layers from the script's next step.").arg(summary.script), 10000);
  } else if (!summary.reviewOnly) {
    statusBar()->showMessage(summary.confinement.isEmpty()
                                 ? tr("Opened %1 in an engine process").arg(summary.fileName)
                                 : tr("Opened %1 in an engine process: %2").arg(summary.fileName, summary.confinement),
                             8000);
    QSettings settings;
    const QString remembered = settings.value(settingsKeyFor(summary.path)).toString();
    m_controls->setInputSpecs(!remembered.isEmpty() ? remembered : summary.exampleInput);
    addRecent(summary.path);
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
  if (m_running && m_paused) {
    m_engine->setPaused(false);
    return;
  }
  if (m_running || m_summary.attached) return;
  const RunConfig config = currentConfig();
  if (!checkInputsGiven(config)) return;
  const qint64 steps = m_controls->steps();
  m_rateClock.restart();
  m_rateSteps = 0;
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
  m_busy->setVisible(true);  // a single step of a large model can take a while
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
  if (!confirmDiscard(tr("Resetting the weights"), [this] { resetWeights(); })) return;
  QMetaObject::invokeMethod(m_engine, [engine = m_engine] { engine->resetWeights(); });
}

void MainWindow::onStepFinished(const StepSummary& summary) {
  ++m_stepsSeen;
  // In a job every rank reports each step: the rate counts the lowest rank still attached.
  int lowest = summary.rank;
  for (int rank : m_ranksAttached) {
    if (!m_ranksEnded.contains(rank)) lowest = std::min(lowest, rank);
  }
  if (summary.rank == lowest) ++m_rateSteps;
  m_lastStep = std::max<qint64>(m_lastStep, summary.finishedStep);
  m_plots->setFinishedStep(m_lastStep);
  if (m_rateClock.isValid() && m_rateClock.elapsed() > 0) {
    m_stepsPerSecond = 1000.0 * double(m_rateSteps) / double(m_rateClock.elapsed());
  }
  if (!summary.shapes.empty()) {
    std::vector<std::pair<std::string, QString>> shapes;
    for (const auto& call : summary.shapes) {
      if (call.call != 0) continue;
      shapes.emplace_back(call.module, QString::fromStdString(call.shapes.empty() ? std::string("—") : call.shapes.front()) +
                                           (call.shapes.size() > 1 ? QStringLiteral(" …") : QString()));
    }
    m_tree->setOutputShapes(shapes);
  }
  if (!m_running) m_busy->setVisible(false);
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
  // Stopped on a breakpoint: show where, at that step (on the rank where it fired).
  if (m_summary.worldSize > 1) m_plots->setRank(alert.rank);
  m_plots->refresh();
  jumpTo(alert.step, QString::fromStdString(alert.module));
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
  if (resumed) {
    m_rateClock.restart();
    m_rateSteps = 0;
  }
  updateActions();
  updateStatus();
  scheduleRedraw();
}

void MainWindow::scheduleRedraw() {
  if (!m_redrawTimer->isActive()) m_redrawTimer->start();
}

void MainWindow::redraw() {
  m_plots->refresh();
  // Latest gradient norm and NaN/Inf marks per module, at the step being shown.
  const auto& modules = m_tree->modules();
  if (m_summary.store && !modules.empty()) {
    std::map<std::string, int> byPath;
    for (std::size_t m = 0; m < modules.size(); ++m) byPath[modules[m].path] = int(m);
    std::vector<double> norms(modules.size(), std::nan(""));
    std::vector<bool> nonFinite(modules.size(), false);
    const std::int64_t step = m_plots->shownStep();
    const int shownRank = m_plots->shownRank();
    for (const auto& key : m_summary.store->seriesKeys()) {
      const auto found = byPath.find(ownerModule(key));
      if (found == byPath.end()) continue;
      SeriesPoint point;
      if (!m_summary.store->pointAt(key, step, &point) || point.step != step) continue;
      if (point.stats.hasNonFinite()) nonFinite[std::size_t(found->second)] = true;
      // The tree shows the chosen rank's norm; a NaN on any rank of a job marks the module.
      if (key.kind == CaptureKind::Gradient && key.call == 0 && key.index == 0 && key.rank == shownRank) {
        norms[std::size_t(found->second)] = point.stats.l2norm;
      }
    }
    m_tree->setLiveValues(norms, nonFinite);
  }
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
  m_openAction->setEnabled(!m_running && !m_loading);
  m_attachAction->setEnabled(!m_running);
}

void MainWindow::updateStatus() {
  m_modelLabel->setToolTip(QString());
  if (m_summary.attached && m_summary.worldSize > 1) {
    const int live = int(m_ranksAttached.size() - m_ranksEnded.size());
    QString ranks = tr("%1 of %2 ranks attached").arg(live).arg(m_summary.worldSize);
    for (auto it = m_ranksEnded.constBegin(); it != m_ranksEnded.constEnd(); ++it) {
      ranks += tr(", rank %1 %2").arg(it.key()).arg(it.value().contains(QStringLiteral("without closing")) ? tr("lost") : tr("left"));
    }
    m_modelLabel->setText(m_running ? tr("Job %1 of %2: %3").arg(m_summary.job, m_summary.fileName, ranks)
                                    : tr("Job %1 of %2 — detached").arg(m_summary.job, m_summary.fileName));
    m_modelLabel->setToolTip(m_summary.script);
  } else if (m_summary.attached) {
    m_modelLabel->setText(m_running ? tr("Attached: %1").arg(m_summary.script) : tr("%1 — detached").arg(m_summary.script));
  } else if (!m_listenAddress.isEmpty() && m_summary.path.isEmpty()) {
    m_modelLabel->setText(tr("Waiting for a training script at %1").arg(m_listenAddress));
  } else {
    m_modelLabel->setText(m_summary.path.isEmpty() ? tr("No model: File > Open (Ctrl+O) or Attach (Ctrl+Shift+A)")
                                                   : m_summary.fileName + (m_summary.reviewOnly ? tr(" — read-only review")
                                                                           : m_engineStopped ? tr(" — engine stopped")
                                                                                             : QString()));
    if (m_summary.engineProcess) {
      m_modelLabel->setToolTip(m_summary.confinement.isEmpty()
                                   ? tr("Runs in an engine process of its own, not confined")
                                   : tr("Runs in an engine process of its own: %1").arg(m_summary.confinement));
    }
  }
  m_stepLabel->setText(m_lastStep < 0 ? tr("step —") : tr("step %1").arg(m_lastStep));
  m_rateLabel->setText(m_running && !m_paused ? tr("%1 steps/s").arg(m_stepsPerSecond, 0, 'f', 1)
                                              : (m_paused ? tr("paused") : tr("idle")));
  m_busy->setVisible(m_running && !m_paused);
  if (m_summary.store) {
    const double used = double(m_summary.store->bytesUsed()) / (1 << 20);
    const double cap = double(m_summary.store->capBytes()) / (1 << 20);
    QString text = cap < 1e9 ? tr("captures %1 / %2 MiB").arg(used, 0, 'f', 1).arg(cap, 0, 'f', 0)
                             : tr("captures %1 MiB").arg(used, 0, 'f', 1);
    if (!m_summary.store->thinning().empty()) text += tr(" (thinned ×%1)").arg(m_summary.store->stride());
    m_memoryLabel->setText(text);
  } else {
    m_memoryLabel->clear();
  }
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

void MainWindow::hookAllOfType() {
  const QStringList types = m_tree->typeNames();
  if (types.isEmpty()) return;
  bool ok = false;
  const QString type = QInputDialog::getItem(this, tr("Hook all of type"), tr("Hook activations and gradients of every"),
                                             types, 0, false, &ok);
  if (!ok) return;
  m_tree->setHookForType(type, CaptureKind::Activation, true);
  m_tree->setHookForType(type, CaptureKind::Gradient, true);
}

bool MainWindow::exportCaptures() {
  const QString folder = QSettings().value(kLastExportKey, QDir::homePath()).toString();
  const QString dir = QFileDialog::getSaveFileName(this, tr("Export captures to a new folder"),
                                                   QDir(folder).filePath(QFileInfo(m_summary.fileName).completeBaseName() + QStringLiteral("-capture")));
  if (dir.isEmpty()) return false;
  bool overwrite = false;
  QDir target(dir);
  if (target.exists() && !target.isEmpty()) {
    // Only an earlier HookScope export may be replaced; any other folder keeps its files.
    if (!hookscope::isHookScopeExport(dir.toStdString())) {
      showMessage(tr("Export"), QString::fromStdString(hookscope::checkExportTarget(dir.toStdString(), true)));
      return false;
    }
    if (!m_interactive) {
      showMessage(tr("Export"), tr("%1 already holds a HookScope export.").arg(dir));
      return false;
    }
    overwrite = QMessageBox::question(this, tr("Replace export?"),
                                      tr("%1 already holds a HookScope export. Replace it with this one?").arg(dir)) ==
                QMessageBox::Yes;
    if (!overwrite) return false;
  }
  exportCapturesTo(dir, overwrite);
  return true;
}

void MainWindow::setDiscardAnswer(DiscardChoice choice, const QString& exportDir) {
  m_discardAnswer = choice;
  m_discardExportDir = exportDir;
}

bool MainWindow::hasUnexportedCaptures() const {
  const auto& store = m_summary.store;
  if (!store || m_summary.reviewOnly || store->latestStep() < 0) return false;
  return !(m_exportedStore == store.get() && m_exportedVersion == store->version());
}

bool MainWindow::confirmDiscard(const QString& what, std::function<void()> then) {
  if (m_afterExport) {  // an export asked for by an earlier answer is still being written
    statusBar()->showMessage(tr("Writing the export first: %1 waits for it.").arg(what), 5000);
    return false;
  }
  if (!hasUnexportedCaptures()) return true;
  ++m_discardQuestions;
  DiscardChoice choice = m_discardAnswer;
  const QString remembered = QSettings().value(kDiscardAnswerKey).toString();
  if (remembered == QLatin1String("discard")) {
    choice = DiscardChoice::Discard;
  } else if (remembered == QLatin1String("export")) {
    choice = DiscardChoice::Export;
  } else if (m_interactive) {
    QMessageBox box(QMessageBox::Question, tr("Captures not exported"),
                    tr("%1 discards %2 captured steps that were not exported.").arg(what).arg(m_summary.store->latestStep() + 1),
                    QMessageBox::NoButton, this);
    box.setInformativeText(tr("Export them first, discard them, or cancel?"));
    QPushButton* exportButton = box.addButton(tr("&Export…"), QMessageBox::AcceptRole);
    QPushButton* discardButton = box.addButton(tr("&Discard"), QMessageBox::DestructiveRole);
    box.addButton(QMessageBox::Cancel);
    box.setDefaultButton(exportButton);
    auto* dontAsk = new QCheckBox(tr("Don't ask again (Settings > Ask before discarding captures)"), &box);
    box.setCheckBox(dontAsk);
    box.exec();
    choice = box.clickedButton() == exportButton    ? DiscardChoice::Export
             : box.clickedButton() == discardButton ? DiscardChoice::Discard
                                                    : DiscardChoice::Cancel;
    if (dontAsk->isChecked() && choice != DiscardChoice::Cancel) {
      QSettings().setValue(kDiscardAnswerKey, choice == DiscardChoice::Export ? QStringLiteral("export") : QStringLiteral("discard"));
      if (m_askDiscardAction) m_askDiscardAction->setChecked(false);
    }
  }
  if (choice == DiscardChoice::Discard) return true;
  if (choice != DiscardChoice::Export) return false;
  m_afterExport = std::move(then);
  const bool started = m_interactive ? exportCaptures() : (exportCapturesTo(m_discardExportDir, false), true);
  if (!started) m_afterExport = nullptr;
  return false;
}

void MainWindow::exportCapturesTo(const QString& dir, bool overwrite, const QString& interrupted) {
  statusBar()->showMessage(tr("Exporting captures to %1…").arg(dir));
  m_exportingVersion = m_summary.store ? m_summary.store->version() : 0;
  QMetaObject::invokeMethod(m_engine, [engine = m_engine, dir, overwrite, interrupted] {
    engine->exportCaptures(dir, overwrite, interrupted);
  });
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

void MainWindow::addRecent(const QString& path) {
  QSettings settings;
  QStringList recent = settings.value(QStringLiteral("recentFiles")).toStringList();
  const QString absolute = QFileInfo(path).absoluteFilePath();
  recent.removeAll(absolute);
  recent.prepend(absolute);
  while (recent.size() > kMaxRecent) recent.removeLast();
  settings.setValue(QStringLiteral("recentFiles"), recent);
  rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
  if (!m_recentMenu) return;
  m_recentMenu->clear();
  const QStringList recent = QSettings().value(QStringLiteral("recentFiles")).toStringList();
  for (const QString& path : recent) {
    m_recentMenu->addAction(QFileInfo(path).fileName() + QStringLiteral("  —  ") + QFileInfo(path).absolutePath(), this,
                            [this, path] { openPath(path); });
  }
  m_recentMenu->setEnabled(!recent.isEmpty());
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (!confirmDiscard(tr("Quitting"), [this] { close(); })) {
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
