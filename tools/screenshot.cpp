// Takes the README's screenshots: the real window mid-run on the sample model, or attached
// to a running training script.
// Usage (needs a display, e.g. under xvfb-run):
//   hookscope-screenshot OUT.png [STEPS]
//   hookscope-screenshot --attach PYTHON SCRIPT OUT.png [STEPS]
#include "session/SessionHost.h"
#include "window/MainWindow.h"
#include "panels/PlotsPanel.h"
#include "panels/RunControls.h"
#include "models/ModuleTreeModel.h"

#include <QApplication>
#include <QDir>
#include <QProcess>
#include <QEventLoop>
#include <QSortFilterProxyModel>
#include <QTimer>
#include <QTreeView>

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("HookScopeScreenshot"));
  if (argc < 2) {
    fprintf(stderr, "usage: hookscope-screenshot OUT.png [STEPS]\n");
    return 2;
  }
  const bool attach = QString::fromLocal8Bit(argv[1]) == QStringLiteral("--attach");
  if (attach && argc < 5) {
    fprintf(stderr, "usage: hookscope-screenshot --attach PYTHON SCRIPT OUT.png [STEPS]\n");
    return 2;
  }
  const int first = attach ? 4 : 1;
  const QString out = QString::fromLocal8Bit(argv[first]);
  const int steps = argc > first + 1 ? atoi(argv[first + 1]) : 60;
  const QSize size = qEnvironmentVariableIsSet("HOOKSCOPE_SCREENSHOT_SIZE")
                         ? QSize(qEnvironmentVariable("HOOKSCOPE_SCREENSHOT_SIZE").section('x', 0, 0).toInt(),
                                 qEnvironmentVariable("HOOKSCOPE_SCREENSHOT_SIZE").section('x', 1, 1).toInt())
                         : QSize(1500, 950);
  MainWindow window;
  window.setInteractive(false);
  window.resize(size);
  window.show();
  QEventLoop loop;
  QObject::connect(&window, &MainWindow::modelOpened, &loop, &QEventLoop::quit);
  QProcess script;
  if (attach) {
    // The script of the attach tests, attached through the window's own listener.
    const QString address = QStringLiteral("unix:") + QDir::temp().filePath(QStringLiteral("hookscope-shot-%1.sock").arg(QCoreApplication::applicationPid()));
    QObject::connect(&window, &MainWindow::listening, [&](const QString& listeningAt) {
      QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
      env.insert(QStringLiteral("HOOKSCOPE_ADDRESS"), listeningAt);
      script.setProcessEnvironment(env);
      script.setProcessChannelMode(QProcess::ForwardedChannels);
      script.start(QString::fromLocal8Bit(argv[2]), {QString::fromLocal8Bit(argv[3]), QStringLiteral("--steps"),
                                                    QStringLiteral("100000"), QStringLiteral("--workers"), QStringLiteral("2")});
    });
    window.attachScript(address);
  } else {
    window.openPath(QStringLiteral(HOOKSCOPE_SAMPLE_MODEL));
  }
  loop.exec();
  ModuleTreeModel* tree = window.treeModel();
  for (std::size_t m = 1; m < tree->modules().size(); ++m) {
    const auto& type = tree->modules()[m].typeName;
    if (type == "Conv2d" || type == "Linear" || type == "ReLU") {
      tree->setData(tree->indexOfModule(int(m), ModuleTreeModel::Act), Qt::Checked, Qt::CheckStateRole);
      tree->setData(tree->indexOfModule(int(m), ModuleTreeModel::Grad), Qt::Checked, Qt::CheckStateRole);
    }
  }
  auto* proxy = qobject_cast<QSortFilterProxyModel*>(window.treeView()->model());
  for (std::size_t m = 0; m < tree->modules().size(); ++m) {
    if (tree->modules()[m].path == (attach ? "shared" : "fc1")) window.treeView()->setCurrentIndex(proxy->mapFromSource(tree->indexOfModule(int(m))));
  }
  if (!attach) {
    window.runControls()->setSteps(0);
    window.run();
  }
  QTimer poll;
  QObject::connect(&poll, &QTimer::timeout, [&] {
    if (window.stepsSeen() >= steps) {
      poll.stop();
      QTimer::singleShot(300, [&] {  // mid-run: still running while grabbed
        window.grab().save(out);
        window.stop();  // a model run stops; an attached script is detached and trains on
        if (attach) script.kill();
        QTimer::singleShot(500, &app, &QApplication::quit);
      });
    }
  });
  poll.start(20);
  return app.exec();
}
