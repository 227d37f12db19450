#pragma once
// How the window's space is shared. PaneSplit: its width between the tree's pane and the plots
// (issue 48, item 5):
// the tree gets what its columns need but never more than half, whatever size the window takes,
// until the user drags the splitter (then their split stays, and is saved). At 1024 px the plots
// had 477 px of 1024 and the over-steps maps 40-50 px; where the tree's columns do not all fit,
// its names keep their width and it scrolls sideways (ModuleTreePanel).

#include <QObject>

#include <functional>

class QSplitter;
class QTabWidget;

class PaneSplit : public QObject {
  Q_OBJECT

public:
  /// Shares `splitter`'s width (tree first); `needed` gives the width the tree's columns need.
  PaneSplit(QSplitter* splitter, std::function<int()> needed);
  /// The user's split (restored from the settings): kept as it is.
  void keepUsers() { m_users = true; }

protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

private:
  void share();

  QSplitter* m_splitter;
  std::function<int()> m_needed;
  bool m_users = false;  ///< the user dragged the splitter (setSizes moves it without saying so)
};

/// The left pane's height between the module tree and the Run/Alerts tabs below it (issue 59):
/// the tabs get what the tab shown needs — with a script driving the run (or a run reviewed) the
/// Run tab holds a line or two and the memory cap, so the tree gets the rest (a 12-layer
/// transformer showed ~12 rows above a mostly empty Run tab at 1024x700); the Alerts tab and a
/// model file's whole Run form get what they ask for, at most three fifths — until the user
/// drags the splitter, whose split then stays.
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
