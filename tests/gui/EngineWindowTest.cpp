// The window runs no model in its own process: a model file runs in an engine process
// (`hookscope-cli serve`). A crash of that process, a step that never ends, and a model that
// tries to write a file each end in a message, with the window and its captures intact.
#include "dialogs/CheckpointCompare.h"
#include "session/SessionHost.h"
#include "window/MainWindow.h"
#include "panels/AlertsPanel.h"
#include "panels/PlotsPanel.h"
#include "panels/RunControls.h"
#include "WindowTestSupport.h"
#include "models/ModuleTreeModel.h"
#include "plots/HistogramPlot.h"

#include <QHeaderView>
#include <QElapsedTimer>
#include <QFile>
#include <QSettings>
#include <QStandardPaths>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QComboBox>
#include <QSignalSpy>
#include <QAction>
#include <QStatusBar>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <signal.h>

#include <algorithm>
#include <cmath>

using namespace hookscope;
using hookscope::test::moduleIndex;
using hookscope::test::runSteps;

namespace {

const int kTimeout = hookscope::test::deadlineMs();

std::unique_ptr<MainWindow> openModel(const QString& path) {
  auto window = std::make_unique<MainWindow>();
  window->setInteractive(false);
  window->show();
  QSignalSpy opened(window.get(), &MainWindow::modelOpened);
  window->openPath(path);
  if (!opened.wait(kTimeout)) qWarning("model did not open: %s", qPrintable(window->lastMessage()));
  return window;
}

void tickRoot(MainWindow& window) {
  ModuleTreeModel* tree = window.treeModel();
  tree->setData(tree->index(0, ModuleTreeModel::Act), Qt::Checked, Qt::CheckStateRole);
}

} // namespace

class EngineWindowTest : public QObject {
  Q_OBJECT

private Q_SLOTS:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("HookScopeTest"));
    QSettings().clear();
  }

  void aCrashedEngineLeavesTheWindowItsCapturesAndAWayOn() {
    auto window = openModel(QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_cnn.pt"));
    QVERIFY2(window->sessions()->state().enginePid > 0, "the model runs in a process of its own");
    QVERIFY(window->sessions()->state().enginePid != QCoreApplication::applicationPid());
    tickRoot(*window);
    window->runControls()->setSteps(0);  // until stopped
    window->run();
    QTRY_VERIFY_WITH_TIMEOUT(window->stepsSeen() >= 3, kTimeout);
    QSignalSpy messages(window.get(), &MainWindow::messageShown);
    // What a bug inside LibTorch does to the process running it.
    ::kill(pid_t(window->sessions()->state().enginePid), SIGSEGV);
    QTRY_VERIFY_WITH_TIMEOUT(!messages.isEmpty(), kTimeout);
    const QString message = window->lastMessage();
    QVERIFY2(message.contains(QStringLiteral("SIGSEGV")) && message.contains(QStringLiteral("captures so far are kept")),
             qPrintable(message));
    QTRY_VERIFY_WITH_TIMEOUT(!window->isRunning(), kTimeout);
    const auto steps = window->store()->steps();
    QVERIFY(steps.size() >= 3);
    // The captures export.
    QTemporaryDir tmp;
    QSignalSpy exported(window.get(), &MainWindow::exportDone);
    window->exportCapturesTo(tmp.filePath(QStringLiteral("out")), false);
    QTRY_COMPARE_WITH_TIMEOUT(exported.size(), 1, kTimeout);
    QCOMPARE(exported.front().at(1).toString(), QString());
    QVERIFY(QFile::exists(tmp.filePath(QStringLiteral("out/stats.csv"))));
    // Run says what to do; Reset weights starts a new engine that runs.
    window->run();
    QTRY_VERIFY_WITH_TIMEOUT(window->lastMessage().contains(QStringLiteral("has stopped: open the model again")), kTimeout);
    QVERIFY(!window->isRunning());
    QSignalSpy opened(window.get(), &MainWindow::modelOpened);
    window->setDiscardAnswer(MainWindow::DiscardChoice::Discard);
    window->resetWeights();
    QTRY_COMPARE_WITH_TIMEOUT(opened.size(), 1, kTimeout);
    QVERIFY(window->sessions()->state().enginePid > 0);
    window->runControls()->setSteps(2);
    const qint64 seen = window->stepsSeen();
    window->run();
    QTRY_COMPARE_WITH_TIMEOUT(window->stepsSeen(), seen + 2, kTimeout);
    QTRY_VERIFY_WITH_TIMEOUT(!window->isRunning(), kTimeout);
  }

  void aStepOverTheTimeLimitStopsTheEngineAndTheWindowGoesOn() {
    auto window = openModel(QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/bad/forward_forever.pt"));
    QVERIFY(window->sessions()->state().enginePid > 0);
    window->sessions()->setStepTimeLimit(2);
    window->runControls()->setInputSpecs(QStringLiteral("2x4"));
    window->runControls()->setSteps(5);
    QSignalSpy messages(window.get(), &MainWindow::messageShown);
    QElapsedTimer clock;
    clock.start();
    window->run();
    QTRY_VERIFY_WITH_TIMEOUT(!messages.isEmpty(), kTimeout);
    QVERIFY2(window->lastMessage().contains(QStringLiteral("did not end within the step time limit of 2 s")),
             qPrintable(window->lastMessage()));
    // Not before the limit (how long after it depends on the machine's load: kTimeout bounds it).
    QVERIFY2(clock.elapsed() >= 2000, "stopped at the limit, not before");
    QTRY_VERIFY_WITH_TIMEOUT(!window->isRunning(), kTimeout);
    QCOMPARE(window->sessions()->state().stepsDone, 0);
  }

  void anOpenThatNeverEndsIsStoppedAtTheLimitOrByStop() {
    auto window = std::make_unique<MainWindow>();
    window->setInteractive(false);
    window->show();
    // The open's own limit, not the step's: a step limit of 1 s does not cut a slow start short.
    window->sessions()->setStepTimeLimit(1);
    window->sessions()->setOpenTimeLimit(2);
    QSignalSpy messages(window.get(), &MainWindow::messageShown);
    const QString path = QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/bad/setstate_forever.pt");
    window->sessions()->openModel(path, true);
    QTRY_VERIFY_WITH_TIMEOUT(!messages.isEmpty(), kTimeout);
    QVERIFY2(window->lastMessage().contains(QStringLiteral("did not open within 2 s (Run > Open time limit)")),
             qPrintable(window->lastMessage()));
    // No limit: Stop cancels the open.
    window->sessions()->setOpenTimeLimit(0);
    messages.clear();
    window->sessions()->openModel(path, true);
    QTRY_VERIFY_WITH_TIMEOUT(window->statusBar()->currentMessage().contains(QStringLiteral("Stop (Shift+F5) cancels")),
                             kTimeout);
    QTest::qWait(1000);
    QVERIFY(messages.isEmpty());
    window->stop();
    QTRY_VERIFY_WITH_TIMEOUT(!messages.isEmpty(), kTimeout);
    QVERIFY2(window->lastMessage().contains(QStringLiteral("cancelled")), qPrintable(window->lastMessage()));
    QVERIFY(window->modelPath().isEmpty());
  }

  void stopTwiceEndsAStepThatNeverEnds() {
    auto window = openModel(QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/bad/forward_forever.pt"));
    window->sessions()->setStepTimeLimit(0);  // no limit: only the user can end it
    window->runControls()->setInputSpecs(QStringLiteral("2x4"));
    window->runControls()->setSteps(0);
    window->run();
    QTRY_VERIFY_WITH_TIMEOUT(window->isRunning(), kTimeout);
    QTest::qWait(300);
    window->stop();
    QTRY_VERIFY_WITH_TIMEOUT(window->statusBar()->currentMessage().contains(QStringLiteral("Stop again")), kTimeout);
    QTest::qWait(500);
    QVERIFY2(window->isRunning(), "the step goes on: the first Stop waits for it");
    QSignalSpy messages(window.get(), &MainWindow::messageShown);
    window->stop();
    QTRY_VERIFY_WITH_TIMEOUT(!messages.isEmpty(), kTimeout);
    QVERIFY2(window->lastMessage().contains(QStringLiteral("Stop was pressed twice")), qPrintable(window->lastMessage()));
    QTRY_VERIFY_WITH_TIMEOUT(!window->isRunning(), kTimeout);
  }

  void aModelWithOperatorsOfAChosenLibraryOpensAndRuns() {
    auto window = std::make_unique<MainWindow>();
    window->setInteractive(false);
    window->show();
    const QStringList libraries{QStringLiteral(HOOKSCOPE_TEST_OPS)};
    window->sessions()->setOperatorLibraries(libraries);
    QSignalSpy opened(window.get(), &MainWindow::modelOpened);
    window->openPath(QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/custom_op.pt"));
    QVERIFY2(opened.wait(kTimeout), qPrintable(window->lastMessage()));  // no "untrusted" question
    tickRoot(*window);
    window->runControls()->setInputSpecs(QStringLiteral("3x4"));
    window->runControls()->setSteps(2);
    window->run();
    QTRY_COMPARE_WITH_TIMEOUT(window->stepsSeen(), 2, kTimeout);
    QTRY_VERIFY_WITH_TIMEOUT(!window->isRunning(), kTimeout);
    QVERIFY(!window->store()->seriesKeys().empty());
  }

  void anExportedProgramOpensWithItsTreeAndExampleInputsAndRuns() {
    // A torch.export .pt2 runs in HookScope's Python engine: the window meets it as any model.
    auto window = openModel(QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/twice_inplace_exported.pt2"));
    QCOMPARE(window->modelPath(), QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/twice_inplace_exported.pt2"));
    ModuleTreeModel* tree = window->treeModel();
    const int shared = moduleIndex(tree, "shared");
    QVERIFY(shared >= 0);
    // The eager class, not torch.export's InterpreterModule.
    QCOMPARE(tree->data(tree->indexOfModule(shared).siblingAtColumn(ModuleTreeModel::Type)).toString(), QStringLiteral("Linear"));
    QCOMPARE(window->runControls()->inputSpecs(), QStringLiteral("6x8"));  // the program's example input
    tree->setData(tree->indexOfModule(shared).siblingAtColumn(ModuleTreeModel::Act), Qt::Checked, Qt::CheckStateRole);
    tree->setData(tree->indexOfModule(shared).siblingAtColumn(ModuleTreeModel::Grad), Qt::Checked, Qt::CheckStateRole);
    runSteps(*window, 2, kTimeout);
    const auto store = window->store();
    for (const int call : {0, 1}) {
      for (const auto kind : {CaptureKind::Activation, CaptureKind::Gradient}) {
        QCOMPARE(store->series(SeriesKey{"shared", call, kind, 0}).size(), std::size_t(2));
      }
    }
    QCOMPARE(store->scalars("loss").size(), std::size_t(2));
  }

  void anExportedProgramInTheWindowGivesTheEagerModelsNumbers() {
    // The same run as test_engine.py's, through the window: 3 SGD steps on the mean of the
    // output, every module hooked; each activation and gradient equals PyTorch's hooks on the
    // eager original (the fixture's .steps.json).
    auto window = openModel(QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/twice_inplace_exported.pt2"));
    ModuleTreeModel* tree = window->treeModel();
    for (int column : {ModuleTreeModel::Act, ModuleTreeModel::Grad}) {
      tree->setData(tree->index(0, column), Qt::Checked, Qt::CheckStateRole);  // the root ticks every module
    }
    RunConfig config;
    config.dataFile = HOOKSCOPE_FIXTURES_DIR "/twice_inplace_exported.data.pt";
    config.loss = LossKind::Mean;
    config.lr = 0.05;
    window->runControls()->setConfig(config);
    runSteps(*window, 3, kTimeout);
    QFile golden(QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/twice_inplace_exported.steps.json"));
    QVERIFY(golden.open(QIODevice::ReadOnly));
    const QJsonArray reference = QJsonDocument::fromJson(golden.readAll()).array();
    QVERIFY(reference.size() >= 30);
    const auto store = window->store();
    for (const auto& item : reference) {
      const QJsonObject ref = item.toObject();
      const SeriesKey key{ref["module"].toString().toStdString(), ref["call"].toInt(),
                          ref["kind"].toString() == QStringLiteral("gradient") ? CaptureKind::Gradient
                                                                               : CaptureKind::Activation,
                          ref["index"].toInt()};
      SeriesPoint point;
      QVERIFY2(store->pointAt(key, ref["step"].toInt(), &point) && point.step == ref["step"].toInt(),
               qPrintable(QString::fromStdString(key.module)));
      const double l2 = ref["l2"].toDouble(), mean = ref["mean"].toDouble();
      const double rms = l2 / std::sqrt(std::max(1.0, ref["numel"].toDouble()));
      QVERIFY2(std::abs(point.stats.l2norm - l2) <= 1e-5 * l2 + 1e-12, qPrintable(QString::fromStdString(key.module)));
      QVERIFY2(std::abs(point.stats.mean - mean) <= 1e-5 * std::max(std::abs(mean), rms) + 1e-12,
               qPrintable(QString::fromStdString(key.module)));
    }
  }

  void anUntrustedPickleIsAskedAboutWithTheClassesItNames() {
    auto window = openModel(QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_cnn.pt"));
    QTemporaryDir tmp;
    const QString pickle = tmp.filePath(QStringLiteral("whole.pt"));
    QProcess save;
    save.start(QStringLiteral(HOOKSCOPE_PYTHON),
               {QStringLiteral("-c"), QStringLiteral("import torch; torch.save(torch.nn.Sequential(torch.nn.Linear(3, 2)), '%1')").arg(pickle)});
    QVERIFY(save.waitForFinished(60000) && save.exitCode() == 0);
    QSignalSpy messages(window.get(), &MainWindow::messageShown);
    window->openPath(pickle);
    QTRY_VERIFY_WITH_TIMEOUT(!messages.isEmpty(), kTimeout);
    const QString text = window->lastMessage();
    QVERIFY2(text.contains(QStringLiteral("torch.nn.modules.container.Sequential")), qPrintable(text));
    QCOMPARE(window->modelPath(), QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_cnn.pt"));
    // Trusted ("Open anyway"): it opens, confined, and runs.
    QSignalSpy opened(window.get(), &MainWindow::modelOpened);
    window->sessions()->openModel(pickle, true);
    QVERIFY2(opened.wait(kTimeout), qPrintable(window->lastMessage()));
    QCOMPARE(window->treeModel()->data(window->treeModel()->indexOfModule(1).siblingAtColumn(ModuleTreeModel::Type)).toString(),
             QStringLiteral("Linear"));
  }

  void aCheckpointOpensReadOnlyWithEveryTensorsStatistics() {
    QTemporaryDir tmp;
    const QString checkpoint = tmp.filePath(QStringLiteral("weights.pth"));
    QProcess save;
    save.start(QStringLiteral(HOOKSCOPE_PYTHON),
               {QStringLiteral("-c"),
                QStringLiteral("import torch; torch.manual_seed(0); m = torch.nn.Sequential(torch.nn.Linear(6, 5), "
                               "torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 3)); sd = m.state_dict(); "
                               "sd['2.bias'][1] = float('nan'); sd['0.weight'][0, 0] = float('inf'); "
                               "torch.save(sd, '%1')").arg(checkpoint)});
    QVERIFY(save.waitForFinished(60000) && save.exitCode() == 0);
    auto window = openModel(checkpoint);
    QVERIFY2(window->reviewOnly(), qPrintable(window->lastMessage()));
    QCOMPARE(window->modelPath(), checkpoint);
    // The status bar says it is open, no longer that it is opening and Stop cancels.
    QCOMPARE(window->statusBar()->currentMessage(), QStringLiteral("Opened weights.pth (checkpoint, read-only)"));
    ModuleTreeModel* tree = window->treeModel();
    QVERIFY(moduleIndex(tree, "0") >= 0 && moduleIndex(tree, "2") >= 0);
    const auto store = window->store();
    SeriesPoint point;
    QVERIFY(store->pointAt(SeriesKey{"0.weight", 0, CaptureKind::Param, 0}, 0, &point));
    QCOMPARE(point.stats.numel, std::int64_t(30));
    QCOMPARE(point.stats.histogram.size(), std::size_t(64));
    QVERIFY(store->pointAt(SeriesKey{"2.bias", 0, CaptureKind::Param, 0}, 0, &point));
    QCOMPARE(point.stats.nanCount, std::int64_t(1));
    QCOMPARE(tree->data(tree->indexOfModule(0)).toString(), QStringLiteral("weights.pth"));  // the root: its file
    // The root holds no tensor of its own: said as such, not as a module whose hooks never fired.
    window->selectModule(QString());
    QTRY_VERIFY_WITH_TIMEOUT(window->plots()->histogram()->statsText().contains(QStringLiteral("no parameters")), kTimeout);
    QVERIFY2(!window->plots()->histogram()->statsText().contains(QStringLiteral("not called")),
             qPrintable(window->plots()->histogram()->statsText()));
    // BatchNorm's running statistics are buffers: its parameters are its weight and bias (10).
    const QModelIndex norm = tree->indexOfModule(moduleIndex(tree, "1"));
    QCOMPARE(tree->data(norm.siblingAtColumn(ModuleTreeModel::Params)).toString(), QStringLiteral("10"));
    // The Alerts tab names each tensor that holds NaN or Inf.
    QCOMPARE(window->alerts()->count(), 2);
    // Selecting a layer marked red shows the tensor that holds the NaN, its label whole.
    window->selectModule(QStringLiteral("2"));
    QCOMPARE(QString::fromStdString(window->plots()->selectedSeries().module), QStringLiteral("2.bias"));
    QComboBox* series = nullptr;
    for (QComboBox* box : window->plots()->findChildren<QComboBox*>()) {
      if (box->toolTip().startsWith(QStringLiteral("Which captured tensor"))) series = box;
    }
    QVERIFY(series);
    QCOMPARE(series->currentText(), QStringLiteral("param bias"));
    QVERIFY(series->minimumContentsLength() >= QStringLiteral("param weight").size());
    // Nothing to run: Run does nothing, and the weights stay as read.
    window->run();
    QTest::qWait(300);
    QVERIFY(!window->isRunning());
    QCOMPARE(store->latestStep(), std::int64_t(0));
  }

  void comparingTwoCheckpointsPutsWhatWentNanFirstThenTheLargestChange() {
    QTemporaryDir tmp;
    const QString before = tmp.filePath(QStringLiteral("before.pt")), after = tmp.filePath(QStringLiteral("after.pt"));
    QProcess save;
    save.start(QStringLiteral(HOOKSCOPE_PYTHON),
               {QStringLiteral("-c"),
                QStringLiteral("import torch; torch.manual_seed(0); m = torch.nn.Sequential(torch.nn.Linear(6, 5), "
                               "torch.nn.ReLU(), torch.nn.Linear(5, 3)); sd = m.state_dict(); torch.save(sd, '%1'); "
                               "sd = {k: v.clone() for k, v in sd.items()}; sd['2.weight'] += 0.05; "
                               "sd['0.bias'] += 1e-4; sd['2.bias'][0] = float('nan'); torch.save(sd, '%2')")
                    .arg(before, after)});
    QVERIFY(save.waitForFinished(60000) && save.exitCode() == 0);
    MainWindow window;
    window.setInteractive(false);
    window.compareCheckpoints(before, after);
    CheckpointCompare* dialog = window.lastCompare();
    QVERIFY(dialog);
    QSignalSpy finished(dialog, &CheckpointCompare::finished);
    QVERIFY2(finished.wait(kTimeout), qPrintable(dialog->summary()));
    QTableWidget* table = dialog->table();
    QCOMPARE(table->rowCount(), 4);
    QStringList order;
    for (int row = 0; row < 4; ++row) order << table->item(row, 0)->text();
    QCOMPARE(order, (QStringList{QStringLiteral("2.bias"), QStringLiteral("2.weight"), QStringLiteral("0.bias"),
                                 QStringLiteral("0.weight")}));
    // NaN and Inf per file, in columns of their own: the NaN is the second file's.
    QCOMPARE(table->horizontalHeaderItem(4)->text(), QStringLiteral("NaN 1st"));
    QCOMPARE(table->horizontalHeaderItem(7)->text(), QStringLiteral("Inf 2nd"));
    QStringList counts;
    for (int c = 4; c < 8; ++c) counts << table->item(0, c)->text();
    QCOMPARE(counts, (QStringList{QStringLiteral("0"), QStringLiteral("0"), QStringLiteral("1"), QStringLiteral("0")}));
    QCOMPARE(table->item(3, 1)->text(), QStringLiteral("unchanged"));
    QVERIFY2(dialog->summary().contains(QStringLiteral("3 changed, 1 unchanged, NaN or Inf in 1")), qPrintable(dialog->summary()));
    // Every column's header reads whole at the dialog's own size (none cut to "Na…").
    dialog->show();
    QVERIFY(QTest::qWaitForWindowExposed(dialog));
    for (int c = 1; c < table->columnCount(); ++c) {
      const QString header = table->horizontalHeaderItem(c)->text();
      QVERIFY2(table->columnWidth(c) >= table->horizontalHeader()->fontMetrics().horizontalAdvance(header),
               qPrintable(header));
    }
    QVERIFY2(table->columnWidth(0) >= 200, qPrintable(QString::number(table->columnWidth(0))));  // the names
    if (const QString folder = qEnvironmentVariable("HOOKSCOPE_SCREENSHOTS"); !folder.isEmpty()) {
      dialog->grab().save(folder + QStringLiteral("/compare-checkpoints.png"));
    }
  }

  void anUntrustedModelIsAskedAboutWithTheEnginesFindings() {
    // The window links no LibTorch: the engine process checks the model's code, ends with its
    // findings, and the window asks (here, not interactive, it says so) and keeps what was open.
    auto window = openModel(QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_cnn.pt"));
    QSignalSpy messages(window.get(), &MainWindow::messageShown);
    window->openPath(QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/bad/setstate_from_file.pt"));
    QTRY_VERIFY_WITH_TIMEOUT(!messages.isEmpty(), kTimeout);
    const QString text = window->lastMessage();
    QVERIFY2(text.startsWith(QStringLiteral("setstate_from_file.pt holds code that runs when it is opened")), qPrintable(text));
    QVERIFY2(text.contains(QStringLiteral("torch.from_file")) && text.contains(QStringLiteral("__setstate__")), qPrintable(text));
    QVERIFY2(!text.contains(QStringLiteral("run again with --trust")), qPrintable(text));  // the CLI's advice is not the window's
    QCOMPARE(window->modelPath(), QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_cnn.pt"));
    // Nothing is opening while the user decides: File > Open model… is there again.
    QAction* open = nullptr;
    for (QAction* action : window->findChildren<QAction*>()) {
      if (action->text().remove('&') == QStringLiteral("Open model…")) open = action;
    }
    QVERIFY(open);
    QVERIFY(open->isEnabled());
  }

  void aTrustedModelThatWritesAFileRunsConfinedAndCannot() {
    const QString victim = QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/bad/victim.bin");
    {
      QFile file(victim);
      QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
      file.write(QByteArray(16, 'A'));
    }
    auto window = openModel(QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_cnn.pt"));
    QSignalSpy messages(window.get(), &MainWindow::messageShown);
    // The user said "Open anyway".
    const QString path = QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/bad/setstate_from_file.pt");
    window->sessions()->openModel(path, true);
    QTRY_VERIFY_WITH_TIMEOUT(!messages.isEmpty(), kTimeout);
    QVERIFY2(window->lastMessage().contains(QStringLiteral("Permission denied")), qPrintable(window->lastMessage()));
    QCOMPARE(window->modelPath(), QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_cnn.pt"));  // still open
    QFile file(victim);
    QVERIFY(file.open(QIODevice::ReadOnly));
    QCOMPARE(file.readAll(), QByteArray(16, 'A'));
  }
};

QTEST_MAIN(EngineWindowTest)
#include "EngineWindowTest.moc"
