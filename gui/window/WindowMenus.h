#pragma once
// The window's menus and its toolbar: every action, its shortcut and tooltip, and which are
// enabled for what is open and where its run is.

#include "rules/RuleEvaluator.h"
#include "state/RunState.h"
#include "state/SessionTypes.h"

#include <QList>
#include <QObject>

class MainWindow;
class PlotsPanel;
class PythonSettings;
class QAction;
class QMenu;
class RecentFiles;

class WindowMenus : public QObject {
  Q_OBJECT

public:
  /// Builds them in `window`, whose slots and parts they call.
  explicit WindowMenus(MainWindow* window);

  /// Enables what can be done now, names Run or Resume, Stop or Detach.
  void update(const SessionSummary& summary, const RunState& state);
  /// Checks or unchecks Run > Break on > rule, without acting on it.
  void showBreakOn(hookscope::RuleKind rule, bool on);
  RecentFiles* recentFiles() const { return m_recent; }
  PythonSettings* pythonSettings() const { return m_python; }

Q_SIGNALS:
  /// The user armed or disarmed a rule as a breakpoint.
  void breakOnToggled(hookscope::RuleKind rule, bool on);

private:
  void buildFile();
  void buildRun(quint32 breakRules);
  void buildView();
  void buildToolbar();

  MainWindow* m_window;
  RecentFiles* m_recent = nullptr;
  PythonSettings* m_python = nullptr;
  QList<QAction*> m_breakActions;
  QAction* m_openAction = nullptr;
  QAction* m_attachAction = nullptr;
  QAction* m_exportAction = nullptr;
  QAction* m_tensorBoardAction = nullptr;
  QAction* m_runAction = nullptr;
  QAction* m_pauseAction = nullptr;
  QAction* m_stepAction = nullptr;
  QAction* m_stopAction = nullptr;
  QAction* m_resetAction = nullptr;
};
