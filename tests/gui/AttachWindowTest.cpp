// The window attached to a real training script (tests/python/attach/train_script.py): the
// script's tree appears, a ticked layer is captured, a breakpoint pauses the script, Step
// advances it by exactly one step, Detach lets it train on, and the captures export.
#include "WindowTestSupport.h"
#include "dialogs/AttachDialog.h"
#include "session/SessionHost.h"
#include "window/MainWindow.h"
#include "panels/PlotsPanel.h"
#include "panels/AlertsPanel.h"
#include "plots/DeviationPlot.h"
#include "plots/GradNormPlot.h"
#include "plots/QCustomPlotInclude.h"
#include "plots/HistogramPlot.h"
#include "plots/LossPlot.h"
#include "plots/HeatmapPlot.h"
#include "panels/RunControls.h"
#include "models/ModuleTreeModel.h"
#include "window/SpikeFinder.h"
#include "wire/AttachListener.h"
#include "wire/WireFrame.h"

#include <QFile>
#include <QComboBox>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QAction>
#include <QSignalSpy>
#include <QSplitter>
#include <QTreeView>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QStatusBar>
#include <QTest>

#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

using hookscope::CaptureKind;
using namespace hookscope::test;

namespace {

const int kTimeout = hookscope::test::deadlineMs();

QString jobPort(int test) { return QString::number(20000 + (QCoreApplication::applicationPid() * 2 + test) % 20000); }

/// Starts a Python script (`arguments`: its path, then its own) attached to `address`.
void startScript(QProcess* script, const QString& address, const QStringList& arguments,
                 QProcess::ProcessChannelMode channels = QProcess::ForwardedErrorChannel) {
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert(QStringLiteral("HOOKSCOPE_ADDRESS"), address);
  script->setProcessEnvironment(env);
  script->setProcessChannelMode(channels);
  script->start(QStringLiteral(HOOKSCOPE_PYTHON), arguments);
}

/// Starts tests/python/attach/ddp_script.py (two ranks) attached to `address`.
void startJob(QProcess* job, const QString& address, const QStringList& arguments) {
  startScript(job, address, QStringList{QStringLiteral(HOOKSCOPE_DDP_SCRIPT)} + arguments, QProcess::ForwardedChannels);
}

/// Shows the window (answering no dialogs) waiting for a script at a socket in `dir`; `address`
/// is the one it says, which must be that socket.
void listenIn(MainWindow& window, const QTemporaryDir& dir, QString* address) {
  window.setInteractive(false);
  window.resize(1400, 900);
  window.show();
  QSignalSpy listening(&window, &MainWindow::listening);
  const QString wanted = QStringLiteral("unix:") + dir.filePath(QStringLiteral("hs.sock"));
  window.attachScript(wanted);
  QVERIFY(listening.wait(kTimeout));
  QCOMPARE(listening.first().first().toString(), wanted);
  *address = wanted;
}

/// The transformer of spike_script.py with its fc1 weights x30 at step `at` of `steps` (0.1 s a
/// step: ticks reach it within 2 s even on a busy machine) attached to `window`, waiting at a
/// socket in `dir`, every module hooked for activations and gradients once it attached.
void attachSpikeScript(MainWindow& window, const QTemporaryDir& dir, QProcess* script, int at, int steps) {
  QString address;
  listenIn(window, dir, &address);
  QSignalSpy opened(&window, &MainWindow::modelOpened);
  startScript(script, address,
              {QStringLiteral(HOOKSCOPE_SPIKE_SCRIPT), QStringLiteral("--fault"), QStringLiteral("weights"),
               QStringLiteral("--at"), QString::number(at), QStringLiteral("--steps"), QString::number(steps),
               QStringLiteral("--sleep"), QStringLiteral("0.1")});
  QVERIFY(opened.wait(kTimeout));
  ModuleTreeModel* tree = window.treeModel();
  for (int column : {int(ModuleTreeModel::Act), int(ModuleTreeModel::Grad)}) {
    QVERIFY(tree->setData(tree->indexOfModule(0, column), Qt::Checked, Qt::CheckStateRole));
  }
}

/// Exports the window's captures into `dir` and reads back the manifest.
void exportFromWindow(MainWindow& window, const QString& dir, QJsonObject* manifest) {
  QSignalSpy exported(&window, &MainWindow::exportDone);
  window.exportCapturesTo(dir, false);
  QVERIFY(exported.wait(kTimeout));
  QCOMPARE(exported.first().at(1).toString(), QString());
  QFile file(dir + QStringLiteral("/manifest.json"));
  QVERIFY(file.open(QIODevice::ReadOnly));
  *manifest = QJsonDocument::fromJson(file.readAll()).object();
}

/// A rank of a job played by hand over a socket: its hello, then the frames HookScope sends it.
class FakeRank {
public:
  FakeRank(const QString& address, int rank, int worldSize, int modules) {
    std::string error;
    hookscope::AttachAddress parsed;
    m_fd = hookscope::connectAttachAddress(address.toStdString(), &parsed, &error);
    nlohmann::json list = nlohmann::json::array({{{"path", ""}, {"type", "Net"}}});
    for (int m = 1; m < modules; ++m) list.push_back({{"path", "layer" + std::to_string(m)}, {"type", "Linear"}});
    const nlohmann::json hello = {{"type", "hello"},   {"protocol", hookscope::wire::kProtocolVersion},
                                  {"name", "fake.py"}, {"pid", 4242 + rank},
                                  {"modules", list},   {"dist", {{"rank", rank}, {"world_size", worldSize}, {"job", "fake"}}}};
    if (m_fd >= 0) hookscope::sendAll(m_fd, hookscope::wire::encodeFrame(hookscope::wire::kJsonFrame, hello.dump()));
  }
  ~FakeRank() {
    if (m_fd >= 0) ::close(m_fd);
  }
  bool connected() const { return m_fd >= 0; }
  /// Sends one JSON message, as a script does.
  bool send(const nlohmann::json& message) {
    return hookscope::sendAll(m_fd, hookscope::wire::encodeFrame(hookscope::wire::kJsonFrame, message.dump()));
  }
  /// Reads for `ms` milliseconds; the messages that came, by type.
  std::map<std::string, std::vector<nlohmann::json>> readFor(int ms) {
    std::map<std::string, std::vector<nlohmann::json>> out;
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    char buffer[1 << 16];
    while (std::chrono::steady_clock::now() < end) {
      QCoreApplication::processEvents();
      pollfd p{m_fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const ssize_t n = ::read(m_fd, buffer, sizeof buffer);
      if (n <= 0) break;
      m_reader.feed(buffer, std::size_t(n));
      hookscope::wire::Frame frame;
      while (m_reader.next(&frame)) {
        const auto message = nlohmann::json::parse(frame.payload);
        out[message.value("type", "")].push_back(message);
      }
    }
    return out;
  }

private:
  int m_fd = -1;
  hookscope::wire::FrameReader m_reader;
};

/// `window` listening in `dir` with one fake script of `modules` modules attached; null when it
/// did not attach.
std::unique_ptr<FakeRank> attachFakeScript(MainWindow& window, const QTemporaryDir& dir, int modules) {
  QString address;
  listenIn(window, dir, &address);
  QSignalSpy opened(&window, &MainWindow::modelOpened);
  auto rank = std::make_unique<FakeRank>(address, 0, 1, modules);
  if (!rank->connected() || !opened.wait(kTimeout)) return nullptr;
  return rank;
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
    QCOMPARE(bandLeft("blocks"), QStringLiteral("\u2014"));  // a ModuleList, never called: no band to leave
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
      // The names on the axis never overlap: one every few rows where they do not all fit.
      const QCustomPlot* plot = deviation->plot();
      const auto gap = [&] {
        const auto ticks = plot->yAxis->tickVectorLabels();
        const double rowPixels = std::fabs(plot->yAxis->coordToPixel(1) - plot->yAxis->coordToPixel(0));
        return ticks.isEmpty() ? 0.0 : rowPixels * double(rows.size()) / double(ticks.size());
      };
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
