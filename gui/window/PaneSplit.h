#pragma once
// How the window's width is shared between the tree's pane and the plots (issue 48, item 5):
// the tree gets what its columns need but never more than half, whatever size the window takes,
// until the user drags the splitter (then their split stays, and is saved). At 1024 px the plots
// had 477 px of 1024 and the over-steps maps 40-50 px; where the tree's columns do not all fit,
// its names keep their width and it scrolls sideways (ModuleTreePanel).

#include <QObject>

#include <functional>

class QSplitter;

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
