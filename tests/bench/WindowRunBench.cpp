// A live run in the window against the same run by `hookscope-cli capture` (issue 48, item 7):
// the model opened in a window (offscreen, 1400x900, every plot live), every module hooked for
// activations and gradients, STEPS steps timed from Run to the run's end; then the CLI's capture
// of the same model, hooks and steps, timed as a process. Prints figures; asserts nothing.
//
//   hookscope-window-bench MODEL [STEPS [HOOKSCOPE_CLI]]
//   hookscope-window-bench --open EXPORT [CAP_MIB]   (issue 58: a recorded export of thousands of
//                                             modules opened under the window's memory cap, its
//                                             default or CAP_MIB; modules selected, steps shown)
#include "PeakMemory.h"
#include "models/ModuleTreeModel.h"
#include "panels/RunControls.h"
#include "window/MainWindow.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QProcess>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace {

/// Seconds from Run to the run's end in a window, or a negative number when it did not run.
double windowSeconds(const QString& model, int steps) {
  MainWindow window;
  window.setInteractive(false);
  window.resize(1400, 900);
  window.show();
  QSignalSpy opened(&window, &MainWindow::modelOpened);
  window.openPath(model);
  if (!opened.wait(120000)) {
    std::fprintf(stderr, "%s did not open: %s\n", qPrintable(model), qPrintable(window.lastMessage()));
    return -1;
  }
  ModuleTreeModel* tree = window.treeModel();
  for (int column : {int(ModuleTreeModel::Act), int(ModuleTreeModel::Grad)}) {
    tree->setData(tree->indexOfModule(0, column), Qt::Checked, Qt::CheckStateRole);
  }
  window.runControls()->setSteps(steps);
  QElapsedTimer timer;
  timer.start();
  window.run();
  // The run's end, or a run that never began (the window says why: no input, a rejected shape).
  const bool ran = QTest::qWaitFor([&] { return !window.isRunning() && (window.stepsSeen() >= steps || timer.elapsed() > 5000); }, 600000);
  if (!ran || window.stepsSeen() < steps) {
    std::fprintf(stderr, "the window ran %lld of %d steps: %s\n", window.stepsSeen(), steps, qPrintable(window.lastMessage()));
    return -1;
  }
  return double(timer.nsecsElapsed()) / 1e9;
}

/// Seconds the CLI's capture of the same run takes, process start to end.
double cliSeconds(const QString& cli, const QString& model, int steps) {
  QTemporaryDir dir;
  QProcess capture;
  QElapsedTimer timer;
  timer.start();
  capture.start(cli, {QStringLiteral("capture"), model, QStringLiteral("--out"), dir.filePath(QStringLiteral("run")),
                      QStringLiteral("--hook"), QStringLiteral("*"), QStringLiteral("--kinds"),
                      QStringLiteral("activation,gradient"), QStringLiteral("--steps"), QString::number(steps)});
  if (!capture.waitForFinished(600000) || capture.exitCode() != 0) {
    std::fprintf(stderr, "capture failed: %s\n", capture.readAllStandardError().constData());
    return -1;
  }
  return double(timer.nsecsElapsed()) / 1e9;
}

/// Milliseconds `action` and the events it queued take.
template <typename Action>
double millis(Action action) {
  QElapsedTimer timer;
  timer.start();
  action();
  QCoreApplication::processEvents();
  return double(timer.nsecsElapsed()) / 1e6;
}

/// A recorded export opened in the window (1400x900): how long opening takes, then the median
/// and slowest of 10 module selections and of 10 moves of the shown step, and peak memory.
/// capMiB: the window's memory cap set first (0: its default).
int openExport(const QString& dir, int capMiB) {
  MainWindow window;
  window.setInteractive(false);
  window.resize(1400, 900);
  window.show();
  if (capMiB > 0) {
    for (auto* box : window.runControls()->findChildren<QSpinBox*>()) {
      if (box->suffix() == QStringLiteral(" MiB")) box->setValue(capMiB);
    }
  }
  QSignalSpy opened(&window, &MainWindow::modelOpened);
  QElapsedTimer timer;
  timer.start();
  window.openPath(dir);
  if (!opened.wait(600000)) {
    std::fprintf(stderr, "%s did not open: %s\n", qPrintable(dir), qPrintable(window.lastMessage()));
    return 1;
  }
  QCoreApplication::processEvents();
  const double openMs = double(timer.nsecsElapsed()) / 1e6;
  ModuleTreeModel* tree = window.treeModel();
  const std::vector<std::string> paths = tree->paths();
  const int modules = int(paths.size());
  std::vector<double> select, scrub;
  for (int i = 1; i <= 10; ++i) {
    const QString path = QString::fromStdString(paths[std::size_t((i * 7919) % modules)]);
    select.push_back(millis([&] { window.selectModule(path); }));
    scrub.push_back(millis([&] { window.jumpTo(i * 9, path); }));
  }
  std::sort(select.begin(), select.end());
  std::sort(scrub.begin(), scrub.end());
  std::printf("export opened in the window: %d modules, open %.0f ms; a module selected: median %.1f ms, slowest %.1f ms; "
              "a step shown: median %.1f ms, slowest %.1f ms; peak RSS %.0f MiB\n",
              modules, openMs, select[5], select.back(), scrub[5], scrub.back(), peakMiB());
  std::printf("RESULT window_open modules=%d open_ms=%.0f select_ms=%.1f select_max_ms=%.1f step_ms=%.1f step_max_ms=%.1f "
              "peak_rss_mib=%.0f\n", modules, openMs, select[5], select.back(), scrub[5], scrub.back(), peakMiB());
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  app.setOrganizationName(QStringLiteral("HookScopeBench"));  // not the user's settings
  if (argc < 2) {
    std::fprintf(stderr, "usage: hookscope-window-bench MODEL [STEPS [HOOKSCOPE_CLI]] | --open EXPORT [CAP_MIB]\n");
    return 2;
  }
  if (argc > 2 && std::string(argv[1]) == "--open") {
    return openExport(QString::fromLocal8Bit(argv[2]), argc > 3 ? std::atoi(argv[3]) : 0);
  }
  const QString model = QString::fromLocal8Bit(argv[1]);
  const int steps = argc > 2 ? std::atoi(argv[2]) : 1000;
  const QString cli = argc > 3 ? QString::fromLocal8Bit(argv[3]) : qEnvironmentVariable("HOOKSCOPE_CLI", QStringLiteral("hookscope-cli"));
  qputenv("HOOKSCOPE_CLI", cli.toLocal8Bit());  // the window's engine process too: the same program both ways
  const double window = windowSeconds(model, steps);
  const double capture = cliSeconds(cli, model, steps);
  std::printf("window run: %d steps of %s, every module's activations and gradients: %.2f s in the window, "
              "%.2f s with hookscope-cli capture (%.2fx)\n",
              steps, qPrintable(model), window, capture, capture > 0 ? window / capture : 0.0);
  std::printf("RESULT window_run steps=%d window_s=%.3f capture_s=%.3f ratio=%.3f\n", steps, window, capture,
              capture > 0 ? window / capture : 0.0);
  return window > 0 && capture > 0 ? 0 : 1;
}
