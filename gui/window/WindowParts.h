#pragma once
// The window's parts and commands, for what is built on them (the menus, the run comparer, the
// spike finder) without including MainWindow, which makes them: they act on the parts and ask
// the window through WindowCommands, so no file of the window includes the one that made it.

#include <QString>

#include <QtGlobal>

class DiscardGuard;
class ModuleTreeModel;
class ModuleTreePanel;
class PlotsPanel;
class QMainWindow;
class SessionHost;
class TensorBoardExport;

/// What the window does when asked from a menu, a shortcut or a tool.
class WindowCommands {
public:
  virtual ~WindowCommands() = default;
  virtual void chooseModel() = 0;
  virtual void chooseCapture() = 0;
  /// Waits for a training script at `address` (empty: HookScope's default).
  virtual void attachScript(const QString& address = QString()) = 0;
  virtual void exportAllPlots() = 0;
  virtual void compareCheckpoints(const QString& first = QString(), const QString& second = QString()) = 0;
  virtual void run() = 0;
  virtual void pause() = 0;
  virtual void stepOnce() = 0;
  virtual void stop() = 0;
  virtual void resetWeights() = 0;
  virtual void editRuleThresholds() = 0;
  virtual void editStepTimeLimit() = 0;
  virtual void editOpenTimeLimit() = 0;
  virtual void editOperatorLibraries() = 0;
  /// Selects a layer in the tree and shows `step` in every plot.
  virtual void jumpTo(qint64 step, const QString& module) = 0;
  /// A problem, in a message box (or, in tests, in the window's last message).
  virtual void showMessage(const QString& title, const QString& text) = 0;
};

/// The parts, as MainWindow made them; what is open is `sessions->view()`.
struct WindowParts {
  QMainWindow* frame = nullptr;  ///< menus, toolbar, status bar, and the parent of dialogs
  WindowCommands* commands = nullptr;
  SessionHost* sessions = nullptr;
  PlotsPanel* plots = nullptr;
  ModuleTreePanel* treePanel = nullptr;
  ModuleTreeModel* tree = nullptr;
  DiscardGuard* guard = nullptr;
  TensorBoardExport* tensorBoard = nullptr;
};
