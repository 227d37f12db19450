#pragma once
// What the window's tests share: finding a module and an action, opening a model in a window
// that shows messages instead of dialogs, and running steps to their end.

#include "window/MainWindow.h"
#include "panels/RunControls.h"
#include "models/ModuleTreeModel.h"

#include <QAction>
#include <QSignalSpy>
#include <QTest>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>

namespace hookscope::test {

/// How long a window test waits for an event (a script attaching, a step, a message) before it
/// fails: minutes, as CI's cores may be busy (at load 6 a script's import of PyTorch took 13 s),
/// times HOOKSCOPE_TEST_DEADLINE_SCALE (default 1) for a slower machine still. A passing test
/// never waits this long: each wait ends at its event.
inline int deadlineMs(int baseMs = 300000) {
  const char* text = std::getenv("HOOKSCOPE_TEST_DEADLINE_SCALE");
  const double scale = text && *text ? std::atof(text) : 1.0;
  const double ms = baseMs * (scale > 0 && std::isfinite(scale) ? scale : 1.0);
  return ms >= double(INT_MAX) ? INT_MAX : int(ms);
}

/// The two screens a window test looks at, as a data function's rows ("size": 1024x700, 1600x1000).
inline void addScreenSizes() {
  QTest::addColumn<QSize>("size");
  QTest::newRow("1024x700") << QSize(1024, 700);
  QTest::newRow("1600x1000") << QSize(1600, 1000);
}

/// The index of the module with this dotted path, or -1.
inline int moduleIndex(ModuleTreeModel* tree, const std::string& path) {
  for (std::size_t m = 0; m < tree->modules().size(); ++m) {
    if (tree->modules()[m].path == path) return int(m);
  }
  return -1;
}

/// The window's action with this text (without its & mnemonic), or null.
inline QAction* findAction(QWidget& window, const QString& text) {
  for (QAction* action : window.findChildren<QAction*>()) {
    if (action->text().remove('&') == text) return action;
  }
  return nullptr;
}

/// A window (no modal dialogs) with `model` opened, or one that says why it did not open.
inline std::unique_ptr<MainWindow> openWindow(const QString& model, int timeoutMs) {
  auto window = std::make_unique<MainWindow>();
  window->setInteractive(false);
  window->show();
  QSignalSpy opened(window.get(), &MainWindow::modelOpened);
  window->openPath(model);
  if (!opened.wait(timeoutMs)) qWarning("%s did not open: %s", qPrintable(model), qPrintable(window->lastMessage()));
  return window;
}

/// Runs `steps` steps and waits until the run has ended and one coalesced redraw is done.
inline void runSteps(MainWindow& window, int steps, int timeoutMs) {
  const qint64 before = window.stepsSeen();
  window.runControls()->setSteps(steps);
  window.run();
  QTRY_COMPARE_WITH_TIMEOUT(window.stepsSeen(), before + steps, timeoutMs);
  QTRY_VERIFY_WITH_TIMEOUT(!window.isRunning(), timeoutMs);
  QTRY_VERIFY_WITH_TIMEOUT(!window.redrawPending(), timeoutMs);
}

} // namespace hookscope::test
