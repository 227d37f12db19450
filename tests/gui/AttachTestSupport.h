#pragma once
// What the tests of the window attached to scripts share (AttachWindowTest: scripts and ranks
// attached, hooked, paused, detached; SpikeWindowTest: where a spike started, and one window
// through a whole session): starting scripts and jobs attached to a listening window, a rank
// played by hand, an export read back. Each program defines HOOKSCOPE_PYTHON and the scripts'
// paths.
#include "WindowTestSupport.h"
#include "models/ModuleTreeModel.h"
#include "window/MainWindow.h"
#include "wire/AttachListener.h"
#include "wire/WireFrame.h"

#include <QCoreApplication>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hookscope::test {

inline const int kTimeout = deadlineMs();

inline QString jobPort(int test) { return QString::number(20000 + (QCoreApplication::applicationPid() * 2 + test) % 20000); }

/// Starts a Python script (`arguments`: its path, then its own) attached to `address`.
inline void startScript(QProcess* script, const QString& address, const QStringList& arguments,
                 QProcess::ProcessChannelMode channels = QProcess::ForwardedErrorChannel) {
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert(QStringLiteral("HOOKSCOPE_ADDRESS"), address);
  script->setProcessEnvironment(env);
  script->setProcessChannelMode(channels);
  script->start(QStringLiteral(HOOKSCOPE_PYTHON), arguments);
}

/// Starts tests/python/attach/ddp_script.py (two ranks) attached to `address`.
inline void startJob(QProcess* job, const QString& address, const QStringList& arguments) {
  startScript(job, address, QStringList{QStringLiteral(HOOKSCOPE_DDP_SCRIPT)} + arguments, QProcess::ForwardedChannels);
}

/// Shows the window (answering no dialogs) waiting for a script at a socket in `dir`; `address`
/// is the one it says, which must be that socket.
inline void listenIn(MainWindow& window, const QTemporaryDir& dir, QString* address) {
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
inline void attachSpikeScript(MainWindow& window, const QTemporaryDir& dir, QProcess* script, int at, int steps) {
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
inline void exportFromWindow(MainWindow& window, const QString& dir, QJsonObject* manifest) {
  QSignalSpy exported(&window, &MainWindow::exportDone);
  window.exportCapturesTo(dir, false);
  QVERIFY(exported.wait(kTimeout));
  QCOMPARE(exported.first().at(1).toString(), QString());
  QFile file(dir + QStringLiteral("/manifest.json"));
  QVERIFY(file.open(QIODevice::ReadOnly));
  *manifest = QJsonDocument::fromJson(file.readAll()).object();
}

/// A capture's statistics as a script sends them: three values of `module`'s `kind` ("activation",
/// "gradient"), spread `top` either side of 0.
inline nlohmann::json fakeCapture(int module, const char* kind, double top) {
  return {{"module", module},   {"call", 0},       {"kind", kind}, {"index", 0}, {"shape", {3}},
          {"dtype", "float32"}, {"numel", 3},      {"min", -top},  {"max", top}, {"mean", 0.0},
          {"std", top},         {"l2", top * 1.5}, {"zeros", 0.0}, {"nan", 0},   {"inf", 0},
          {"hist", {1, 1, 1}},  {"lo", -top},      {"hi", top}};
}

/// A rank of a job played by hand over a socket: its hello, then the frames HookScope sends it.
class FakeRank {
public:
  /// A model of `modules` modules: the root and layer1, layer2, … under it.
  FakeRank(const QString& address, int rank, int worldSize, int modules)
      : FakeRank(address, rank, worldSize, layers(modules)) {}
  /// A model of these modules (path, type), parents first, the root ("") first of all.
  FakeRank(const QString& address, int rank, int worldSize, const std::vector<std::pair<std::string, std::string>>& modules) {
    std::string error;
    hookscope::AttachAddress parsed;
    m_fd = hookscope::connectAttachAddress(address.toStdString(), &parsed, &error);
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [path, type] : modules) list.push_back({{"path", path}, {"type", type}});
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
  /// Reads what HookScope has sent so far and drops it: a long run played by hand must, or the
  /// socket fills and both sides wait on each other.
  void drain() {
    char buffer[1 << 16];
    pollfd p{m_fd, POLLIN, 0};
    while (::poll(&p, 1, 0) > 0 && ::read(m_fd, buffer, sizeof buffer) > 0) {
    }
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
  static std::vector<std::pair<std::string, std::string>> layers(int modules) {
    std::vector<std::pair<std::string, std::string>> list{{"", "Net"}};
    for (int m = 1; m < modules; ++m) list.emplace_back("layer" + std::to_string(m), "Linear");
    return list;
  }

  int m_fd = -1;
  hookscope::wire::FrameReader m_reader;
};

/// `window` listening in `dir` with one fake script of `modules` (a count, or paths and types)
/// attached; null when it did not attach.
template <typename Modules>
std::unique_ptr<FakeRank> attachFakeScript(MainWindow& window, const QTemporaryDir& dir, const Modules& modules) {
  QString address;
  listenIn(window, dir, &address);
  QSignalSpy opened(&window, &MainWindow::modelOpened);
  auto rank = std::make_unique<FakeRank>(address, 0, 1, modules);
  if (!rank->connected() || !opened.wait(kTimeout)) return nullptr;
  return rank;
}

} // namespace hookscope::test
