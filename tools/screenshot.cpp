// Takes the README's screenshot: the real window mid-run on the sample model.
// Usage (needs a display, e.g. under xvfb-run): hookscope-screenshot OUT.png [STEPS]
#include "EngineAdapter.h"
#include "MainWindow.h"
#include "PlotsPanel.h"
#include "RunControls.h"
#include "models/ModuleTreeModel.h"

#include <QApplication>
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
  const QString out = QString::fromLocal8Bit(argv[1]);
  const int steps = argc > 2 ? atoi(argv[2]) : 60;
  MainWindow window;
  window.setInteractive(false);
  window.resize(1500, 950);
  window.show();
  QEventLoop loop;
  QObject::connect(&window, &MainWindow::modelOpened, &loop, &QEventLoop::quit);
  window.openPath(QStringLiteral(HOOKSCOPE_SAMPLE_MODEL));
  loop.exec();
  ModuleTreeModel* tree = window.treeModel();
  for (std::size_t m = 1; m < tree->modules().size(); ++m) {
    const auto& type = tree->modules()[m].typeName;
    if (type == "Conv2d" || type == "Linear") {
      tree->setData(tree->indexOfModule(int(m), ModuleTreeModel::Act), Qt::Checked, Qt::CheckStateRole);
      tree->setData(tree->indexOfModule(int(m), ModuleTreeModel::Grad), Qt::Checked, Qt::CheckStateRole);
    }
  }
  auto* proxy = qobject_cast<QSortFilterProxyModel*>(window.treeView()->model());
  for (std::size_t m = 0; m < tree->modules().size(); ++m) {
    if (tree->modules()[m].path == "fc1") window.treeView()->setCurrentIndex(proxy->mapFromSource(tree->indexOfModule(int(m))));
  }
  window.runControls()->setSteps(0);
  window.run();
  QTimer poll;
  QObject::connect(&poll, &QTimer::timeout, [&] {
    if (window.stepsSeen() >= steps) {
      poll.stop();
      QTimer::singleShot(300, [&] {  // mid-run: still running while grabbed
        window.grab().save(out);
        window.stop();
        QTimer::singleShot(200, &app, &QApplication::quit);
      });
    }
  });
  poll.start(20);
  return app.exec();
}
