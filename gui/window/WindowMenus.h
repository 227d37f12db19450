#pragma once
// The window's menus and its toolbar: every action, its shortcut and tooltip, and which are
// enabled for what is open and where its run is.

#include "rules/RuleEvaluator.h"
#include "state/SessionView.h"
#include "window/WindowParts.h"

#include <QList>
#include <QObject>

class PythonSettings;
class QAction;
class QMenu;
class RecentFiles;

class WindowMenus : public QObject {
  Q_OBJECT

public:
  /// Builds them in the window's frame; they call its commands and parts, and follow what is
  /// open (the sessions' view) themselves.
  explicit WindowMenus(const WindowParts& parts);

  /// Enables what can be done now, names Run or Resume, Stop or Detach.
  void update(const SessionView& view);
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

  WindowParts m_parts;
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
