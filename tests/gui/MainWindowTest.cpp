// The window, driven as a user would: open, tick, run, scrub, untick, export, reopen.
#include "panels/AlertsPanel.h"
#include "panels/ModuleTreePanel.h"
#include "session/SessionHost.h"
#include "window/MainWindow.h"
#include "files/ExportFolder.h"
#include "store/CaptureStore.h"
#include "window/DiscardGuard.h"
#include "window/RunComparer.h"
#include "window/TensorBoardExport.h"
#include "panels/PlotsPanel.h"
#include "panels/RunControls.h"
#include "WindowTestSupport.h"
#include "models/ModuleTreeModel.h"
#include "plots/GradNormPlot.h"
#include "plots/HeatmapPlot.h"
#include "plots/HistogramPlot.h"
#include "plots/LossPlot.h"
#include "plots/QCustomPlotInclude.h"

#include <QAbstractItemModelTester>
#include <QAction>
#include <QApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineEdit>
#include <QScrollBar>
#include <QTabBar>
#include <QSet>
#include <QMenuBar>
#include <QLabel>
#include <QStatusBar>
#include <QTimer>
#include <QComboBox>
#include <QProcess>
#include <QSettings>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>
#include <QTreeView>

#include <functional>
#include <limits>

using hookscope::CaptureKind;
using hookscope::CaptureStore;
using namespace hookscope::test;

namespace {

const int kTimeout = hookscope::test::deadlineMs();

int countModules(const QAbstractItemModel& model, const QModelIndex& parent = {}) {
  int count = 0;
  for (int row = 0; row < model.rowCount(parent); ++row) {
    ++count;
    count += countModules(model, model.index(row, 0, parent));
  }
  return count;
}

// Ticks a checkbox the way the view does: setData with Qt::CheckStateRole.
void tick(ModuleTreeModel* tree, const std::string& path, int column, bool on) {
  const QModelIndex index = tree->indexOfModule(moduleIndex(tree, path), column);
  QVERIFY(index.isValid());
  QVERIFY(tree->setData(index, on ? Qt::Checked : Qt::Unchecked, Qt::CheckStateRole));
}

void select(MainWindow& window, const std::string& path) {
  auto* proxy = qobject_cast<QSortFilterProxyModel*>(window.treeView()->model());
  window.treeView()->setCurrentIndex(proxy->mapFromSource(window.treeModel()->indexOfModule(moduleIndex(window.treeModel(), path))));
}

/// Writes `text` to `path`, as an export written by hand (a format HookScope wrote, or writes).
void writeFile(const QString& path, const QByteArray& text) {
  QFile file(path);
  QVERIFY(file.open(QIODevice::WriteOnly));
  QCOMPARE(file.write(text), qint64(text.size()));
}

} // namespace

class MainWindowTest : public QObject {
  Q_OBJECT

private:
  std::unique_ptr<MainWindow> openSample(const QString& model = QStringLiteral(HOOKSCOPE_SAMPLE_MODEL)) {
    return openWindow(model, kTimeout);
  }

  void runAndWait(MainWindow& window, int steps) { runSteps(window, steps, kTimeout); }

private Q_SLOTS:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("HookScopeTest"));
    QSettings().clear();  // remembered inputs and answers of an earlier run
  }

  // The plots read only new steps from the store each frame: through thinning (which drops old
  // steps, and the newest off-grid step each time a new one arrives) they must still show
  // exactly what the store holds.
  void plotsFollowTheStoreThroughThinning() {
    auto store = std::make_shared<CaptureStore>();
    hookscope::TensorStats stats;
    stats.shape = {8, 4};
    stats.dtype = "float32";
    stats.numel = 32;
    stats.histogram.assign(64, 1);
    stats.histLow = -1;
    stats.histHigh = 1;
    const std::size_t perStep = 2 * CaptureStore::pointBytes(stats);
    store->setCapBytes(perStep * 40);  // thins once 40 steps are held
    PlotsPanel panel;
    panel.resize(900, 600);
    panel.setStore(store);
    panel.setSelectedModule("conv1");
    const hookscope::SeriesKey gradient{"conv1", 0, CaptureKind::Gradient, 0};
    const hookscope::SeriesKey activation{"conv1", 0, CaptureKind::Activation, 0};
    for (int step = 0; step < 200; ++step) {
      stats.l2norm = 1.0 + step;
      store->add(step, gradient, stats);
      store->add(step, activation, stats);
      panel.refresh();
      const auto norms = store->values(gradient, &hookscope::TensorStats::l2norm);
      QCOMPARE(panel.gradNorms()->pointCount("conv1"), int(norms.size()));
      QCOMPARE(panel.heatmap()->columnCount(), int(norms.size()));
    }
    QVERIFY(store->thinning().size() >= 2);
    QString expected = QStringLiteral("series,step,l2norm\n");
    for (const auto& p : store->values(gradient, &hookscope::TensorStats::l2norm)) {
      expected += QStringLiteral("\"conv1\",%1,%2\n").arg(p.step).arg(p.value, 0, 'g', 17);
    }
    QCOMPARE(panel.gradNorms()->toCsv(), expected);
  }

  void theSeriesChooserListsALayersOwnSeriesThenItsParameters() {
    auto store = std::make_shared<CaptureStore>();
    hookscope::TensorStats stats;
    stats.shape = {4};
    stats.numel = 4;
    stats.histogram.assign(64, 1);
    for (const hookscope::SeriesKey& key : std::vector<hookscope::SeriesKey>{
             {"fc1", 0, CaptureKind::Activation, 0},
             {"fc1", 0, CaptureKind::Gradient, 0},
             {"fc1.weight", 0, CaptureKind::Param, 0},
             {"fc1.weight", 0, CaptureKind::ParamGrad, 0},
             {"fc1.sub", 0, CaptureKind::Activation, 0},        // a child's output
             {"fc1.sub.weight", 0, CaptureKind::Param, 0},      // a child's parameter
             {"fc2", 0, CaptureKind::Activation, 0},
             {"scale", 0, CaptureKind::Param, 0}}) {            // the root's parameter
      store->add(0, key, stats);
    }
    PlotsPanel panel;
    panel.setStore(store);
    auto* chooser = panel.findChild<QComboBox*>();
    QVERIFY(chooser);
    auto items = [&] {
      QStringList texts;
      for (int i = 0; i < chooser->count(); ++i) texts << chooser->itemText(i);
      return texts;
    };
    panel.setSelectedModule("fc1");
    QCOMPARE(items(), (QStringList{"activation", "gradient", "param weight", "param_grad weight"}));
    panel.setSelectedModule("");
    QCOMPARE(items(), (QStringList{"param scale"}));
  }

  void loadingFillsTheTreeAndPassesTheModelTester() {
    auto window = openSample();
    QCOMPARE(window->modelPath(), QStringLiteral(HOOKSCOPE_SAMPLE_MODEL));
    ModuleTreeModel* tree = window->treeModel();
    QAbstractItemModelTester tester(tree, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(countModules(*tree), 11);
    QCOMPARE(tree->data(tree->indexOfModule(0, ModuleTreeModel::Name)).toString(), QStringLiteral("SmallCNN"));
    QCOMPARE(tree->data(tree->indexOfModule(moduleIndex(tree, "conv2"), ModuleTreeModel::Type)).toString(), QStringLiteral("Conv2d"));
    QCOMPARE(window->runControls()->inputSpecs(), QStringLiteral("8x1x28x28"));  // from the model file
    // Tri-state: the root's box checks the subtree; one child off makes it partial.
    tick(tree, "", ModuleTreeModel::Act, true);
    for (std::size_t m = 0; m < tree->modules().size(); ++m) QVERIFY(tree->hooks(int(m)) & hookscope::kindBit(CaptureKind::Activation));
    tick(tree, "relu1", ModuleTreeModel::Act, false);
    QCOMPARE(tree->data(tree->indexOfModule(0, ModuleTreeModel::Act), Qt::CheckStateRole).toInt(), int(Qt::PartiallyChecked));
    tree->setHookForType(QStringLiteral("Linear"), CaptureKind::Gradient, true);
    QVERIFY(tree->hooks(moduleIndex(tree, "fc1")) & hookscope::kindBit(CaptureKind::Gradient));
    QVERIFY(tree->hooks(moduleIndex(tree, "fc2")) & hookscope::kindBit(CaptureKind::Gradient));
    QVERIFY(!(tree->hooks(moduleIndex(tree, "conv1")) & hookscope::kindBit(CaptureKind::Gradient)));
    // A run fills the output-shape column, still under the tester's eye.
    runAndWait(*window, 1);
    QCOMPARE(tree->data(tree->indexOfModule(moduleIndex(tree, "conv2"), ModuleTreeModel::OutputShape)).toString(),
             QStringLiteral("8x16x14x14"));
  }

  void deepTreePassesTheModelTester() {
    auto window = openSample(QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/resnet18_scripted.pt"));
    QAbstractItemModelTester tester(window->treeModel(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(countModules(*window->treeModel()), int(window->treeModel()->modules().size()));
    QVERIFY(countModules(*window->treeModel()) > 60);
    // The filter keeps matching rows and their ancestors.
    auto* proxy = qobject_cast<QSortFilterProxyModel*>(window->treeView()->model());
    proxy->setFilterFixedString(QStringLiteral("downsample"));
    QVERIFY(countModules(*proxy) >= 4);
    QVERIFY(countModules(*proxy) < 20);
    // A dotted path, or a fragment of one, as the status bar, the alerts and the CLI name
    // layers: "layer3.1.conv2" and "3.1.conv" found nothing before (names alone were matched).
    for (const QString text : {QStringLiteral("layer3.1.conv2"), QStringLiteral("3.1.conv2")}) {
      proxy->setFilterFixedString(text);
      QStringList shown;
      std::function<void(const QModelIndex&)> walk = [&](const QModelIndex& parent) {
        for (int r = 0; r < proxy->rowCount(parent); ++r) {
          const QModelIndex child = proxy->index(r, 0, parent);
          shown << child.data(ModuleTreeModel::PathRole).toString();
          walk(child);
        }
      };
      walk(QModelIndex());
      QVERIFY2(shown.contains(QStringLiteral("layer3.1.conv2")), qPrintable(text + ": " + shown.join(QLatin1Char(' '))));
      QVERIFY2(shown.contains(QStringLiteral("layer3.1")) && shown.contains(QStringLiteral("layer3")),
               qPrintable(shown.join(QLatin1Char(' '))));  // in context: its ancestors
      QVERIFY2(!shown.contains(QStringLiteral("layer3.0.conv2")) && !shown.contains(QStringLiteral("layer2")),
               qPrintable(shown.join(QLatin1Char(' '))));
    }
    proxy->setFilterFixedString(QString());
  }

  void tickedLayersGetPlotsUntouchedLayersNone() {
    auto window = openSample();
    ModuleTreeModel* tree = window->treeModel();
    for (const char* path : {"conv1", "fc1"}) {
      tick(tree, path, ModuleTreeModel::Act, true);
      tick(tree, path, ModuleTreeModel::Grad, true);
    }
    runAndWait(*window, 3);
    PlotsPanel* plots = window->plots();
    QCOMPARE(plots->gradNorms()->lineCount(), 2);
    QCOMPARE(plots->gradNorms()->pointCount("conv1"), 3);
    QCOMPARE(plots->gradNorms()->pointCount("fc1"), 3);
    QCOMPARE(plots->loss()->pointCount(), 3);
    select(*window, "conv1");
    QTRY_COMPARE_WITH_TIMEOUT(plots->histogram()->barCount(), 64, kTimeout);
    QCOMPARE(plots->heatmap()->columnCount(), 3);
    QVERIFY(plots->histogram()->statsText().contains(QStringLiteral("min")));
    select(*window, "conv2");
    QTRY_COMPARE_WITH_TIMEOUT(plots->histogram()->barCount(), 0, kTimeout);
    QCOMPARE(plots->heatmap()->columnCount(), 0);
    QCOMPARE(plots->gradNorms()->pointCount("conv2"), 0);
    // The gradient-norm column and the status bar follow the run.
    QVERIFY(!tree->data(tree->indexOfModule(moduleIndex(tree, "fc1"), ModuleTreeModel::GradNorm)).toString().isEmpty());
    QVERIFY(tree->data(tree->indexOfModule(moduleIndex(tree, "conv2"), ModuleTreeModel::GradNorm)).toString().isEmpty());
    // Scrubbing back shows an earlier step everywhere; following returns to the latest.
    select(*window, "fc1");
    plots->scrubTo(0);
    QCOMPARE(plots->shownStep(), qint64(0));
    QVERIFY(plots->histogram()->statsText().contains(QStringLiteral("step 0")));
    plots->setFollowLatest(true);
    QCOMPARE(plots->shownStep(), qint64(2));
  }

  void untickingDuringARunStopsCapturesFromTheNextStep() {
    auto window = openSample();
    ModuleTreeModel* tree = window->treeModel();
    tick(tree, "fc1", ModuleTreeModel::Act, true);
    tick(tree, "fc2", ModuleTreeModel::Act, true);
    window->runControls()->setSteps(0);  // until stopped
    window->run();
    QTRY_VERIFY_WITH_TIMEOUT(window->stepsSeen() >= 3, kTimeout);
    // The change reaches the engine process within a step or two on an idle machine, later on a
    // busy one: wait for the event itself (fc1's captures ending while fc2's go on), not a count.
    const qint64 seen = window->stepsSeen();
    tick(tree, "fc1", ModuleTreeModel::Act, false);
    const auto store = window->store();
    const hookscope::SeriesKey fc1Key{"fc1", 0, CaptureKind::Activation, 0};
    const hookscope::SeriesKey fc2Key{"fc2", 0, CaptureKind::Activation, 0};
    QTRY_VERIFY_WITH_TIMEOUT(window->stepsSeen() >= seen + 3 && !store->series(fc1Key).empty() &&
                                 !store->series(fc2Key).empty() &&
                                 store->series(fc2Key).back().step >= store->series(fc1Key).back().step + 3,
                             kTimeout);
    window->stop();
    QTRY_VERIFY_WITH_TIMEOUT(!window->isRunning(), kTimeout);
    // "Stopping after the step in progress… Stop again ends it now" is not left behind an idle run.
    QVERIFY2(!window->statusBar()->currentMessage().contains(QStringLiteral("Stopping")),
             qPrintable(window->statusBar()->currentMessage()));
    const auto fc1 = store->series(fc1Key);
    const auto fc2 = store->series(fc2Key);
    // fc1 was captured at every step until the change took effect, and at none after it.
    QCOMPARE(qint64(fc1.size()), fc1.back().step + 1);
    QVERIFY2(fc1.back().step >= seen - 1, qPrintable(QStringLiteral("fc1 stopped at step %1 before it was unticked "
                                                                    "after %2 steps").arg(fc1.back().step).arg(seen)));
    QCOMPARE(qint64(fc2.size()), window->stepsSeen());
    QVERIFY(fc2.back().step >= seen + 2);
  }

  void anArmedRulePausesTheRunAtTheStepWhereItFired() {
    auto window = openSample(QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_mlp.pt"));
    ModuleTreeModel* tree = window->treeModel();
    tick(tree, "", ModuleTreeModel::Act, true);
    tick(tree, "", ModuleTreeModel::Grad, true);
    hookscope::RunConfig config;
    config.dataFile = HOOKSCOPE_FIXTURES_DIR "/teacher.data.pt";
    config.batchSize = 32;
    config.loss = hookscope::LossKind::CrossEntropy;
    config.lr = 50;  // far too large: the gradients explode
    window->runControls()->setConfig(config);
    window->runControls()->setSteps(0);
    window->setBreakOn(hookscope::RuleKind::ExplodingGradient, true);
    QSignalSpy hit(window.get(), &MainWindow::breakHit);
    window->run();
    QTRY_COMPARE_WITH_TIMEOUT(hit.size(), 1, kTimeout);
    const qint64 step = hit.front().at(1).toLongLong();
    QTest::qWait(300);  // a run that had not paused would go on meanwhile
    QVERIFY(window->isRunning());
    QVERIFY(window->sessions()->state().paused());
    QCOMPARE(window->sessions()->state().stepsDone, step + 1);
    QCOMPARE(window->plots()->shownStep(), step);
    QCOMPARE(QString::fromStdString(window->plots()->selectedModule()), hit.front().at(0).toString());
    QVERIFY(window->alerts()->count() >= 1);
    // One way on: Resume; Pause does not turn into a second "Unpause".
    QAction* runAction = findAction(*window, QStringLiteral("Resume"));
    QVERIFY(runAction && runAction->isEnabled());
    QVERIFY(!findAction(*window, QStringLiteral("Unpause")));
    QVERIFY(!findAction(*window, QStringLiteral("Pause"))->isEnabled());
    QVERIFY(window->statusBar()->currentMessage().contains(QStringLiteral("Paused at step")));
    // Step runs one step and the view follows to it.
    window->stepOnce();
    QTRY_COMPARE_WITH_TIMEOUT(window->sessions()->state().stepsDone, step + 2, kTimeout);
    QTRY_COMPARE_WITH_TIMEOUT(window->plots()->shownStep(), step + 1, kTimeout);
    window->stop();
    QTRY_VERIFY_WITH_TIMEOUT(!window->isRunning(), kTimeout);
    QCOMPARE(window->sessions()->state().stepsDone, step + 2);
    QVERIFY2(!window->statusBar()->currentMessage().contains(QStringLiteral("Paused")), qPrintable(window->statusBar()->currentMessage()));
  }

  void reopenedExportShowsItsAlertsAndInterventions() {
    QTemporaryDir tmp;
    auto window = openSample(QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_mlp.pt"));
    tick(window->treeModel(), "", ModuleTreeModel::Grad, true);
    hookscope::RunConfig config;
    config.dataFile = HOOKSCOPE_FIXTURES_DIR "/teacher.data.pt";
    config.batchSize = 32;
    config.lr = 50;  // the gradients explode: alerts
    window->runControls()->setConfig(config);
    const int fc1 = moduleIndex(window->treeModel(), "fc1");
    window->setGradientIntervention(fc1, {hookscope::GradientIntervention::Clamp, 0.5});
    runAndWait(*window, 6);
    const int alerts = window->alerts()->count();
    QVERIFY(alerts >= 1);
    const QString dir = tmp.filePath(QStringLiteral("export"));
    QSignalSpy done(window.get(), &MainWindow::exportDone);
    window->exportCapturesTo(dir, false);
    QTRY_COMPARE_WITH_TIMEOUT(done.size(), 1, kTimeout);
    QVERIFY(QFile::exists(dir + QStringLiteral("/alerts.csv")));
    QSignalSpy opened(window.get(), &MainWindow::modelOpened);
    window->openPath(dir);
    QTRY_COMPARE_WITH_TIMEOUT(opened.size(), 1, kTimeout);
    QVERIFY(window->reviewOnly());
    QCOMPARE(window->alerts()->count(), alerts);
    const int reopenedFc1 = moduleIndex(window->treeModel(), "fc1");
    QVERIFY(reopenedFc1 >= 0);
    const QString name = window->treeModel()->data(window->treeModel()->indexOfModule(reopenedFc1)).toString();
    QVERIFY2(name.contains(QStringLiteral("✂")) && name.contains(QStringLiteral("clamp 0.5 (steps 0–5)")), qPrintable(name));
  }

  void theManifestRecordsEveryConfigurationWithItsSteps() {
    QTemporaryDir tmp;
    auto window = openSample();
    tick(window->treeModel(), "fc1", ModuleTreeModel::Act, true);
    window->runControls()->setInputSpecs(QStringLiteral("4x1x28x28"));
    runAndWait(*window, 2);
    const int fc1 = moduleIndex(window->treeModel(), "fc1");
    const auto shapeOf = [&] {
      return window->treeModel()->data(window->treeModel()->indexOfModule(fc1, ModuleTreeModel::OutputShape)).toString();
    };
    QVERIFY2(shapeOf().startsWith(QStringLiteral("4x")), qPrintable(shapeOf()));
    window->runControls()->setInputSpecs(QStringLiteral("8x1x28x28"));
    runAndWait(*window, 3);
    QVERIFY2(shapeOf().startsWith(QStringLiteral("8x")), qPrintable(shapeOf()));
    const QString dir = tmp.filePath(QStringLiteral("export"));
    QSignalSpy done(window.get(), &MainWindow::exportDone);
    window->exportCapturesTo(dir, false);
    QTRY_COMPARE_WITH_TIMEOUT(done.size(), 1, kTimeout);
    QFile file(dir + QStringLiteral("/manifest.json"));
    QVERIFY(file.open(QIODevice::ReadOnly));
    const QJsonObject manifest = QJsonDocument::fromJson(file.readAll()).object();
    const QJsonArray history = manifest.value(QStringLiteral("configurations")).toArray();
    QCOMPARE(history.size(), 2);
    QCOMPARE(history[0].toObject().value(QStringLiteral("from_step")).toInt(), 0);
    QCOMPARE(history[0].toObject().value(QStringLiteral("to_step")).toInt(), 1);
    QCOMPARE(history[0].toObject().value(QStringLiteral("inputs")).toArray().at(0).toString(), QStringLiteral("4x1x28x28"));
    QCOMPARE(history[1].toObject().value(QStringLiteral("from_step")).toInt(), 2);
    QCOMPARE(history[1].toObject().value(QStringLiteral("to_step")).toInt(), 4);
    QCOMPARE(history[1].toObject().value(QStringLiteral("inputs")).toArray().at(0).toString(), QStringLiteral("8x1x28x28"));
    QCOMPARE(manifest.value(QStringLiteral("inputs")).toArray().at(0).toString(), QStringLiteral("8x1x28x28"));
  }

  void anAllNaNGradientIsNaNInTheTreeAndOnlyNonFiniteFires() {
    auto window = openSample(QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/nan_inject.pt"));
    tick(window->treeModel(), "", ModuleTreeModel::Act, true);
    tick(window->treeModel(), "", ModuleTreeModel::Grad, true);
    hookscope::RunConfig config;
    config.inputSpecs = {"4x16"};  // `bad` takes log(x - 100): NaN from there on, forward and back
    window->runControls()->setConfig(config);
    window->setBreakOn(hookscope::RuleKind::NonFinite, false);  // two whole steps, not a pause
    runAndWait(*window, 2);
    ModuleTreeModel* tree = window->treeModel();
    const auto shown = [&](const char* path) {
      return tree->data(tree->indexOfModule(moduleIndex(tree, path), ModuleTreeModel::GradNorm)).toString();
    };
    QCOMPARE(shown("fc1"), QStringLiteral("NaN"));  // not 0, which reads as a vanishing gradient
    QCOMPARE(shown("bad"), QStringLiteral("NaN"));
    QTemporaryDir tmp;
    QSignalSpy done(window.get(), &MainWindow::exportDone);
    window->exportCapturesTo(tmp.filePath(QStringLiteral("run")), false);
    QTRY_COMPARE_WITH_TIMEOUT(done.size(), 1, kTimeout);
    QFile alerts(tmp.filePath(QStringLiteral("run/alerts.csv")));
    QVERIFY(alerts.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(alerts.readAll());
    QVERIFY2(text.contains(QStringLiteral("non_finite")) && !text.contains(QStringLiteral("vanishing_gradient")),
             qPrintable(text));
  }

  // Issue 37, item 3: File > Compare with run… against a run at twice the learning rate: the
  // status bar names the first divergence (step 1, conv1's activation: step 0 ran on the same
  // weights), F8 selects it; the same run twice does not diverge; a folder that is no export is
  // said, not compared.
  void comparingWithAnotherRunNamesTheFirstDivergenceAndF8GoesThere() {
    QTemporaryDir tmp;
    const auto capture = [&](const QString& name, const QString& lr) {
      QProcess cli;
      cli.start(QStringLiteral(HOOKSCOPE_CLI),
                {QStringLiteral("capture"), QStringLiteral(HOOKSCOPE_SAMPLE_MODEL), QStringLiteral("--input"),
                 QStringLiteral("8x1x28x28"), QStringLiteral("--steps"), QStringLiteral("3"), QStringLiteral("--hook"),
                 QStringLiteral("*"), QStringLiteral("--lr"), lr, QStringLiteral("--out"), tmp.filePath(name)});
      return cli.waitForFinished(120000) && cli.exitCode() == 0;
    };
    QVERIFY(capture(QStringLiteral("slow"), QStringLiteral("0.01")));
    QVERIFY(capture(QStringLiteral("same"), QStringLiteral("0.01")));
    QVERIFY(capture(QStringLiteral("fast"), QStringLiteral("0.02")));
    MainWindow window;
    window.setInteractive(false);
    QSignalSpy opened(&window, &MainWindow::modelOpened);
    window.openCapture(tmp.filePath(QStringLiteral("slow")));
    QVERIFY(opened.wait(kTimeout));
    auto* comparer = window.findChild<RunComparer*>();
    QVERIFY(comparer);
    // The export is read on a thread of its own: compared() says when the comparison is made.
    QSignalSpy compared(comparer, &RunComparer::compared);
    const auto compareWith = [&](const QString& dir) {
      compared.clear();
      if (!comparer->compareWith(dir)) return false;
      return (!compared.isEmpty() || compared.wait(kTimeout)) && compared.takeFirst().at(0).toBool();
    };
    QVERIFY(compareWith(tmp.filePath(QStringLiteral("fast"))));
    QVERIFY(comparer->result().diverged());
    QCOMPARE(comparer->result().first.step, std::int64_t(1));
    QCOMPARE(comparer->result().first.key.module, std::string("conv1"));
    QVERIFY2(window.statusBar()->currentMessage().startsWith(QStringLiteral("Differs from fast first at step 1: activation conv1 (")),
             qPrintable(window.statusBar()->currentMessage()));
    // The tree's Differs column, in the gradient norm's place: conv1 and every module after it
    // in the forward differ from step 1 (the root too: it holds them all).
    ModuleTreeModel* tree = window.treeModel();
    QVERIFY(!window.treeView()->isColumnHidden(ModuleTreeModel::Differs));
    QVERIFY(window.treeView()->isColumnHidden(ModuleTreeModel::GradNorm));
    const auto differs = [&](const char* module) {
      return tree->data(tree->indexOfModule(moduleIndex(tree, module), ModuleTreeModel::Differs)).toString();
    };
    QCOMPARE(differs("conv1"), QStringLiteral("1"));
    QCOMPARE(differs("fc2"), QStringLiteral("1"));
    window.show();
    window.activateWindow();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    QTest::keyClick(&window, Qt::Key_F8);
    QCOMPARE(QString::fromStdString(window.plots()->selectedSeries().module), QStringLiteral("conv1"));
    QCOMPARE(window.plots()->selectedSeries().kind, CaptureKind::Activation);
    QCOMPARE(window.plots()->shownStep(), std::int64_t(1));
    // Both runs drawn: the compared run's histogram of conv1 at step 1 outlined, its loss dashed.
    QVERIFY(window.plots()->histogram()->comparedShown());
    QCOMPARE(window.plots()->loss()->comparedPointCount(), 3);
    QCOMPARE(window.plots()->gradNorms()->comparedLineCount(), window.plots()->gradNorms()->lineCount());
    QCOMPARE(window.plots()->gradNorms()->comparedPointCount("conv1"), 3);  // dashed, in conv1's colour
    // The heatmap switched to |shown − compared|: conv1's histograms differ from step 1.
    HeatmapPlot* heatmap = window.plots()->heatmap();
    heatmap->setSource(HeatmapPlot::Source::Difference);
    QVERIFY2(heatmap->colourRange().upper > 0.01, qPrintable(QString::number(heatmap->colourRange().upper)));
    // Sorted by it: set by hand, fc2 (step 1) before conv1 (step 2) before the rest.
    auto* panel = window.findChild<ModuleTreePanel*>();
    QVERIFY(panel);
    panel->showDifferences({{"conv1", 2}, {"fc2", 1}});
    const QAbstractItemModel* shown = window.treeView()->model();
    const QModelIndex root = shown->index(0, 0);
    QCOMPARE(shown->index(0, 0, root).data().toString(), QStringLiteral("fc2"));
    QCOMPARE(shown->index(1, 0, root).data().toString(), QStringLiteral("conv1"));
    QCOMPARE(shown->index(2, ModuleTreeModel::Differs, root).data().toString(), QStringLiteral("—"));
    QCOMPARE(shown->index(2, 0, root).data().toString(), QStringLiteral("relu1"));  // then the model's order
    panel->showDifferences({{"conv2", 1}, {"conv1", 1}});  // a tie keeps the model's order too
    QCOMPARE(shown->index(0, 0, root).data().toString(), QStringLiteral("conv1"));
    QCOMPARE(shown->index(1, 0, root).data().toString(), QStringLiteral("conv2"));
    const QFontMetrics metrics(window.treeView()->header()->font());
    QVERIFY(window.treeView()->columnWidth(ModuleTreeModel::Differs) >= metrics.horizontalAdvance(QStringLiteral("Differs at")) + 24);
    // A looser tolerance compares again, from the run read (its folder gone): three steps at twice
    // the rate stay within 50%.
    QVERIFY(QDir(tmp.filePath(QStringLiteral("fast"))).removeRecursively());
    comparer->setTolerance(0.5);
    QVERIFY2(comparer->summary().startsWith(QStringLiteral("No divergence from fast")), qPrintable(comparer->summary()));
    comparer->setTolerance(1e-4);
    QVERIFY(compareWith(tmp.filePath(QStringLiteral("same"))));
    QVERIFY(!comparer->result().diverged());
    QVERIFY2(comparer->summary().startsWith(QStringLiteral("No divergence from same over 3 steps")), qPrintable(comparer->summary()));
    // Another model's run: compared on what both hold, the rest listed in the status bar's tooltip.
    QProcess other;
    other.start(QStringLiteral(HOOKSCOPE_CLI), {QStringLiteral("capture"), QStringLiteral(HOOKSCOPE_SAMPLE_MODEL),
                                                QStringLiteral("--input"), QStringLiteral("8x1x28x28"), QStringLiteral("--steps"),
                                                QStringLiteral("2"), QStringLiteral("--hook"), QStringLiteral("fc1"),
                                                QStringLiteral("--out"), tmp.filePath(QStringLiteral("fc1only"))});
    QVERIFY(other.waitForFinished(120000) && other.exitCode() == 0);
    QVERIFY(compareWith(tmp.filePath(QStringLiteral("fc1only"))));
    const QString tip = window.statusBar()->toolTip();
    QVERIFY2(tip.contains(QStringLiteral("Note: the runs kept different steps (3 and 2")) &&
                 tip.contains(QStringLiteral("Only in the shown run: activation (root)")),
             qPrintable(tip));
    QVERIFY(compareWith(tmp.filePath(QStringLiteral("slow"))));  // the shown run itself: nothing differs
    QCOMPARE(heatmap->emptyRows(0), 96);  // every cell of the difference 0
    QCOMPARE(heatmap->colourRange(), QCPRange(0, 1));
    heatmap->setSource(HeatmapPlot::Source::Shown);
    QVERIFY(!compareWith(tmp.path()));
    QVERIFY2(window.lastMessage().contains(QStringLiteral("manifest")), qPrintable(window.lastMessage()));
  }

  // Issue 58: a run compared with is read under the window's memory cap (every k-th step of one
  // too large for it, as reopening it would be), on a thread of its own: the status bar says it
  // is being read meanwhile, and a second comparison waits for the first.
  void aComparedRunOverTheMemoryCapIsReadAtEveryKthStepWhileTheWindowWaitsForNothing() {
    using namespace hookscope;
    QTemporaryDir tmp;
    const auto write = [&](const QString& name, int steps, int series) {
      CaptureStore store(std::numeric_limits<std::size_t>::max());
      for (int step = 0; step < steps; ++step) {
        for (int i = 0; i < series; ++i) {
          TensorStats s;
          s.shape = {64};
          s.dtype = "float32";
          s.numel = 64;
          s.mean = 0.01 * step + i;
          s.std = 1;
          s.histLow = -1;
          s.histHigh = 1;
          s.histogram = std::vector<std::int64_t>(64, 1);
          store.add(step, {"layer" + std::to_string(i), 0, CaptureKind::Activation, 0}, s);
        }
        store.addScalar(step, "loss", 1.0 / (step + 1));
      }
      ExportManifest manifest;
      manifest.modelFile = "model.pt";
      manifest.steps = steps;
      std::string error;
      return writeExport(tmp.filePath(name).toStdString(), manifest, store, {}, {}, &error) ? QString() : QString::fromStdString(error);
    };
    QCOMPARE(write(QStringLiteral("shown"), 4, 10), QString());
    QCOMPARE(write(QStringLiteral("long"), 3000, 10), QString());  // about 21 MiB in memory
    MainWindow window;
    window.setInteractive(false);
    QSignalSpy opened(&window, &MainWindow::modelOpened);
    window.openCapture(tmp.filePath(QStringLiteral("shown")));
    QVERIFY(opened.wait(kTimeout));
    window.sessions()->setMemoryCap(16 << 20);  // the window's least cap
    QTRY_COMPARE_WITH_TIMEOUT(window.sessions()->memoryCap(), std::size_t(16 << 20), kTimeout);
    auto* comparer = window.findChild<RunComparer*>();
    QSignalSpy compared(comparer, &RunComparer::compared);
    QVERIFY(comparer->compareWith(tmp.filePath(QStringLiteral("long"))));
    QVERIFY2(window.statusBar()->currentMessage().startsWith(QStringLiteral("Reading long to compare")),
             qPrintable(window.statusBar()->currentMessage()));
    QVERIFY(!comparer->compareWith(tmp.filePath(QStringLiteral("shown"))));  // one read at a time
    QVERIFY(compared.wait(kTimeout));
    QVERIFY(compared.takeFirst().at(0).toBool());
    // Steps 0 and 2 of the shown run are on the grid of every 2nd step: compared (the means
    // equal); steps 1 and 3 were not read.
    QVERIFY2(comparer->summary().startsWith(QStringLiteral("No divergence from long over 2 steps and 10 series (tolerance "
                                                           "0.0001) (1 step in 2 of it read)")),
             qPrintable(comparer->summary()));
    QVERIFY2(window.statusBar()->toolTip().contains(QStringLiteral("long was read at 1 step in 2 (1501 of its 3000 steps)")),
             qPrintable(window.statusBar()->toolTip()));
    QCOMPARE(window.plots()->loss()->comparedPointCount(), 3000);  // every scalar is read
  }

  void theExportDialogStartsBesideTheModelOrTheLastExportNotTheRecoveryFolder() {
    QSettings().remove(QStringLiteral("paths/lastExport"));  // as on a first run
    QTemporaryDir tmp;
    auto window = openSample();
    runAndWait(*window, 1);
    // The quit question counts the steps the slider shows: "0 of 0–0" is one step.
    QCOMPARE(window->discardGuard()->question(QStringLiteral("Quitting")),
             QStringLiteral("Quitting discards 1 captured step (step 0) that was not exported."));
    const QString before = window->discardGuard()->exportStartFolder();
    QCOMPARE(before, QFileInfo(QStringLiteral(HOOKSCOPE_SAMPLE_MODEL)).absolutePath());
    // Saved on a stop signal (into the recovery folder): not where the user exports.
    QSignalSpy done(window.get(), &MainWindow::exportDone);
    QDir().mkpath(tmp.filePath(QStringLiteral("recovered")));
    window->exportCapturesTo(tmp.filePath(QStringLiteral("recovered/now-1")), false, QStringLiteral("SIGTERM"));
    QTRY_COMPARE_WITH_TIMEOUT(done.size(), 1, kTimeout);
    QCOMPARE(done.front().at(1).toString(), QString());
    QCOMPARE(window->discardGuard()->exportStartFolder(), before);
    // An export the user asked for: the next one starts beside it.
    window->exportCapturesTo(tmp.filePath(QStringLiteral("mine")), false);
    QTRY_COMPARE_WITH_TIMEOUT(done.size(), 2, kTimeout);
    QCOMPARE(window->discardGuard()->exportStartFolder(), QFileInfo(tmp.path()).absoluteFilePath());
  }

  void askBeforeDiscardingCapturesThatWereNotExported() {
    QTemporaryDir tmp;
    auto window = openSample();
    tick(window->treeModel(), "fc1", ModuleTreeModel::Act, true);
    runAndWait(*window, 3);
    const auto store = window->store();
    QVERIFY(window->hasUnexportedCaptures());
    // Cancel: reset, open and close all keep the captures.
    window->setDiscardAnswer(MainWindow::DiscardChoice::Cancel);
    window->resetWeights();
    window->openPath(QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_mlp.pt"));
    QVERIFY(!window->close());
    QTRY_COMPARE_WITH_TIMEOUT(window->discardQuestions(), 3, kTimeout);
    QVERIFY(window->isVisible());
    QCOMPARE(window->store(), store);
    QCOMPARE(window->modelPath(), QStringLiteral(HOOKSCOPE_SAMPLE_MODEL));
    // Export: written first, then the reset goes on.
    const QString dir = tmp.filePath(QStringLiteral("before-reset"));
    window->setDiscardAnswer(MainWindow::DiscardChoice::Export, dir);
    QSignalSpy opened(window.get(), &MainWindow::modelOpened);
    window->resetWeights();
    QTRY_COMPARE_WITH_TIMEOUT(opened.size(), 1, kTimeout);
    QVERIFY(QFile::exists(dir + QStringLiteral("/manifest.json")));
    QVERIFY(window->store() != store);
    QCOMPARE(window->discardQuestions(), 4);
    // Nothing captured since the reset: no question.
    window->resetWeights();
    QTRY_COMPARE_WITH_TIMEOUT(opened.size(), 2, kTimeout);
    QCOMPARE(window->discardQuestions(), 4);
    // Exported captures are not asked about either.
    runAndWait(*window, 1);
    QSignalSpy done(window.get(), &MainWindow::exportDone);
    window->exportCapturesTo(tmp.filePath(QStringLiteral("second")), false);
    QTRY_COMPARE_WITH_TIMEOUT(done.size(), 1, kTimeout);
    QVERIFY(!window->hasUnexportedCaptures());
    window->setDiscardAnswer(MainWindow::DiscardChoice::Cancel);
    QVERIFY(window->close());
    QCOMPARE(window->discardQuestions(), 4);
  }

  void theCapturesOnScreenBecomeATensorBoardLog() {
    QTemporaryDir tmp;
    auto window = openSample();
    tick(window->treeModel(), "fc1", ModuleTreeModel::Act, true);
    tick(window->treeModel(), "fc1", ModuleTreeModel::Grad, true);
    runAndWait(*window, 3);
    auto* tensorBoard = window->tensorBoardExport();
    QSignalSpy finished(tensorBoard, &TensorBoardExport::finished);
    const QString logdir = tmp.filePath(QStringLiteral("tb"));
    tensorBoard->exportTo(logdir);
    QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, kTimeout);
    QVERIFY2(finished.at(0).at(1).toString().isEmpty(), qPrintable(finished.at(0).at(1).toString()));
    const auto events = QDir(logdir).entryInfoList({QStringLiteral("events.out.tfevents.*")}, QDir::Files);
    QCOMPARE(events.size(), 1);
    QVERIFY(events.front().size() > 1000);  // 2 series x 3 steps of 64-bin histograms, and the scalars
    QVERIFY(!tensorBoard->busy());
    // The temporary export it went through is gone, and it saved nothing the discard question counts.
    QVERIFY(window->hasUnexportedCaptures());
    // A folder that holds a log already: refused, said, and left as it was.
    tensorBoard->exportTo(logdir);
    QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 2, kTimeout);
    QVERIFY(finished.at(1).at(1).toString().contains(QStringLiteral("not an empty folder")));
    QVERIFY(window->lastMessage().contains(QStringLiteral("TensorBoard")));
    QCOMPARE(QDir(logdir).entryList(QDir::Files).size(), 1);
  }

  void windowShortcutsWorkWithFocusInATextField() {
    auto window = openSample();
    runAndWait(*window, 1);
    auto* inputs = window->runControls()->findChild<QLineEdit*>();
    QVERIFY(inputs);
    window->activateWindow();
    QVERIFY(QTest::qWaitForWindowActive(window.get()));
    inputs->setFocus();
    const QString before = inputs->text();
    QAction* exportAction = findAction(*window, QStringLiteral("Export captures…"));
    QVERIFY(exportAction);
    QSignalSpy triggered(exportAction, &QAction::triggered);
    // The export dialog opens: close it again.
    QTimer::singleShot(300, [] {
      if (QWidget* dialog = QApplication::activeModalWidget()) dialog->close();
    });
    QTest::keyClick(inputs, Qt::Key_E, Qt::ControlModifier);
    QCOMPARE(triggered.size(), 1);
    QCOMPARE(inputs->text(), before);
    // [ and ] are text in a text field, and scrub anywhere else.
    window->plots()->setFollowLatest(true);
    QTest::keyClick(inputs, Qt::Key_BracketLeft);
    QCOMPARE(inputs->text(), before + QStringLiteral("["));
    inputs->setText(before);
    window->activateWindow();  // again, after the dialog
    QVERIFY(QTest::qWaitForWindowActive(window.get()));
    window->treeView()->setFocus();
    runAndWait(*window, 2);
    QCOMPARE(window->plots()->shownStep(), 2);
    QSignalSpy previous(findAction(*window, QStringLiteral("Previous step")), &QAction::triggered);
    QTest::keyClick(window->treeView(), Qt::Key_BracketLeft);
    QCOMPARE(window->plots()->shownStep(), 1);
    QTest::keyClick(window->treeView(), Qt::Key_BracketRight);
    QCOMPARE(window->plots()->shownStep(), 2);
  }

  void aFirstWindowOnASmallScreenLeavesRoomForItsTitleBar() {
    // No size saved: on a screen smaller than 1400x900 (the offscreen platform's is 800x600; a
    // laptop's 1024x700) the window asked for the whole of it, and the window manager's title
    // bar pushed its status bar below the screen's edge.
    QSettings().remove(QStringLiteral("window/geometry"));
    MainWindow window;
    const QRect area = window.screen()->availableGeometry();
    QVERIFY2(area.width() < 1400 + MainWindow::kFrameAllowance.width() ||
                 area.height() < 900 + MainWindow::kFrameAllowance.height(),
             "this check needs a screen smaller than the first window's size");
    QVERIFY2(window.height() + MainWindow::kFrameAllowance.height() <= area.height() &&
                 window.width() + MainWindow::kFrameAllowance.width() <= area.width(),
             qPrintable(QStringLiteral("%1x%2 on %3x%4").arg(window.width()).arg(window.height())
                            .arg(area.width()).arg(area.height())));
    QCOMPARE(window.pos(), area.topLeft());
  }

  void theRunTabsMnemonicsNeverTakeAMenusLetter() {
    // Alt+R opened "Learning &rate", not the Run menu; Alt+S "&Steps", not Settings.
    auto window = openSample();
    const auto letter = [](const QString& text) {
      const int at = text.indexOf(QLatin1Char('&'));
      return at >= 0 && at + 1 < text.size() ? text.at(at + 1).toLower() : QChar();
    };
    QSet<QChar> menus;
    for (QAction* action : window->menuBar()->actions()) menus.insert(letter(action->text()));
    QVERIFY(menus.contains(QLatin1Char('r')) && menus.contains(QLatin1Char('s')));
    QSet<QChar> fields;
    for (QLabel* label : window->runControls()->findChildren<QLabel*>()) {
      const QChar key = letter(label->text());
      if (key.isNull()) continue;
      QVERIFY2(!menus.contains(key), qPrintable(label->text() + QStringLiteral(" takes a menu's Alt+") + key));
      QVERIFY2(!fields.contains(key), qPrintable(label->text() + QStringLiteral(" takes another field's Alt+") + key));
      fields.insert(key);
    }
    QVERIFY(fields.size() >= 8);
  }

  void tickBoxesShowAt1024x700() {
    auto window = openSample();
    window->resize(1024, 700);
    QTreeView* view = window->treeView();
    QTRY_COMPARE_WITH_TIMEOUT(window->size(), QSize(1024, 700), kTimeout);
    QCoreApplication::sendPostedEvents();  // the layout the resize asked for
    QCoreApplication::processEvents();
    QTRY_VERIFY_WITH_TIMEOUT(!window->redrawPending(), kTimeout);
    for (int column : {ModuleTreeModel::Act, ModuleTreeModel::Grad, ModuleTreeModel::In, ModuleTreeModel::GradNorm}) {
      const int right = view->header()->sectionViewportPosition(column) + view->header()->sectionSize(column);
      QVERIFY2(right <= view->viewport()->width(),
               qPrintable(QStringLiteral("column %1 ends at %2 of %3").arg(column).arg(right).arg(view->viewport()->width())));
    }
    const QModelIndex params = window->treeModel()->indexOfModule(0, ModuleTreeModel::Params);
    QVERIFY(window->treeModel()->data(params).toString().endsWith(QStringLiteral("k")));
    // The plots' tabs read whole ("Deviation" was cut to "Devi" or hidden behind scroll arrows),
    // and the tree still needs no sideways scrolling for a small model.
    int tabBars = 0;
    for (QTabBar* bar : window->findChildren<QTabBar*>()) {
      if (!bar->isVisible()) continue;
      ++tabBars;
      for (int i = 0; i < bar->count(); ++i) {
        const QRect tab = bar->tabRect(i);
        QVERIFY2(tab.width() >= bar->fontMetrics().horizontalAdvance(bar->tabText(i)) && tab.right() < bar->width(),
                 qPrintable(QStringLiteral("tab %1: %2 px at %3 of %4").arg(bar->tabText(i)).arg(tab.width())
                                .arg(tab.left()).arg(bar->width())));
      }
    }
    QVERIFY(tabBars >= 2);  // the Run/Alerts tabs and the plots' tabs
    QVERIFY2(!view->horizontalScrollBar()->isVisible(), "the tree scrolls sideways at 1024x700");
  }

  void aHookedLayerThatNeverRunsSaysSo() {
    auto window = openSample(QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/attention_scripted.pt"));
    tick(window->treeModel(), "attn.out_proj", ModuleTreeModel::Act, true);
    tick(window->treeModel(), "fc", ModuleTreeModel::Act, true);
    hookscope::RunConfig config;
    config.dataFile = HOOKSCOPE_FIXTURES_DIR "/attention_scripted.data.pt";
    window->runControls()->setConfig(config);
    runAndWait(*window, 2);
    select(*window, "attn.out_proj");
    QTRY_VERIFY_WITH_TIMEOUT(window->plots()->histogram()->statsText().contains(QStringLiteral("was not called")), kTimeout);
    const QString text = window->plots()->histogram()->statsText();
    QVERIFY2(text.contains(QStringLiteral("was not called")) && text.contains(QStringLiteral("out_proj")), qPrintable(text));
    // Another model opened: the hint is of its selection, never of the last model's layer.
    {
      auto other = openSample();
      tick(other->treeModel(), "conv1", ModuleTreeModel::Act, true);
      select(*other, "conv1");
      QTRY_COMPARE_WITH_TIMEOUT(other->plots()->selectedModule(), std::string("conv1"), kTimeout);
      QTRY_VERIFY2_WITH_TIMEOUT(other->plots()->histogram()->statsText().contains(QStringLiteral("conv1")),
                                qPrintable(other->plots()->histogram()->statsText()), kTimeout);
      QSignalSpy opened(other.get(), &MainWindow::modelOpened);
      other->openPath(QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/attention_scripted.pt"));
      QVERIFY(opened.wait(kTimeout));
      QTRY_VERIFY_WITH_TIMEOUT(!other->redrawPending(), kTimeout);
      const QString hint = other->plots()->histogram()->statsText();
      QVERIFY2(!hint.contains(QStringLiteral("conv1")), qPrintable(hint));
    }
    // A layer scrubbed to before its captures began says when they start.
    tick(window->treeModel(), "proj", ModuleTreeModel::Act, true);
    runAndWait(*window, 1);
    select(*window, "proj");
    window->plots()->scrubTo(0);
    const QString before = window->plots()->histogram()->statsText();
    QVERIFY2(before.contains(QStringLiteral("at step 0")) && before.contains(QStringLiteral("start at step 2")), qPrintable(before));
  }

  void interventionsShowInTheTreeAndTheExport() {
    QTemporaryDir tmp;
    auto window = openSample();
    const int fc1 = moduleIndex(window->treeModel(), "fc1");
    window->setGradientIntervention(fc1, {hookscope::GradientIntervention::Clamp, 0.001});
    QVERIFY(window->treeModel()->data(window->treeModel()->indexOfModule(fc1)).toString().contains(QStringLiteral("clamp 0.001")));
    runAndWait(*window, 2);
    window->setGradientIntervention(fc1, {});
    QVERIFY(!window->treeModel()->data(window->treeModel()->indexOfModule(fc1)).toString().contains(QStringLiteral("clamp")));
    runAndWait(*window, 1);
    QSignalSpy done(window.get(), &MainWindow::exportDone);
    const QString dir = tmp.filePath(QStringLiteral("export"));
    window->exportCapturesTo(dir, false);
    QTRY_COMPARE_WITH_TIMEOUT(done.size(), 1, kTimeout);
    QFile manifest(dir + QStringLiteral("/manifest.json"));
    QVERIFY(manifest.open(QIODevice::ReadOnly));
    const QByteArray json = manifest.readAll();
    QVERIFY2(json.contains("\"action\": \"clamp 0.001\"") && json.contains("\"target\": \"gradient\"") &&
                 json.contains("\"from_step\": 0") && json.contains("\"to_step\": 1"),
             json.constData());
  }

  void badFileShowsTheMessageAndKeepsThePreviousModel() {
    auto window = openSample();
    QSignalSpy messages(window.get(), &MainWindow::messageShown);
    for (const char* bad : {"/bad/not_zip.pt", "/bad/eager_zip.pt", "/bad/missing.pt"}) {
      window->openPath(QStringLiteral(HOOKSCOPE_FIXTURES_DIR) + QString::fromLatin1(bad));
      QTRY_VERIFY_WITH_TIMEOUT(!messages.isEmpty(), kTimeout);
      messages.clear();
    }
    // torch.save(model) is a pickle of code: the window asks, naming what it would import ...
    window->openPath(QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/bad/eager_zip.pt"));
    QTRY_VERIFY_WITH_TIMEOUT(!messages.isEmpty(), kTimeout);
    QVERIFY2(window->lastMessage().contains(QStringLiteral("__main__.SplitHead")), qPrintable(window->lastMessage()));
    messages.clear();
    // ... and trusted, says why its classes cannot be found and how to save the model instead.
    const QString eager = QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/bad/eager_zip.pt");
    window->sessions()->openModel(eager, true);
    QTRY_VERIFY_WITH_TIMEOUT(!messages.isEmpty(), kTimeout);
    QVERIFY2(window->lastMessage().contains(QStringLiteral("torch.export.save")), qPrintable(window->lastMessage()));
    QCOMPARE(window->modelPath(), QStringLiteral(HOOKSCOPE_SAMPLE_MODEL));
    QCOMPARE(countModules(*window->treeModel()), 11);
    runAndWait(*window, 1);  // and it still runs
  }

  void aModelWhoseCodeWritesAFileIsNotOpenedWithoutConsent() {
    const QString victim = QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/bad/victim.bin");
    {
      QFile file(victim);
      QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
      file.write(QByteArray(16, 'A'));
    }
    auto window = openSample();
    QSignalSpy messages(window.get(), &MainWindow::messageShown);
    window->openPath(QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/bad/setstate_from_file.pt"));
    QTRY_VERIFY_WITH_TIMEOUT(!messages.isEmpty(), kTimeout);
    QVERIFY2(window->lastMessage().contains(QStringLiteral("__setstate__")) &&
                 window->lastMessage().contains(QStringLiteral("torch.from_file")),
             qPrintable(window->lastMessage()));
    QCOMPARE(window->modelPath(), QStringLiteral(HOOKSCOPE_SAMPLE_MODEL));
    QFile file(victim);
    QVERIFY(file.open(QIODevice::ReadOnly));
    QCOMPARE(file.readAll(), QByteArray(16, 'A'));
  }

  void aVersionOneExportOpensAsRankZero() {
    // Written as HookScope wrote exports before ranks: no rank column, manifest version 1.
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    auto write = [&](const char* name, const QByteArray& text) { writeFile(tmp.filePath(QString::fromLatin1(name)), text); };
    write("manifest.json", R"({"format": "hookscope-capture", "version": 1, "model": {"file": "m.pt", "sha256": ""},
                              "steps": 2, "hooked": [{"module": "fc", "kinds": ["activation"]}], "source": "model"})");
    write("stats.csv", "step,module,call,kind,index,shape,dtype,numel,min,max,mean,std,l2norm,zero_frac,nan_count,inf_count\n"
                       "0,fc,0,activation,0,2x3,float32,6,-1,2,0.5,1,2.5,0,0,0\n"
                       "1,fc,0,activation,0,2x3,float32,6,-2,3,0.25,1.5,3.5,0,0,0\n");
    write("scalars.csv", "step,name,value\n0,loss,1.5\n1,loss,1.25\n");
    write("alerts.csv", "step,module,kind,rule,value,message,last_step,count\n1,fc,activation,dead_units,0.95,dead,1,1\n");
    MainWindow window;
    window.setInteractive(false);
    window.resize(1200, 800);
    window.show();
    QSignalSpy opened(&window, &MainWindow::modelOpened);
    window.openPath(tmp.path());
    QVERIFY2(opened.wait(kTimeout), qPrintable(window.lastMessage()));
    QVERIFY(window.reviewOnly());
    QCOMPARE(window.store()->ranks(), std::vector<int>{0});
    const auto points = window.store()->values({"fc", 0, CaptureKind::Activation, 0}, &hookscope::TensorStats::mean);
    QCOMPARE(int(points.size()), 2);
    QCOMPARE(points[1].value, 0.25);
    QCOMPARE(window.alerts()->count(), 1);
    window.selectModule(QStringLiteral("fc"));
    window.plots()->refresh();
    QVERIFY(!window.plots()->rankChooser()->isVisibleTo(&window));  // one process: no rank chooser
    QCOMPARE(window.plots()->loss()->pointCount(), 2);
    QVERIFY(window.plots()->histogram()->statsText().contains(QStringLiteral("mean 0.25")));
    QVERIFY(!window.plots()->histogram()->statsText().contains(QStringLiteral("rank")));
  }

  void aJobsExportShowsItsRanksAndFitsA1024PixelScreen() {
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    auto write = [&](const char* name, const QByteArray& text) { writeFile(tmp.filePath(QString::fromLatin1(name)), text); };
    write("manifest.json", R"({"format": "hookscope-capture", "version": 2, "model": {"file": "m.pt", "sha256": ""},
                              "steps": 1, "hooked": [{"module": "fc", "kinds": ["activation"]}], "source": "model",
                              "world_size": 2})");
    write("stats.csv", "step,rank,module,call,kind,index,shape,dtype,numel,min,max,mean,std,l2norm,zero_frac,nan_count,inf_count\n"
                       "0,0,fc,0,activation,0,2x3,float32,6,-1,2,0.5,1,2.5,0,0,0\n"
                       "0,1,fc,0,activation,0,2x3,float32,6,-2,3,0.25,1.5,3.5,0,0,0\n");
    write("scalars.csv", "step,rank,name,value\n0,0,loss,1.5\n0,1,loss,1.25\n");
    MainWindow window;
    window.setInteractive(false);
    window.show();
    QSignalSpy opened(&window, &MainWindow::modelOpened);
    window.openPath(tmp.path());
    QVERIFY2(opened.wait(kTimeout), qPrintable(window.lastMessage()));
    window.selectModule(QStringLiteral("fc"));
    window.plots()->refresh();
    QVERIFY(window.plots()->rankChooser()->isVisibleTo(&window));
    QCOMPARE(window.plots()->rankChooser()->count(), 3);
    QCOMPARE(window.plots()->loss()->lineCount(), 2);
    // The rank chooser in the bar under the plots still lets the window fit a 1024 px screen.
    QVERIFY2(window.minimumSizeHint().width() <= 1024, qPrintable(QString::number(window.minimumSizeHint().width())));
    window.plots()->setRank(1);
    QVERIFY(window.plots()->histogram()->statsText().contains(QStringLiteral("mean 0.25")));
    QVERIFY(window.plots()->histogram()->statsText().contains(QStringLiteral("rank 1")));
  }

  void exportFromTheWindowIsReadByTheCliAndReopens() {
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    auto window = openSample();
    tick(window->treeModel(), "conv2", ModuleTreeModel::Act, true);
    tick(window->treeModel(), "conv2", ModuleTreeModel::Grad, true);
    tick(window->treeModel(), "fc2", ModuleTreeModel::Grad, true);
    runAndWait(*window, 4);
    const QString dir = tmp.filePath(QStringLiteral("export"));
    QSignalSpy done(window.get(), &MainWindow::exportDone);
    window->exportCapturesTo(dir, false);
    QTRY_COMPARE_WITH_TIMEOUT(done.size(), 1, kTimeout);
    QCOMPARE(done.front().at(1).toString(), QString());
    QProcess cli;
    cli.start(QStringLiteral(HOOKSCOPE_CLI), {QStringLiteral("show"), dir});
    QVERIFY(cli.waitForFinished(kTimeout));
    const QString out = QString::fromUtf8(cli.readAllStandardOutput());
    QCOMPARE(cli.exitCode(), 0);
    QVERIFY2(out.contains(QStringLiteral("small_cnn.pt")) && out.contains(QStringLiteral("gradient conv2 0/0")), qPrintable(out));
    // Exporting again to the same folder without consent is refused, nothing lost.
    window->exportCapturesTo(dir, false);
    QTRY_COMPARE_WITH_TIMEOUT(done.size(), 2, kTimeout);
    QVERIFY(done.back().at(1).toString().contains(QStringLiteral("already holds a HookScope export")));

    // Reopened without the model: read-only, the same series as the live session.
    const auto live = window->store();
    QSignalSpy opened(window.get(), &MainWindow::modelOpened);
    window->openPath(dir);
    QTRY_COMPARE_WITH_TIMEOUT(opened.size(), 1, kTimeout);
    QVERIFY(window->reviewOnly());
    QVERIFY(window->store() != live);
    QCOMPARE(window->store()->seriesKeys(), live->seriesKeys());
    for (const auto& key : live->seriesKeys()) {
      const auto a = live->values(key, &hookscope::TensorStats::l2norm);
      const auto b = window->store()->values(key, &hookscope::TensorStats::l2norm);
      QCOMPARE(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        QCOMPARE(a[i].step, b[i].step);
        QCOMPARE(a[i].value, b[i].value);
      }
    }
    QTRY_COMPARE_WITH_TIMEOUT(window->plots()->gradNorms()->lineCount(), 2, kTimeout);
    QTRY_COMPARE_WITH_TIMEOUT(window->plots()->gradNorms()->pointCount("conv2"), 4, kTimeout);
    // Reopened, the axes hold every point (they used to show -3.5..3.5 and hide steps 4-7).
    const QCPRange x = window->plots()->gradNorms()->plot()->xAxis->range();
    const QCPRange y = window->plots()->gradNorms()->plot()->yAxis->range();
    for (const auto& key : window->store()->seriesKeys()) {
      if (key.kind != CaptureKind::Gradient) continue;
      for (const auto& p : window->store()->values(key, &hookscope::TensorStats::l2norm)) {
        QVERIFY2(x.contains(double(p.step)) && y.contains(p.value),
                 qPrintable(QStringLiteral("step %1 norm %2 off the chart").arg(p.step).arg(p.value)));
      }
    }
    QCOMPARE(window->plots()->loss()->pointCount(), 4);
    QVERIFY(moduleIndex(window->treeModel(), "conv2") >= 0);
    // Review is read-only: the boxes cannot be changed.
    const QModelIndex box = window->treeModel()->indexOfModule(moduleIndex(window->treeModel(), "conv2"), ModuleTreeModel::Act);
    QVERIFY(!(window->treeModel()->flags(box) & Qt::ItemIsUserCheckable));
    // The tree's gradient norms show the step looked at: the newest on opening, then the one
    // scrubbed to (they stayed blank until a step ran).
    const QModelIndex norm =
        window->treeModel()->indexOfModule(moduleIndex(window->treeModel(), "conv2"), ModuleTreeModel::GradNorm);
    const auto norms = window->store()->values({"conv2", 0, CaptureKind::Gradient, 0}, &hookscope::TensorStats::l2norm);
    auto shows = [&](double value) { return std::abs(norm.data().toString().toDouble() - value) <= 0.05 * value; };
    QTRY_VERIFY_WITH_TIMEOUT(!norm.data().toString().isEmpty(), kTimeout);
    QVERIFY2(shows(norms[3].value), qPrintable(norm.data().toString()));
    window->plots()->scrubTo(0);
    QTRY_VERIFY2_WITH_TIMEOUT(shows(norms[0].value), qPrintable(norm.data().toString()), kTimeout);
  }
};

QTEST_MAIN(MainWindowTest)
#include "MainWindowTest.moc"
