// The window attached to scripts whose loss spikes (tests/python/attach/spike_script.py, a fault
// put in at a known step): the status bar, the tree's Left band column, F9 and Break on anomaly
// name the layer where it started; and one window taken through a run, its export, an attached
// script and a checkpoint. Split from AttachWindowTest so that each runs in a couple of minutes.
#include "AttachTestSupport.h"
#include "panels/PlotsPanel.h"
#include "panels/RunControls.h"
#include "plots/DeviationPlot.h"
#include "plots/GradNormPlot.h"
#include "plots/HeatmapPlot.h"
#include "plots/HistogramPlot.h"
#include "plots/LossPlot.h"
#include "plots/QCustomPlotInclude.h"
#include "session/SessionHost.h"
#include "window/SpikeFinder.h"

#include <QAction>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTreeView>

#include <cmath>

using hookscope::CaptureKind;
using namespace hookscope::test;

class SpikeWindowTest : public QObject {
  Q_OBJECT

private Q_SLOTS:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("HookScopeTest"));
  }

  // A script with nothing ticked whose loss spikes: the status bar said "no layer was out of its
  // own band there", as if layers had been watched; it says none is hooked, and what to do.
  void aSpikeWithNothingHookedSaysNothingIsHooked() {
    QTemporaryDir dir(QStringLiteral("/tmp/hs-gui-XXXXXX"));
    MainWindow window;
    const auto rank = attachFakeScript(window, dir, 4);
    QVERIFY(rank);
    for (int step = 0; step < 40; ++step) {
      const double loss = step == 30 ? 50.0 : 1.0 + 0.01 * (step % 3);
      QVERIFY(rank->send({{"type", "step"}, {"step", step}, {"scalars", {{"loss", loss}}}}));
    }
    QTRY_VERIFY2_WITH_TIMEOUT(window.statusBar()->currentMessage().contains(QStringLiteral("no layer is hooked")),
                              qPrintable(window.statusBar()->currentMessage()), kTimeout);
    QVERIFY(window.statusBar()->currentMessage().startsWith(QStringLiteral("Loss left its band at step 30")));
  }

  // Issue 57: a layer 30x out of its band at step 35 while the loss does not follow. The status
  // bar said nothing and F9 had no first mover; it says so, and F9 goes to the layer.
  void aLayerOutOfItsBandWithNoLossSpikeIsSaid() {
    QTemporaryDir dir(QStringLiteral("/tmp/hs-gui-XXXXXX"));
    MainWindow window;
    auto rank = attachFakeScript(window, dir, 4);
    QVERIFY(rank);
    for (int step = 0; step < 45; ++step) {
      const double top = (step == 35 ? 30.0 : 1.0) * (1 + 0.01 * (step % 3));
      const nlohmann::json capture = fakeCapture(1, "activation", top);
      QVERIFY(rank->send({{"type", "stats"}, {"step", step}, {"captures", {capture}}}));
      QVERIFY(rank->send({{"type", "step"}, {"step", step}, {"scalars", {{"loss", 1.0 + 0.01 * (step % 3)}}}}));
    }
    const QString said = QStringLiteral("No loss spike, but a layer left its band at step 35: activation layer1 (");
    QTRY_VERIFY2_WITH_TIMEOUT(window.statusBar()->currentMessage().startsWith(said),
                              qPrintable(window.statusBar()->currentMessage()), kTimeout);
    QVERIFY(window.statusBar()->toolTip().contains(QStringLiteral("back in it at step 36")));
    QTest::keyClick(&window, Qt::Key_F9);
    QCOMPARE(window.plots()->selectedModule(), std::string("layer1"));
    // Reopened from its export: the same line once "Opened …" has had its seconds, and the tree's
    // Left band column (both were lost: the column hidden after it was shown, the line replaced;
    // issue 57).
    ModuleTreeModel* tree = window.treeModel();
    const auto bandLeft = [&] { return tree->data(tree->indexOfModule(1, ModuleTreeModel::BandLeft)).toString(); };
    QTRY_COMPARE_WITH_TIMEOUT(bandLeft(), QStringLiteral("35"), kTimeout);
    rank.reset();  // the script goes (a file opens only once it has)
    QTRY_VERIFY_WITH_TIMEOUT(!window.view().scriptEnded.isEmpty(), kTimeout);
    // The script's end is said for its seconds, then the line is back (it was replaced for good).
    QTRY_VERIFY2_WITH_TIMEOUT(window.statusBar()->currentMessage().contains(QStringLiteral("Its captures stay")),
                              qPrintable(window.statusBar()->currentMessage()), kTimeout);
    QTRY_VERIFY2_WITH_TIMEOUT(window.statusBar()->currentMessage().startsWith(said),
                              qPrintable(window.statusBar()->currentMessage()), kTimeout);
    QJsonObject manifest;
    exportFromWindow(window, dir.filePath(QStringLiteral("run")), &manifest);
    QSignalSpy opened(&window, &MainWindow::modelOpened);
    window.openCapture(dir.filePath(QStringLiteral("run")));
    QVERIFY(opened.wait(kTimeout));
    QTRY_VERIFY2_WITH_TIMEOUT(window.statusBar()->currentMessage().startsWith(said),
                              qPrintable(window.statusBar()->currentMessage()), kTimeout);
    QTRY_COMPARE_WITH_TIMEOUT(bandLeft(), QStringLiteral("35"), kTimeout);
    auto* view = window.findChild<QTreeView*>();
    QVERIFY(view && !view->isColumnHidden(ModuleTreeModel::BandLeft));
  }

  // Issue 49 in the window: a transformer script whose blocks.2.mlp.fc1 weights are scaled x30 at
  // step 30 (tests/python/attach/spike_script.py), every module hooked once it attached. When the
  // loss leaves its band the status bar names fc1 first, the tree says where each module left its
  // band, F9 goes there, and the deviation view draws every layer at 1024x700 and 1600x1000.
  void theStatusBarNamesTheFirstMoverWhenTheLossSpikes() {
    QTemporaryDir dir(QStringLiteral("/tmp/hs-gui-XXXXXX"));
    MainWindow window;
    QProcess script;
    attachSpikeScript(window, dir, &script, 30, 60);  // every band has its 8 values before step 30
    if (QTest::currentTestFailed()) return;
    ModuleTreeModel* tree = window.treeModel();
    auto* finder = window.findChild<SpikeFinder*>();
    QVERIFY(finder);
    QTRY_VERIFY2_WITH_TIMEOUT(!finder->summary().isEmpty(), qPrintable(window.lastMessage()), kTimeout);
    QVERIFY2(finder->summary().contains(QStringLiteral("Loss left its band at step 30 (+")), qPrintable(finder->summary()));
    QVERIFY2(finder->summary().contains(QStringLiteral("first to move, step 30: activation blocks.2.mlp.fc1")),
             qPrintable(finder->summary()));
    QCOMPARE(window.statusBar()->currentMessage(), finder->summary());
    const auto bandLeft = [&](const std::string& path) {
      return tree->data(tree->indexOfModule(moduleIndex(tree, path), ModuleTreeModel::BandLeft)).toString();
    };
    QCOMPARE(bandLeft("blocks.2.mlp.fc1"), QStringLiteral("30"));
    // A ModuleList, never called, has no band to leave; collapsed, it says fc1 inside it left
    // its band at step 30 (it said "—"), and sorts by it.
    QCOMPARE(bandLeft("blocks"), QStringLiteral("(30)"));
    const QModelIndex blocks = tree->indexOfModule(moduleIndex(tree, "blocks"), ModuleTreeModel::BandLeft);
    QCOMPARE(tree->data(blocks, Qt::ToolTipRole).toString(),
             QStringLiteral("blocks.2.mlp.fc1, inside this module, left its band at step 30"));
    const QAbstractItemModel* shown = window.treeView()->model();
    const QModelIndex top = shown->index(0, 0);
    QCOMPARE(shown->index(0, 0, top).data().toString(), QStringLiteral("blocks"));  // earliest first
    // F9: the layer selected at the step its excursion began.
    QTest::keyClick(&window, Qt::Key_F9);
    QCOMPARE(window.plots()->selectedModule(), std::string("blocks.2.mlp.fc1"));
    QCOMPARE(window.plots()->shownStep(), qint64(30));
    QVERIFY(script.waitForFinished(kTimeout));
    QCOMPARE(script.exitCode(), 0);

    // Every layer against its band, fc1's row hot at step 30 and cool before it, at both sizes.
    window.plots()->showDeviation();
    const QString shots = qEnvironmentVariable("HOOKSCOPE_SCREENSHOTS");
    for (const QSize size : {QSize(1024, 700), QSize(1600, 1000)}) {
      window.resize(size);
      QTRY_VERIFY_WITH_TIMEOUT(!window.redrawPending(), kTimeout);
      window.plots()->refresh();
      DeviationPlot* deviation = window.plots()->deviation();
      QTRY_VERIFY_WITH_TIMEOUT(!deviation->rows().empty(), kTimeout);
      // Half the top row at least; at 1024 px the histogram's statistics make way for it (they are
      // the histogram's tooltip then), at 1600 px they stay.
      HistogramPlot* histogram = window.plots()->histogram();
      QTRY_VERIFY2_WITH_TIMEOUT(2 * deviation->width() + 8 >= histogram->width() + deviation->width(),
                                qPrintable(QStringLiteral("%1 of %2").arg(deviation->width()).arg(histogram->width() + deviation->width())),
                                kTimeout);
      QCOMPARE(histogram->statisticsShown(), size.width() > 1024);
      if (!histogram->statisticsShown()) {
        QVERIFY2(histogram->plot()->toolTip().contains(QStringLiteral("mean")), qPrintable(histogram->plot()->toolTip()));
        window.plots()->showPrecision(false);  // the Values tab: the statistics are back beside it
        QVERIFY(histogram->statisticsShown());
        window.plots()->showDeviation();
      }
      const auto& rows = deviation->rows();
      const int fc1 = int(std::find(rows.begin(), rows.end(), "blocks.2.mlp.fc1") - rows.begin());
      QVERIFY(fc1 < int(rows.size()));
      QVERIFY(deviation->columnCount() >= 50);  // a column a step (from the step the ticks reached the script)
      const int at = deviation->columnOf(30), before = deviation->columnOf(20);
      QVERIFY(at > before && before >= 0);
      QVERIFY2(deviation->cell(fc1, at) >= 6, qPrintable(QString::number(deviation->cell(fc1, at))));
      QVERIFY2(deviation->cell(fc1, before) < 6, qPrintable(QString::number(deviation->cell(fc1, before))));
      // The rows in the model's order: the root first, block 0 before block 2.
      QCOMPARE(rows.front(), std::string());
      QVERIFY(std::find(rows.begin(), rows.end(), "blocks.0") < std::find(rows.begin(), rows.end(), "blocks.2"));
      // The names on the axis never overlap: one every few rows where they do not all fit, and
      // always the selected layer's (F9 selected fc1; it was unnamed between two names).
      const QCustomPlot* plot = deviation->plot();
      const auto gap = [&] {
        QVector<double> ticks = plot->yAxis->tickVector();
        std::sort(ticks.begin(), ticks.end());
        const double rowPixels = std::fabs(plot->yAxis->coordToPixel(1) - plot->yAxis->coordToPixel(0));
        double closest = ticks.isEmpty() ? 0.0 : 1e9;
        for (int i = 1; i < ticks.size(); ++i) closest = std::min(closest, rowPixels * (ticks[i] - ticks[i - 1]));
        return closest;
      };
      const auto named = [&] {
        const QVector<QString> labels = plot->yAxis->tickVectorLabels();
        return QStringList(labels.begin(), labels.end()).join(QLatin1Char(' '));
      };
      QTRY_VERIFY2_WITH_TIMEOUT(plot->yAxis->tickVector().contains(double(fc1)), qPrintable(named()), kTimeout);
      QTRY_VERIFY2_WITH_TIMEOUT(gap() >= QFontMetrics(plot->yAxis->tickLabelFont()).height(),
                                qPrintable(QStringLiteral("%1 labels, %2 px apart")
                                               .arg(plot->yAxis->tickVectorLabels().size())
                                               .arg(gap())),
                                kTimeout);
      // ... and tell the layers apart: blocks 0 and 2 each have an mlp.fc1 (cut at the start both
      // read "…lp.fc1" at 1024 px; shortened between their parts they read "b.0.m.fc1", "b.2.m.fc1").
      const QVector<QString> labels = plot->yAxis->tickVectorLabels();
      QCOMPARE(QSet<QString>(labels.begin(), labels.end()).size(), labels.size());
      // The tree keeps the selected layer's name readable beside the "Left band" column, even
      // with the tree's pane dragged narrow (at 1024 px the name column was squeezed to
      // nothing): it scrolls sideways instead.
      auto* split = window.findChild<QSplitter*>(QStringLiteral("mainSplitter"));
      QVERIFY(split);
      split->setSizes({400, size.width() - 400});
      QTreeView* view = window.treeView();
      QTRY_VERIFY_WITH_TIMEOUT(view->viewport()->width() < 400, kTimeout);
      QVERIFY(view->currentIndex().isValid());
      const auto nameWidth = [&] { return view->visualRect(view->currentIndex().siblingAtColumn(ModuleTreeModel::Name)).width(); };
      QTRY_VERIFY2_WITH_TIMEOUT(nameWidth() >= view->fontMetrics().horizontalAdvance(QStringLiteral("fc1")),
                                qPrintable(QStringLiteral("the name cell is %1 px wide").arg(nameWidth())), kTimeout);
      split->setSizes({size.width() * 2 / 5, size.width() * 3 / 5});
      if (!shots.isEmpty()) {
        window.grab().save(QStringLiteral("%1/deviation-%2x%3.png").arg(shots).arg(size.width()).arg(size.height()));
      }
    }
  }

  // Break on > anomaly pauses an attached script at the step a layer left its band, naming it
  // (issue 49): the transformer's blocks.2.mlp.fc1 weights x30 at step 50 (a band of 30 values
  // by then, however late the ticks reached the script).
  void breakingOnAnomalyStopsAtTheStepALayerLeftItsBand() {
    QTemporaryDir dir(QStringLiteral("/tmp/hs-gui-XXXXXX"));
    MainWindow window;
    QProcess script;
    attachSpikeScript(window, dir, &script, 50, 70);
    if (QTest::currentTestFailed()) return;
    window.setBreakOn(hookscope::RuleKind::Anomaly, true);
    QSignalSpy hit(&window, &MainWindow::breakHit);
    QSignalSpy said(window.statusBar(), &QStatusBar::messageChanged);  // a later message may follow it
    QTRY_COMPARE_WITH_TIMEOUT(hit.size(), 1, kTimeout);
    QCOMPARE(hit.front().at(1).toLongLong(), qint64(50));
    QCOMPARE(hit.front().at(0).toString(), QStringLiteral("blocks.2.mlp.fc1"));
    QTRY_VERIFY_WITH_TIMEOUT(window.sessions()->state().paused(), kTimeout);
    const auto saidPaused = [&] {
      for (const auto& message : said) {
        if (message.front().toString().contains(QStringLiteral("Paused at step 50"))) return true;
      }
      return false;
    };
    QTRY_VERIFY2_WITH_TIMEOUT(saidPaused(), qPrintable(window.statusBar()->currentMessage()), kTimeout);
    // Disarmed and resumed, the script runs to its end.
    window.setBreakOn(hookscope::RuleKind::Anomaly, false);
    window.run();
    QVERIFY(script.waitForFinished(kTimeout));
    QCOMPARE(script.exitCode(), 0);
  }

  // Issue 48: one window through a run, its export opened over it, an attached script and a
  // checkpoint. After each, every view says what is open now: the plots fitted to it, the Run
  // tab (its configuration, or why none), the hint, the colour bar, the actions. Screenshots of
  // each with HOOKSCOPE_SCREENSHOTS.
  void oneWindowThroughARunItsExportAScriptAndACheckpoint_data() { addScreenSizes(); }

  void oneWindowThroughARunItsExportAScriptAndACheckpoint() {
    QFETCH(QSize, size);
    QTemporaryDir dir(QStringLiteral("/tmp/hs-gui-XXXXXX"));
    MainWindow window;
    window.setInteractive(false);
    window.show();
    const QString shots = qEnvironmentVariable("HOOKSCOPE_SCREENSHOTS");
    const auto settle = [&](const char* what) {
      window.resize(size);
      QTRY_VERIFY_WITH_TIMEOUT(!window.redrawPending(), kTimeout);
      if (!shots.isEmpty()) {
        for (QCustomPlot* plot : window.findChildren<QCustomPlot*>()) plot->replot();  // not a queued replot's last frame
        window.grab().save(QStringLiteral("%1/sequence-%2-%3x%4.png").arg(shots, what).arg(size.width()).arg(size.height()));
      }
    };
    const auto enabled = [&](const char* text) {  // the action, not the menu of the same name
      for (QAction* action : window.findChildren<QAction*>()) {
        if (!action->menu() && action->text().remove('&') == QString::fromUtf8(text)) return action->isEnabled();
      }
      return false;
    };
    const auto stepsShown = [&] { return window.plots()->gradNorms()->plot()->xAxis->range(); };
    // What is open is one value the window was sent (SessionView): its kind is what was opened,
    // and every menu enables exactly what that value says the session can do now.
    const auto openIs = [&](SessionKind kind) {
      const SessionView& view = window.view();
      QCOMPARE(int(view.kind), int(kind));
      QCOMPARE(enabled("Run") || enabled("Resume"), view.can.run);
      QCOMPARE(enabled("Pause"), view.can.pause);
      QCOMPARE(enabled("Step"), view.can.step);
      QCOMPARE(enabled("Stop") || enabled("Detach"), view.can.stop);
      QCOMPARE(enabled("Reset weights (reload file)"), view.can.reset);
      QCOMPARE(enabled("Export captures…"), view.can.exportCaptures);
      QCOMPARE(enabled("Open model…"), view.can.open);
      QCOMPARE(enabled("Attach to a training script…"), view.can.attach);
    };
    openIs(SessionKind::Nothing);
    QVERIFY(!enabled("Run") && !enabled("Export captures…") && enabled("Open model…"));
    // 1. A run of the sample, lr 0.02, 20 steps.
    QSignalSpy opened(&window, &MainWindow::modelOpened);
    window.openPath(QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_cnn.pt"));
    QVERIFY(opened.wait(kTimeout));
    ModuleTreeModel* tree = window.treeModel();
    for (int column : {int(ModuleTreeModel::Act), int(ModuleTreeModel::Grad)}) {
      QVERIFY(tree->setData(tree->indexOfModule(0, column), Qt::Checked, Qt::CheckStateRole));
    }
    hookscope::RunConfig config = window.runControls()->config();
    config.lr = 0.02;
    window.runControls()->setConfig(config);
    runSteps(window, 20, kTimeout);
    settle("run");
    openIs(SessionKind::ModelFile);
    if (QTest::currentTestFailed()) return;
    QVERIFY(enabled("Run") && enabled("Reset weights (reload file)"));
    QCOMPARE(window.view().settledStep, qint64(19));
    QCOMPARE(window.plots()->heatmap()->plot()->xAxis->label(), QStringLiteral("step"));
    QVERIFY2(stepsShown().upper >= 19, qPrintable(QString::number(stepsShown().upper)));
    // 2. Its export, opened over it: fitted anew, the run's configuration greyed, nothing to run.
    QJsonObject manifest;
    exportFromWindow(window, dir.filePath(QStringLiteral("run")), &manifest);
    window.openCapture(dir.filePath(QStringLiteral("run")));
    QVERIFY(opened.wait(kTimeout));
    settle("export");
    openIs(SessionKind::Export);
    if (QTest::currentTestFailed()) return;
    QVERIFY(window.reviewOnly());
    QVERIFY(!enabled("Run") && !enabled("Reset weights (reload file)") && enabled("Export captures…"));
    QCOMPARE(window.runControls()->steps(), qint64(20));
    QCOMPARE(window.runControls()->config().lr, 0.02);
    QVERIFY2(stepsShown().lower <= 0 && stepsShown().upper >= 19,
             qPrintable(QStringLiteral("%1..%2").arg(stepsShown().lower).arg(stepsShown().upper)));
    QCOMPARE(window.plots()->heatmap()->scaleLabel(), QStringLiteral("log10(1 + count)"));
    // 3. A script attached: its own loop, no module of the sample named anywhere.
    QProcess script;
    attachSpikeScript(window, dir, &script, 30, 40);
    if (QTest::currentTestFailed()) return;
    QVERIFY(window.runControls()->note().contains(QStringLiteral("is attached")));
    QTRY_VERIFY_WITH_TIMEOUT(enabled("Pause"), kTimeout);
    openIs(SessionKind::Script);
    if (QTest::currentTestFailed()) return;
    QVERIFY(enabled("Detach") && !enabled("Reset weights (reload file)") && !enabled("Open model…"));
    QVERIFY(!window.plots()->histogram()->statsText().contains(QStringLiteral("conv1")));
    QVERIFY(script.waitForFinished(kTimeout));
    // Every plot draws the script's run.
    QTRY_COMPARE_WITH_TIMEOUT(window.plots()->loss()->pointCount(), 40, kTimeout);
    QTRY_COMPARE_WITH_TIMEOUT(window.view().settledStep, qint64(39), kTimeout);  // the settled step is the script's
    QVERIFY2(window.plots()->histogram()->barCount() > 0, qPrintable(window.plots()->histogram()->statsText()));
    settle("attached");
    exportFromWindow(window, dir.filePath(QStringLiteral("attached")), &manifest);  // nothing left unsaved
    // 4. A checkpoint: nothing ran, the root has no tensor of its own.
    const QString checkpoint = dir.filePath(QStringLiteral("weights.pth"));
    QProcess save;
    save.start(QStringLiteral(HOOKSCOPE_PYTHON),
               {QStringLiteral("-c"), QStringLiteral("import torch; m = torch.nn.Sequential(torch.nn.Linear(6, 5), "
                                                     "torch.nn.Linear(5, 3)); torch.save(m.state_dict(), '%1')")
                                          .arg(checkpoint)});
    QVERIFY(save.waitForFinished(kTimeout) && save.exitCode() == 0);
    window.openPath(checkpoint);
    QVERIFY(opened.wait(kTimeout));
    window.selectModule(QString());
    settle("checkpoint");
    openIs(SessionKind::Checkpoint);
    if (QTest::currentTestFailed()) return;
    QVERIFY(window.reviewOnly());
    QVERIFY(!enabled("Run"));
    QVERIFY(window.runControls()->note().contains(QStringLiteral("checkpoint")));
    QTRY_VERIFY2_WITH_TIMEOUT(window.plots()->histogram()->statsText().contains(QStringLiteral("no parameters")),
                              qPrintable(window.plots()->histogram()->statsText()), kTimeout);
    // Its one step over steps: the axis says it is the only one, not a lone "0" tick.
    window.selectModule(QStringLiteral("0"));
    QTRY_COMPARE_WITH_TIMEOUT(window.plots()->heatmap()->plot()->xAxis->label(), QStringLiteral("step (only one)"),
                              kTimeout);
    // Nothing ran, so nothing was timed or learned: no scalars (five *_ms timings and lr were
    // offered, optimizer_ms drawn as a 0 at step 0).
    QVERIFY(window.view().opened().store->scalarNames().empty());
    // 5. A model file after it, no step run yet: nothing of the checkpoint's one step stays.
    window.openPath(QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_cnn.pt"));
    QVERIFY(opened.wait(kTimeout));
    window.selectModule(QStringLiteral("conv1"));
    window.plots()->refresh();
    QCOMPARE(window.plots()->heatmap()->plot()->xAxis->label(), QStringLiteral("step"));
  }
};

QTEST_MAIN(SpikeWindowTest)
#include "SpikeWindowTest.moc"
