#pragma once
// How the left pane's height is shared between the module tree and the Run/Alerts tabs below it
// (issue 59): the tabs get what the tab shown needs — with a script driving the run (or a run
// reviewed) the Run tab holds a line or two and the memory cap, so the tree gets the rest
// (a 12-layer transformer showed ~12 rows above a mostly empty Run tab at 1024x700); the Alerts
// tab and a model file's whole Run form get what they ask for, at most three fifths — until the
// user drags the splitter, whose split then stays.

#include <QObject>

class QSplitter;
class QTabWidget;

class SideFold : public QObject {
  Q_OBJECT

public:
  /// Shares `splitter`'s height between the tree (first) and `tabs` (second).
  SideFold(QSplitter* splitter, QTabWidget* tabs);
  /// Fits the tabs to what the shown tab needs now (its contents changed).
  void fit();

protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

private:
  QSplitter* m_splitter;
  QTabWidget* m_tabs;
  bool m_users = false;  ///< the user dragged the splitter (setSizes moves it without saying so)
};
