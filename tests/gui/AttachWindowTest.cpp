// The window attached to a real training script (tests/python/attach/train_script.py): the
// script's tree appears, a ticked layer is captured, a breakpoint pauses the script, Step
// advances it by exactly one step, Detach lets it train on, and the captures export.
#include "MainWindow.h"
#include "PlotsPanel.h"
#include "plots/LossPlot.h"
#include "models/ModuleTreeModel.h"

#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

namespace {

constexpr int kTimeout = 60000;

int moduleIndex(ModuleTreeModel* tree, const std::string& path) {
  for (std::size_t m = 0; m < tree->modules().size(); ++m) {
    if (tree->modules()[m].path == path) return int(m);
  }
  return -1;
}

} // namespace

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
    window.setInteractive(false);
    window.resize(1400, 900);
    window.show();
    QSignalSpy listening(&window, &MainWindow::listening);
    window.attachScript(QStringLiteral("unix:") + dir.filePath(QStringLiteral("hs.sock")));
    QVERIFY(listening.wait(kTimeout));
    const QString address = listening.first().first().toString();
    QCOMPARE(address, QStringLiteral("unix:") + dir.filePath(QStringLiteral("hs.sock")));

    QProcess script;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("HOOKSCOPE_ADDRESS"), address);
    script.setProcessEnvironment(env);
    script.setProcessChannelMode(QProcess::ForwardedErrorChannel);
    QSignalSpy opened(&window, &MainWindow::modelOpened);
    QSignalSpy breaks(&window, &MainWindow::breakHit);
    script.start(QStringLiteral(HOOKSCOPE_PYTHON),
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

    // Detach: the script's hooks go and it finishes its 40 steps.
    QSignalSpy detached(&window, &MainWindow::scriptDetached);
    window.stop();
    QVERIFY(detached.wait(kTimeout));
    QVERIFY(!window.scriptAttached());
    QVERIFY(script.waitForFinished(kTimeout));
    QCOMPARE(script.exitCode(), 0);
    const QString out = QString::fromUtf8(script.readAllStandardOutput());
    QVERIFY2(out.contains(QStringLiteral("finished 40 steps")), qPrintable(out));

    // What was captured stays, and exports with the script's name in the manifest.
    QSignalSpy exported(&window, &MainWindow::exportDone);
    const QString exportDir = dir.filePath(QStringLiteral("export"));
    window.exportCapturesTo(exportDir, false);
    QVERIFY(exported.wait(kTimeout));
    QCOMPARE(exported.first().at(1).toString(), QString());
    QFile manifest(exportDir + QStringLiteral("/manifest.json"));
    QVERIFY(manifest.open(QIODevice::ReadOnly));
    const QJsonObject json = QJsonDocument::fromJson(manifest.readAll()).object();
    QCOMPARE(json.value(QStringLiteral("source")).toString(), QStringLiteral("script"));
    QCOMPARE(json.value(QStringLiteral("script")).toObject().value(QStringLiteral("name")).toString(),
             QStringLiteral("train_script.py"));
    QVERIFY(QFile::exists(exportDir + QStringLiteral("/alerts.csv")));
  }

  void theRanksOfAJobAreToldToUseTheRecorder() {
    // A rank paused alone would hang the others: until the window takes a whole job, it says so.
    QTemporaryDir dir(QStringLiteral("/tmp/hs-gui-XXXXXX"));
    QVERIFY(dir.isValid());
    MainWindow window;
    window.setInteractive(false);
    QSignalSpy listening(&window, &MainWindow::listening);
    window.attachScript(QStringLiteral("unix:") + dir.filePath(QStringLiteral("hs.sock")));
    QVERIFY(listening.wait(kTimeout));
    QProcess job;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("HOOKSCOPE_ADDRESS"), listening.first().first().toString());
    job.setProcessEnvironment(env);
    job.start(QStringLiteral(HOOKSCOPE_PYTHON),
              {QStringLiteral(HOOKSCOPE_DDP_SCRIPT), QStringLiteral("--steps"), QStringLiteral("3"), QStringLiteral("--port"),
               QString::number(20000 + QCoreApplication::applicationPid() % 20000)});
    QTRY_VERIFY_WITH_TIMEOUT(window.lastRefusal().contains(QStringLiteral("hookscope-cli record")), kTimeout);
    QVERIFY(window.lastRefusal().contains(QStringLiteral("of a torch.distributed job of 2 ranks")));
    QVERIFY(job.waitForFinished(kTimeout));
    QCOMPARE(job.exitCode(), 0);  // the ranks trained on, unhooked
    const QString warnings = QString::fromUtf8(job.readAllStandardError());
    QVERIFY2(warnings.contains(QStringLiteral("refused this script")), qPrintable(warnings));
    QVERIFY(!window.scriptAttached());
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
};

QTEST_MAIN(AttachWindowTest)
#include "AttachWindowTest.moc"
