#pragma once

#include <QObject>
#include <QSet>

class QMainWindow;

/// Makes a window's menu shortcuts win over its widgets' own key bindings (a line edit takes
/// Ctrl+E as "end of line", a tree view takes [ for its keyboard search). Ctrl, Alt and F-key
/// shortcuts always reach the window; plain keys ([, ], End) stay text in text fields.
class WindowShortcuts : public QObject {
  Q_OBJECT

public:
  /// Reads the shortcuts of `window`'s menu bar as it is now, and filters the application's
  /// shortcut overrides for that window.
  explicit WindowShortcuts(QMainWindow* window);

protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

private:
  QMainWindow* m_window;
  QSet<int> m_chords;  ///< Ctrl, Alt and F-key shortcuts no widget may take
  QSet<int> m_plain;   ///< plain keys that text fields keep
};
