// The window attached to a real training script (tests/python/attach/train_script.py): the
// script's tree appears, a ticked layer is captured, a breakpoint pauses the script, Step
// advances it by exactly one step, Detach lets it train on, and the captures export.
#include "AttachTestSupport.h"
#include "dialogs/AttachDialog.h"
#include "panels/AlertsPanel.h"
#include "panels/PlotsPanel.h"
#include "panels/RunControls.h"
#include "plots/GradNormPlot.h"
#include "plots/HistogramPlot.h"
#include "plots/LossPlot.h"

#include <QAction>
#include <QComboBox>
#include <QJsonArray>
#include <QStandardPaths>

#include <chrono>
#include <cmath>

using hookscope::CaptureKind;
using namespace hookscope::test;

class AttachWindowTest : public QObject {
  Q_OBJECT

private Q_SLOTS:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("HookScopeTest"));
  }

  void aScriptIsHookedPausedAtABreakpointSteppedAndDetached() {
    QTemporaryDir dir(QStringLiteral("/tmp/hs-gui-XXXXXX"));  // a Unix socket path must be short
    QVERIFY(dir.isValid());
    MainWindow window;
    QString address;
    listenIn(window, dir, &address);
    QVERIFY(!address.isEmpty());

    QProcess script;
    QSignalSpy opened(&window, &MainWindow::modelOpened);
    QSignalSpy breaks(&window, &MainWindow::breakHit);
    startScript(&script, address,
                {QStringLiteral(HOOKSCOPE_ATTACH_SCRIPT), QStringLiteral("--steps"), QStringLiteral("40"),
                 QStringLiteral("--nan-at"), QStringLiteral("6"), QStringLiteral("--workers"), QStringLiteral("0"),
                 QStringLiteral("--sleep"), QStringLiteral("0.05")});
    QVERIFY(opened.wait(kTimeout));
    QVERIFY(window.scriptAttached());
    ModuleTreeModel* tree = window.treeModel();
    QCOMPARE(int(tree->modules().size()), 8);  // root, inp, act, shared, pair, pair.a, pair.b, head
    QCOMPARE(tree->modules()[std::size_t(moduleIndex(tree, "pair.a"))].typeName, std::string("Linear"));
    QCOMPARE(tree->modules()[std::size_t(moduleIndex(tree, "inp"))].totalParams, 8 * 16 + 16);

    // Tick one layer: from the script's next step on, only it is captured.
    QVERIFY(tree->setData(tree->indexOfModule(moduleIndex(tree, "inp"), ModuleTreeModel::Act), Qt::Checked,
                          Qt::CheckStateRole));
    QSignalSpy detachedEarly(&window, &MainWindow::scriptDetached);
    QTRY_VERIFY2_WITH_TIMEOUT(!window.store()->seriesKeys().empty(),
                              qPrintable(QStringLiteral("steps seen %1, %2").arg(window.stepsSeen()).arg(window.lastMessage())),
                              kTimeout);

    // Output shapes from the script's first step: one per tensor, "…" for a tuple's others.
    auto shapeOf = [&](const std::string& path) {
      return tree->data(tree->indexOfModule(moduleIndex(tree, path), ModuleTreeModel::OutputShape)).toString();
    };
    QTRY_COMPARE_WITH_TIMEOUT(shapeOf("inp"), QStringLiteral("16x16"), kTimeout);
    QCOMPARE(shapeOf("pair"), QStringLiteral("16x16 …"));
    QCOMPARE(shapeOf("head"), QStringLiteral("16x4"));

    // non_finite is armed by default: the NaN input at step 6 pauses the script there.
    QVERIFY(breaks.wait(kTimeout));
    QCOMPARE(breaks.first().at(1).toLongLong(), 6);
    QCOMPARE(breaks.first().at(0).toString(), QStringLiteral("inp"));
    QTRY_VERIFY_WITH_TIMEOUT(window.isRunning(), kTimeout);
    const qint64 seen = window.stepsSeen();
    QCOMPARE(seen, 7);
    QTest::qWait(1500);
    QCOMPARE(window.stepsSeen(), seen);  // the script waits inside hs.step()

    window.stepOnce();
    QTRY_COMPARE_WITH_TIMEOUT(window.stepsSeen(), seen + 1, kTimeout);
    QTest::qWait(1500);
    QCOMPARE(window.stepsSeen(), seen + 1);  // exactly one step

    // The script's own scalars (hs.step(loss, batch=...)) and its learning rate can be plotted.
    window.plots()->refresh();
    LossPlot* scalars = window.plots()->loss();
    QCOMPARE(scalars->pointCount(), int(seen + 1));
    scalars->setScalar(QStringLiteral("batch"));
    window.plots()->refresh();
    QCOMPARE(scalars->pointCount(), int(seen + 1));
    QVERIFY(scalars->toCsv().startsWith(QStringLiteral("step,batch\n0,0\n1,1\n")));

    for (const auto& key : window.store()->seriesKeys()) {
      QCOMPARE(key.module, std::string("inp"));
      QCOMPARE(key.kind, hookscope::CaptureKind::Activation);
    }

    // Detach: the script's hooks go and it finishes its 40 steps; the Run tab no longer says
    // it is attached, and no dialog waits for the user.
    QVERIFY(window.runControls()->note().contains(QStringLiteral("is attached")));
    QSignalSpy detached(&window, &MainWindow::scriptDetached);
    QSignalSpy messages(&window, &MainWindow::messageShown);
    window.stop();
    QVERIFY(detached.wait(kTimeout));
    QVERIFY(!window.scriptAttached());
    QVERIFY2(window.runControls()->note().contains(QStringLiteral("no longer attached")),
             qPrintable(window.runControls()->note()));
    QCOMPARE(messages.size(), 0);
    QVERIFY(script.waitForFinished(kTimeout));
    QCOMPARE(script.exitCode(), 0);
    const QString out = QString::fromUtf8(script.readAllStandardOutput());
    QVERIFY2(out.contains(QStringLiteral("finished 40 steps")), qPrintable(out));

    // What was captured stays, and exports with the script's name in the manifest.
    const QString exportDir = dir.filePath(QStringLiteral("export"));
    QJsonObject json;
    exportFromWindow(window, exportDir, &json);
    if (QTest::currentTestFailed()) return;
    QCOMPARE(json.value(QStringLiteral("source")).toString(), QStringLiteral("script"));
    QCOMPARE(json.value(QStringLiteral("script")).toObject().value(QStringLiteral("name")).toString(),
             QStringLiteral("train_script.py"));
    QVERIFY(QFile::exists(exportDir + QStringLiteral("/alerts.csv")));
  }

  void theRanksOfAJobAttachAsOneBreakStepAndDetachTogether() {
    // Both ranks of a DDP job (gloo) attach to one window: one tree, a rank chooser, a break
    // on rank 1's NaN that holds both ranks at that step, Step that moves both by one, Detach.
    QTemporaryDir dir(QStringLiteral("/tmp/hs-gui-XXXXXX"));
    QVERIFY(dir.isValid());
    MainWindow window;
    QString address;
    listenIn(window, dir, &address);
    QVERIFY(!address.isEmpty());
    QSignalSpy opened(&window, &MainWindow::modelOpened);
    QSignalSpy breaks(&window, &MainWindow::breakHit);
    QProcess job;
    startJob(&job, address,
             {QStringLiteral("--steps"), QStringLiteral("60"), QStringLiteral("--nan"), QStringLiteral("1:12"),
              QStringLiteral("--sleep"), QStringLiteral("0.1"), QStringLiteral("--port"), jobPort(0)});
    QVERIFY(opened.wait(kTimeout));
    QTRY_COMPARE_WITH_TIMEOUT(window.ranksAttached().size(), 2, kTimeout);
    QCOMPARE(int(window.view().kind), int(SessionKind::Job));  // every rank of one job, one open thing
    QVERIFY(window.view().can.stop && !window.view().can.reset && !window.view().can.open);
    ModuleTreeModel* tree = window.treeModel();
    // The model's own paths: DDP's "module." is not part of them.
    QVERIFY(moduleIndex(tree, "body.0.0") > 0);
    QVERIFY(moduleIndex(tree, "module") < 0);
    for (const char* path : {"inp", "head"}) {
      for (int column : {ModuleTreeModel::Act, ModuleTreeModel::Grad}) {
        QVERIFY(tree->setData(tree->indexOfModule(moduleIndex(tree, path), column), Qt::Checked, Qt::CheckStateRole));
      }
    }
    // An intervention reaches every rank: with act's output zeroed, head sees the same input on
    // both ranks (their parameters are equal), whatever data each rank has.
    window.setOutputIntervention(moduleIndex(tree, "act"), {hookscope::OutputIntervention::Zero});

    // non_finite is armed by default: rank 1's NaN input at step 12 holds every rank at step 12.
    // (It may come while the lines above run: waiting for a new emission would miss it.)
    QTRY_COMPARE_WITH_TIMEOUT(breaks.size(), 1, kTimeout);
    QCOMPARE(breaks.first().at(1).toLongLong(), 12);
    QCOMPARE(breaks.first().at(0).toString(), QStringLiteral("inp"));
    QCOMPARE(window.plots()->rank(), 1);  // the break shows the rank where it fired
    auto steps = [&](int rank) { return int(window.store()->scalars("loss", rank).size()); };
    QTRY_COMPARE_WITH_TIMEOUT(steps(0), 13, kTimeout);
    QTRY_COMPARE_WITH_TIMEOUT(steps(1), 13, kTimeout);
    QTest::qWait(1500);
    QCOMPARE(steps(0), 13);  // both wait inside hs.step() of step 12
    QCOMPARE(steps(1), 13);
    QVERIFY(window.alerts()->count() > 0);

    window.stepOnce();
    QTRY_COMPARE_WITH_TIMEOUT(steps(0), 14, kTimeout);
    QTRY_COMPARE_WITH_TIMEOUT(steps(1), 14, kTimeout);
    QTest::qWait(1500);
    QCOMPARE(steps(0), 14);  // exactly one step, on every rank
    QCOMPARE(steps(1), 14);

    // At step 10 (the intervention long in force, no NaN yet) the ranks' inputs differ and
    // head's outputs are equal.
    auto at10 = [&](const char* module, int rank) {
      hookscope::SeriesPoint point;
      const bool found = window.store()->pointAt({module, 0, CaptureKind::Activation, 0, rank}, 10, &point);
      return found && point.step == 10 ? point.stats.mean : std::nan("");
    };
    QVERIFY(at10("inp", 0) != at10("inp", 1));
    QVERIFY(std::isfinite(at10("head", 0)));
    QCOMPARE(at10("head", 0), at10("head", 1));

    // The rank chooser: all ranks, or one. All ranks of a small job: a line per rank and layer.
    PlotsPanel* plots = window.plots();
    plots->refresh();
    QVERIFY(plots->rankChooser()->isVisibleTo(&window));
    QCOMPARE(plots->rankChooser()->count(), 3);  // All ranks, Rank 0, Rank 1
    plots->setRank(-1);
    QCOMPARE(plots->gradNorms()->rankMode(), GradNormPlot::RankMode::LinePerRank);
    QCOMPARE(plots->gradNorms()->lineCount(), 4);  // inp and head, two ranks each
    QCOMPARE(plots->loss()->lineCount(), 2);
    window.selectModule(QStringLiteral("inp"));
    plots->refresh();
    QCOMPARE(plots->histogram()->outlineCount(), 1);  // rank 1's outline over rank 0's bars
    plots->setRank(0);
    QCOMPARE(plots->gradNorms()->lineCount(), 2);
    QCOMPARE(plots->loss()->lineCount(), 1);
    QCOMPARE(plots->loss()->pointCount(), 14);

    // Detach: every rank's hooks go and the job trains on to its end.
    QSignalSpy detached(&window, &MainWindow::scriptDetached);
    window.stop();
    QVERIFY(detached.wait(kTimeout));
    QVERIFY(!window.scriptAttached());
    QVERIFY(job.waitForFinished(kTimeout));
    QCOMPARE(job.exitCode(), 0);

    // One export with both ranks.
    const QString exportDir = dir.filePath(QStringLiteral("export"));
    QJsonObject json;
    exportFromWindow(window, exportDir, &json);
    if (QTest::currentTestFailed()) return;
    QCOMPARE(json.value(QStringLiteral("world_size")).toInt(), 2);
    QCOMPARE(json.value(QStringLiteral("ranks")).toArray().size(), 2);
    QFile alerts(exportDir + QStringLiteral("/alerts.csv"));
    QVERIFY(alerts.open(QIODevice::ReadOnly));
    QVERIFY(QString::fromUtf8(alerts.readAll()).contains(QStringLiteral("\n12,1,inp,")));
  }

  void aRankThatDiesIsShownAndEveryRanksCapturesStay() {
    QTemporaryDir dir(QStringLiteral("/tmp/hs-gui-XXXXXX"));
    QVERIFY(dir.isValid());
    MainWindow window;
    QString address;
    listenIn(window, dir, &address);
    QVERIFY(!address.isEmpty());
    QSignalSpy detached(&window, &MainWindow::scriptDetached);
    QProcess job;
    startJob(&job, address,
             {QStringLiteral("--steps"), QStringLiteral("8"), QStringLiteral("--die"), QStringLiteral("1:3"),
              QStringLiteral("--collective-timeout"), QStringLiteral("5"), QStringLiteral("--port"), jobPort(1)});
    QTRY_VERIFY_WITH_TIMEOUT(window.ranksEnded().contains(1), kTimeout);
    QVERIFY2(window.ranksEnded().value(1).contains(QStringLiteral("without closing")),
             qPrintable(window.ranksEnded().value(1)));
    window.plots()->refresh();
    QVERIFY(window.plots()->rankChooser()->itemText(2).contains(QStringLiteral("lost")));
    // torch.multiprocessing then ends rank 0 too (it would wait in its all-reduce): the job is over.
    // That can come before the lines above are done, and wait() would wait for a second one.
    QTRY_COMPARE_WITH_TIMEOUT(detached.size(), 1, kTimeout);
    QVERIFY(window.ranksEnded().contains(0));
    QVERIFY(!window.scriptAttached());
    QCOMPARE(int(window.store()->scalars("loss", 1).size()), 3);  // steps 0-2 of the rank that died
    QVERIFY(window.store()->scalars("loss", 0).size() >= 3);     // and rank 0's, all kept
    QVERIFY(job.waitForFinished(kTimeout));
  }

  // One tick on the root of a 1,000-module model is one `hooks` message to each rank, naming
  // every module (it was one message per module changed, each listing every hooked module).
  void tickingTheRootOfAThousandModulesSendsOneHooksMessagePerRank() {
    QTemporaryDir dir(QStringLiteral("/tmp/hs-gui-XXXXXX"));
    MainWindow window;
    QString address;
    listenIn(window, dir, &address);
    QSignalSpy opened(&window, &MainWindow::modelOpened);
    FakeRank rank0(address, 0, 2, 1000), rank1(address, 1, 2, 1000);
    QVERIFY(rank0.connected() && rank1.connected());
    QVERIFY(opened.wait(kTimeout));
    QTRY_COMPARE_WITH_TIMEOUT(window.ranksAttached().size(), 2, kTimeout);
    QCOMPARE(window.treeModel()->modules().size(), std::size_t(1000));
    QCOMPARE(rank0.readFor(300)["welcome"].size(), std::size_t(1));
    QCOMPARE(rank1.readFor(300)["welcome"].size(), std::size_t(1));
    ModuleTreeModel* tree = window.treeModel();
    QVERIFY(tree->setData(tree->indexOfModule(0, ModuleTreeModel::Act), Qt::Checked, Qt::CheckStateRole));
    for (FakeRank* rank : {&rank0, &rank1}) {
      const auto got = rank->readFor(1500);
      const auto hooks = got.find("hooks");
      QVERIFY(hooks != got.end());
      QCOMPARE(hooks->second.size(), std::size_t(1));
      QCOMPARE(hooks->second.front()["hooks"].size(), std::size_t(1000));
    }
  }

  // `hookscope --attach --hook 'layer1*'`: the README's quick start hooked nothing, and a run
  // ended with a loss curve alone. The matching modules are ticked (Act and Grad) from the first
  // step, and the script is told so in its welcome.
  void attachWithHookPatternsTicksTheMatchingModules() {
    QTemporaryDir dir(QStringLiteral("/tmp/hs-gui-XXXXXX"));
    MainWindow window;
    window.setAttachHooks({QStringLiteral("layer1*"), QStringLiteral("layer3")});
    const auto rank = attachFakeScript(window, dir, 12);
    QVERIFY(rank);
    ModuleTreeModel* tree = window.treeModel();
    const auto ticked = [tree](int module, int column) {
      return tree->data(tree->indexOfModule(module, column), Qt::CheckStateRole).toInt() == Qt::Checked;
    };
    for (int m = 1; m < 12; ++m) {
      const bool wanted = m == 1 || m == 10 || m == 11 || m == 3;  // layer1, layer10, layer11, layer3
      QCOMPARE(ticked(m, ModuleTreeModel::Act), wanted);
      QCOMPARE(ticked(m, ModuleTreeModel::Grad), wanted);
      QVERIFY(!ticked(m, ModuleTreeModel::In));
    }
    std::vector<nlohmann::json> welcome;
    for (const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeout);
         welcome.empty() && std::chrono::steady_clock::now() < until;) {
      auto got = rank->readFor(200);
      if (got.count("welcome")) welcome = got["welcome"];
    }
    QVERIFY2(!welcome.empty(), "no welcome");
    QCOMPARE(welcome.front()["hooks"].size(), std::size_t(4));
  }

  // Stop reads Detach while a script is attached, and Stop again once it left (after a Detach,
  // opening a file said "Stop (Shift+F5) cancels" beside a button that read Detach).
  void stopReadsDetachOnlyWhileAScriptIsAttached() {
    QTemporaryDir dir(QStringLiteral("/tmp/hs-gui-XXXXXX"));
    MainWindow window;
    const auto stopText = [&window] {
      for (QAction* action : window.findChildren<QAction*>()) {
        if (action->text() == QStringLiteral("De&tach") || action->text() == QStringLiteral("S&top")) {
          return action->text();
        }
      }
      return QString();
    };
    auto rank = attachFakeScript(window, dir, 3);
    QVERIFY(rank);
    QTRY_COMPARE_WITH_TIMEOUT(stopText(), QStringLiteral("De&tach"), kTimeout);
    rank.reset();  // the script goes away
    QTRY_VERIFY_WITH_TIMEOUT(!window.view().scriptEnded.isEmpty(), kTimeout);
    QTRY_COMPARE_WITH_TIMEOUT(stopText(), QStringLiteral("S&top"), kTimeout);
  }

  // Waiting stopped (a file opened instead of a script): the address is closed, so a script
  // started then is told at once that no one listens (with what to do), not left waiting for a
  // welcome until it trains unhooked.
  void aScriptAfterWaitingStoppedFindsNoListener() {
    QTemporaryDir dir(QStringLiteral("/tmp/hs-gui-XXXXXX"));
    MainWindow window;
    QString address;
    listenIn(window, dir, &address);
    if (QTest::currentTestFailed()) return;
    QSignalSpy opened(&window, &MainWindow::modelOpened);
    window.openPath(QStringLiteral(HOOKSCOPE_MODELS_DIR "/small_cnn.pt"));
    QVERIFY(opened.wait(kTimeout));
    const auto connects = [&] {
      std::string error;
      hookscope::AttachAddress parsed;
      const int fd = hookscope::connectAttachAddress(address.toStdString(), &parsed, &error);
      if (fd >= 0) ::close(fd);
      return fd >= 0;
    };
    QTRY_VERIFY_WITH_TIMEOUT(!connects(), kTimeout);
  }

  void noSecondListenerOnATakenAddress() {
    QTemporaryDir dir(QStringLiteral("/tmp/hs-gui-XXXXXX"));
    const QString address = QStringLiteral("unix:") + dir.filePath(QStringLiteral("hs.sock"));
    MainWindow first;
    first.setInteractive(false);
    QSignalSpy listening(&first, &MainWindow::listening);
    first.attachScript(address);
    QVERIFY(listening.wait(kTimeout));
    MainWindow second;
    second.setInteractive(false);
    QSignalSpy message(&second, &MainWindow::messageShown);
    second.attachScript(address);
    QVERIFY(message.wait(kTimeout));
    QVERIFY2(second.lastMessage().contains(QStringLiteral("already listens")), qPrintable(second.lastMessage()));
  }

  void fileAttachListensWhereTheWindowListenedBeforeWithItsToken() {
    MainWindow window;  // as `hookscope --attach --address tcp://127.0.0.1:0`: a port and a token made
    window.setInteractive(false);
    QSignalSpy listening(&window, &MainWindow::listening);
    window.attachScript(QStringLiteral("tcp://127.0.0.1:0"));
    QVERIFY(listening.wait(kTimeout));
    const QString first = listening.takeFirst().at(0).toString();
    QVERIFY2(first.contains(QStringLiteral("token=")), qPrintable(first));
    Q_EMIT window.attachDialog()->cancelled();  // Stop waiting
    QVERIFY(window.listeningAddress().isEmpty());
    window.attachScript();  // File > Attach: the HOOKSCOPE_ADDRESS exported for it still connects
    QVERIFY(listening.wait(kTimeout));
    QCOMPARE(listening.takeFirst().at(0).toString(), first);
  }
};

QTEST_MAIN(AttachWindowTest)
#include "AttachWindowTest.moc"
