// The window's low-precision views: the Precision page over steps, the tree's Precision column
// and the histogram's numbers, on stores filled by hand with known counts, and on the sample
// model run by its engine (whose counts the store holds as the kernel made them).
#include "dialogs/RuleThresholdsDialog.h"
#include "models/ModuleTreeModel.h"
#include "panels/ModuleTreePanel.h"
#include "panels/PlotsPanel.h"
#include "plots/HistogramPlot.h"
#include "plots/PrecisionPlot.h"
#include "plots/QCustomPlotInclude.h"
#include "session/SessionHost.h"
#include "window/MainWindow.h"

#include "WindowTestSupport.h"

#include <QHeaderView>
#include <QLineEdit>
#include <QStandardPaths>
#include <QTreeView>

#include <cmath>

using hookscope::CaptureKind;
using hookscope::CaptureStore;
using hookscope::ModuleInfo;
using hookscope::SeriesKey;
using hookscope::TensorStats;
using hookscope::kPrecisionCounts;

namespace {

const int kTimeout = hookscope::test::deadlineMs();

/// 1000 values, of which `over` overflow float16, `flush` flush in it, and `e4m3`, `e5m2` flush in fp8.
TensorStats counted(std::int64_t over, std::int64_t flush, std::int64_t e4m3, std::int64_t e5m2) {
  TensorStats s;
  s.shape = {10, 100};
  s.dtype = "float32";
  s.numel = 1000;
  s.min = -1;
  s.max = 1;
  s.histLow = -1;
  s.histHigh = 1;
  s.histogram = std::vector<std::int64_t>(8, 125);
  s.amax = over ? 1e5 : 1;
  s.f16Overflow = over;
  s.f16Underflow = flush;
  s.e4m3Underflow = e4m3;
  s.e5m2Underflow = e5m2;
  return s;
}

/// The rows of a page's CSV after its header, split into cells.
std::vector<QStringList> csvRows(const PlotPage& page) {
  std::vector<QStringList> rows;
  const QStringList lines = page.toCsv().split('\n', Qt::SkipEmptyParts);
  for (int i = 1; i < lines.size(); ++i) rows.push_back(lines[i].split(','));
  return rows;
}

/// A root with two children, "a" and "b".
std::vector<ModuleInfo> twoLayers() {
  std::vector<ModuleInfo> modules(3);
  modules[0].typeName = "Net";
  modules[0].children = {1, 2};
  for (int m = 1; m < 3; ++m) {
    modules[std::size_t(m)].path = modules[std::size_t(m)].name = m == 1 ? "a" : "b";
    modules[std::size_t(m)].typeName = "Linear";
    modules[std::size_t(m)].parent = 0;
    modules[std::size_t(m)].depth = 1;
  }
  return modules;
}

/// The panel showing twoLayers(), with no Precision column.
void showTwoLayers(ModuleTreePanel& panel) {
  SessionSummary summary;
  summary.modules = twoLayers();
  panel.showModel(summary);
  panel.setPrecisionColumn(-1);
}

} // namespace

class PrecisionTest : public QObject {
  Q_OBJECT

private Q_SLOTS:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("HookScopeTest"));
  }

  void thePageDrawsEachCountAsAShareOfTheValuesAtEveryStep() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    panel.resize(1000, 700);
    panel.show();
    panel.setStore(store);
    panel.showPrecision(true);
    QVERIFY(panel.showsPrecision());
    const SeriesKey key{"a", 0, CaptureKind::Activation, 0};
    for (int step = 0; step < 5; ++step) store->add(step, key, counted(step, 2 * step, 10 * step, 100 + step));
    panel.setSelectedModule("a");
    panel.refresh();
    PrecisionPlot* page = panel.precision();
    QCOMPARE(page->note(), QString());
    const auto rows = csvRows(*page);
    QCOMPARE(int(rows.size()), 5);
    for (int step = 0; step < 5; ++step) {
      const QStringList& row = rows[std::size_t(step)];
      QCOMPARE(row[0].toInt(), step);
      // Percent of 1000 values: n / 10.
      QCOMPARE(row[1].toDouble(), step / 10.0);
      QCOMPARE(row[2].toDouble(), 2 * step / 10.0);
      QCOMPARE(row[3].toDouble(), 10 * step / 10.0);
      QCOMPARE(row[4].toDouble(), (100 + step) / 10.0);
    }
    for (int count = 0; count < 4; ++count) QCOMPARE(page->pointCount(count), 5);
    // Every point inside the axes: the largest, 10.4%, too.
    page->plot()->replot();
    const QCPRange x = page->plot()->xAxis->range(), y = page->plot()->yAxis->range();
    QVERIFY2(x.contains(0) && x.contains(4) && y.contains(0) && y.contains(10.4),
             qPrintable(QStringLiteral("x %1..%2 y %3..%4").arg(x.lower).arg(x.upper).arg(y.lower).arg(y.upper)));
    // A new step is drawn with the next frame.
    store->add(5, key, counted(0, 0, 0, 0));
    panel.refresh();
    QCOMPARE(page->pointCount(0), 6);
  }

  void aCaptureWithoutCountsSaysWhyItsPageIsEmpty() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    panel.resize(1000, 700);
    panel.show();
    panel.setStore(store);
    TensorStats old = counted(0, 0, 0, 0);
    old.f16Overflow = old.f16Underflow = old.e4m3Underflow = old.e5m2Underflow = -1;  // an older script's
    store->add(0, SeriesKey{"a", 0, CaptureKind::Activation, 0}, old);
    panel.setSelectedModule("a");
    panel.refresh();
    QVERIFY2(panel.precision()->note().contains(QStringLiteral("older")), qPrintable(panel.precision()->note()));
    QCOMPARE(panel.precision()->pointCount(0), 0);
    QCOMPARE(int(csvRows(*panel.precision()).size()), 0);
    // And the histogram's numbers leave the counts out rather than show -1.
    QVERIFY(!panel.histogram()->statsText().contains(QStringLiteral("flush")));
  }

  void theHistogramNumbersNameEachCountAtTheStepShown() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    panel.resize(1000, 700);
    panel.show();
    panel.setStore(store);
    store->add(0, SeriesKey{"a", 0, CaptureKind::Activation, 0}, counted(5, 0, 250, 1));
    panel.setSelectedModule("a");
    panel.refresh();
    const QString text = panel.histogram()->statsText();
    for (const char* part : {"amax 1e+05", "f16 over 0.5%", "f16 flush 0", "E4M3 flush 25%", "E5M2 flush 0.1%"}) {
      QVERIFY2(text.contains(QString::fromLatin1(part)), qPrintable(part + QStringLiteral(" not in ") + text));
    }
  }

  void theTreeColumnShowsTheChosenCountsLargestShareOfEachLayer() {
    ModuleTreeModel tree;
    ModuleTreePanel panel(&tree);
    showTwoLayers(panel);
    QVERIFY(panel.view()->isColumnHidden(ModuleTreeModel::Precision));
    QVERIFY(!panel.view()->isColumnHidden(ModuleTreeModel::GradNorm));
    CaptureStore store;
    // a: activation 1% flushed in E4M3, its gradient 3%; b: its input 2%; a parameter of b, 50%,
    // is not the layer's own tensor.
    store.add(0, SeriesKey{"a", 0, CaptureKind::Activation, 0}, counted(0, 0, 10, 0));
    store.add(0, SeriesKey{"a", 0, CaptureKind::Gradient, 0}, counted(0, 0, 30, 0));
    store.add(0, SeriesKey{"b", 0, CaptureKind::Input, 0}, counted(0, 0, 20, 0));
    store.add(0, SeriesKey{"b.weight", 0, CaptureKind::Param, 0}, counted(0, 0, 500, 0));
    store.add(1, SeriesKey{"a", 0, CaptureKind::Activation, 0}, counted(0, 0, 0, 0));
    panel.setPrecisionColumn(2);  // E4M3 flush, in the gradient norm's place
    QVERIFY(!panel.view()->isColumnHidden(ModuleTreeModel::Precision));
    QVERIFY(panel.view()->isColumnHidden(ModuleTreeModel::GradNorm));
    QCOMPARE(tree.headerData(ModuleTreeModel::Precision, Qt::Horizontal).toString(), QString::fromLatin1(kPrecisionCounts[2].label));
    panel.showValuesAt(store, 0, 0);
    const auto shown = [&](int module) { return tree.data(tree.indexOfModule(module, ModuleTreeModel::Precision)).toString(); };
    QCOMPARE(shown(1), QStringLiteral("3%"));
    QCOMPARE(shown(2), QStringLiteral("2%"));
    QCOMPARE(shown(0), QString());  // the root captured nothing
    // Scrubbed to step 1: only a's activation, none flushed; b has nothing there.
    panel.showValuesAt(store, 1, 0);
    QCOMPARE(shown(1), QStringLiteral("0"));
    QCOMPARE(shown(2), QString());
    // Another count: its label, its numbers.
    panel.setPrecisionColumn(3);
    panel.showValuesAt(store, 0, 0);
    QCOMPARE(tree.headerData(ModuleTreeModel::Precision, Qt::Horizontal).toString(), QString::fromLatin1(kPrecisionCounts[3].label));
    QCOMPARE(shown(1), QStringLiteral("0"));
    panel.setPrecisionColumn(-1);
    QVERIFY(panel.view()->isColumnHidden(ModuleTreeModel::Precision));
    QVERIFY(!panel.view()->isColumnHidden(ModuleTreeModel::GradNorm));
  }

  void aStepTheStoreLeftOutShowsTheTreeTheStepKeptBeforeIt() {
    // Under the memory cap a store keeps every stride-th step (live, the newest off that grid
    // goes as soon as the next step's first capture comes): the tree shows the step kept before
    // the one shown, as the plots do, and says which in its tooltips; never nothing.
    ModuleTreeModel tree;
    ModuleTreePanel panel(&tree);
    showTwoLayers(panel);
    CaptureStore store;
    const auto gradient = [](double norm, std::int64_t e4m3) {
      TensorStats s = counted(0, 0, e4m3, 0);
      s.l2norm = norm;
      return s;
    };
    store.add(0, SeriesKey{"a", 0, CaptureKind::Gradient, 0}, gradient(0.5, 0));
    store.add(0, SeriesKey{"b", 0, CaptureKind::Gradient, 0}, gradient(0.25, 0));
    store.add(2, SeriesKey{"a", 0, CaptureKind::Gradient, 0}, gradient(2, 40));  // step 1: left out
    const auto norm = [&](int module) { return tree.data(tree.indexOfModule(module, ModuleTreeModel::GradNorm)).toString(); };
    const auto tip = [&](int module, int column) {
      return tree.data(tree.indexOfModule(module, column), Qt::ToolTipRole).toString();
    };
    panel.showValuesAt(store, 1, 0);
    QCOMPARE(norm(1), ModuleTreeModel::compactNumber(0.5));
    QCOMPARE(norm(2), ModuleTreeModel::compactNumber(0.25));
    QCOMPARE(tip(1, ModuleTreeModel::GradNorm), QStringLiteral("L2 norm of the output gradient at step 0: 0.5"));
    // At step 2, b captured nothing: its norm of step 0 is not shown as step 2's.
    panel.showValuesAt(store, 2, 0);
    QCOMPARE(norm(1), ModuleTreeModel::compactNumber(2));
    QCOMPARE(norm(2), QString());
    QCOMPARE(tip(1, ModuleTreeModel::GradNorm), QStringLiteral("L2 norm of the output gradient at step 2: 2"));
    panel.setPrecisionColumn(2);  // E4M3 flush
    panel.showValuesAt(store, 3, 0);
    QCOMPARE(tree.data(tree.indexOfModule(1, ModuleTreeModel::Precision)).toString(), QStringLiteral("4%"));
    QVERIFY2(tip(1, ModuleTreeModel::Precision).startsWith(QStringLiteral("4% of its values at step 2: ")),
             qPrintable(tip(1, ModuleTreeModel::Precision)));
    QCOMPARE(panel.view()->isColumnHidden(ModuleTreeModel::GradNorm), true);
  }

  void theSampleModelsCountsReachThePageTheColumnAndTheNumbers() {
    QSettings().setValue(QStringLiteral("view/precisionColumn"), 0);
    auto window = hookscope::test::openWindow(QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_cnn.pt"), kTimeout);
    window->resize(1024, 700);
    ModuleTreeModel* tree = window->treeModel();
    const int fc1 = hookscope::test::moduleIndex(tree, "fc1");
    QVERIFY(fc1 > 0);
    QVERIFY(tree->setData(tree->indexOfModule(fc1, ModuleTreeModel::Act), Qt::Checked, Qt::CheckStateRole));
    QVERIFY(tree->setData(tree->indexOfModule(fc1, ModuleTreeModel::Grad), Qt::Checked, Qt::CheckStateRole));
    hookscope::test::runSteps(*window, 3, kTimeout);
    window->treePanel()->selectModule(QStringLiteral("fc1"));
    // View > Precision over steps, as the user reaches it.
    QAction* show = hookscope::test::findAction(*window, QStringLiteral("Precision over steps"));
    QVERIFY(show);
    QCOMPARE(show->shortcut(), QKeySequence(QStringLiteral("Ctrl+Shift+P")));
    show->trigger();
    QVERIFY(window->plots()->showsPrecision());
    PrecisionPlot* page = window->plots()->precision();
    QTRY_COMPARE_WITH_TIMEOUT(page->pointCount(2), 3, 30000);
    // The page's numbers are the store's: what the engine's kernel counted.
    const auto rows = csvRows(*page);
    const auto series = window->store()->series(window->plots()->selectedSeries());
    QCOMPARE(rows.size(), series.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      QVERIFY(series[i].stats.hasPrecision());
      QCOMPARE(rows[i][0].toLongLong(), series[i].step);
      QCOMPARE(rows[i][3].toDouble(), 100.0 * double(series[i].stats.e4m3Underflow) / double(series[i].stats.numel));
    }
    QVERIFY(window->plots()->histogram()->statsText().contains(QStringLiteral("E4M3 flush")));
    // The column chosen in the settings shows, with the fc1 activation's or gradient's share,
    // and with it every column and each name whole at 1024x700.
    QTreeView* view = window->treeView();
    QVERIFY(!view->isColumnHidden(ModuleTreeModel::Precision));
    QVERIFY(!tree->data(tree->indexOfModule(fc1, ModuleTreeModel::Precision)).toString().isEmpty());
    for (int column = 0; column < ModuleTreeModel::ColumnCount; ++column) {
      const int right = view->header()->sectionViewportPosition(column) + view->header()->sectionSize(column);
      QVERIFY2(right <= view->viewport()->width(),
               qPrintable(QStringLiteral("column %1 ends at %2 of %3").arg(column).arg(right).arg(view->viewport()->width())));
    }
    const QFontMetrics metrics(view->font());
    const int nameNeeds = view->indentation() * 2 + metrics.horizontalAdvance(QStringLiteral("conv2")) + 8;
    QVERIFY2(view->header()->sectionSize(ModuleTreeModel::Name) >= nameNeeds,
             qPrintable(QStringLiteral("names get %1 px").arg(view->header()->sectionSize(ModuleTreeModel::Name))));
    QSettings().remove(QStringLiteral("view/precisionColumn"));
  }

  // anomaly is off until asked for: OK on the untouched thresholds dialog leaves it off, an
  // edited threshold turns it on; Break on lists it.
  void theAnomalyRuleIsOnlyOnceItsThresholdIsEdited() {
    const hookscope::RuleSettings defaults;
    RuleThresholdsDialog untouched(defaults);
    untouched.accept();
    QVERIFY(!untouched.settings().enabled[std::size_t(hookscope::RuleKind::Anomaly)]);
    RuleThresholdsDialog edited(defaults);
    QLineEdit* sigma = nullptr;
    for (auto* edit : edited.findChildren<QLineEdit*>()) {
      if (edit->toolTip().contains(QStringLiteral("robust deviations"))) sigma = edit;
    }
    QVERIFY(sigma);
    QCOMPARE(sigma->text(), QStringLiteral("8"));
    sigma->setText(QStringLiteral("20"));
    edited.accept();
    QVERIFY(edited.settings().enabled[std::size_t(hookscope::RuleKind::Anomaly)]);
    QCOMPARE(edited.settings().anomalySigma, 20.0);
    auto window = hookscope::test::openWindow(QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/growing.pt"), kTimeout);
    QVERIFY(hookscope::test::findAction(*window, QStringLiteral("anomaly")));
  }

  void anArmedFp16OverflowPausesTheWindowWhereALayerFirstOverflows() {
    auto window = hookscope::test::openWindow(QStringLiteral(HOOKSCOPE_FIXTURES_DIR "/growing.pt"), kTimeout);
    ModuleTreeModel* tree = window->treeModel();
    QVERIFY(tree->setData(tree->indexOfModule(0, ModuleTreeModel::Act), Qt::Checked, Qt::CheckStateRole));
    // Run > Break on lists the rule, as the user arms it.
    QAction* arm = hookscope::test::findAction(*window, QStringLiteral("fp16_overflow"));
    QVERIFY(arm && arm->isCheckable() && !arm->isChecked());
    QVERIFY(hookscope::test::findAction(*window, QStringLiteral("fp8_underflow")));
    arm->trigger();
    QVERIFY(window->sessions()->breakRules() & (1u << unsigned(hookscope::RuleKind::Fp16Overflow)));
    hookscope::RunConfig config;
    config.inputSpecs = {"4x8:float32:1:2"};  // fc1 averages them: grow's output passes 65504 at its 5th call
    config.optimizer = hookscope::OptimizerKind::None;
    window->runControls()->setConfig(config);
    window->runControls()->setSteps(8);
    QSignalSpy hit(window.get(), &MainWindow::breakHit);
    window->run();
    QTRY_COMPARE_WITH_TIMEOUT(hit.size(), 1, kTimeout);
    // Where it first shows, in forward order: grow at step 4, not fc2 it spread to.
    QCOMPARE(hit.front().at(0).toString(), QStringLiteral("grow"));
    QCOMPARE(hit.front().at(1).toLongLong(), qint64(4));
    QVERIFY(window->sessions()->state().paused());
    QVERIFY2(window->statusBar()->currentMessage().contains(QStringLiteral("fp16_overflow")),
             qPrintable(window->statusBar()->currentMessage()));
    window->stop();
    QTRY_VERIFY_WITH_TIMEOUT(!window->isRunning(), kTimeout);
  }
};

QTEST_MAIN(PrecisionTest)
#include "PrecisionTest.moc"
