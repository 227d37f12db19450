#include "window/WindowShortcuts.h"

#include <QAbstractSpinBox>
#include <QAction>
#include <QApplication>
#include <QKeyEvent>
#include <QLineEdit>
#include <QMainWindow>
#include <QMenuBar>
#include <QPlainTextEdit>
#include <QTextEdit>

WindowShortcuts::WindowShortcuts(QMainWindow* window) : QObject(window), m_window(window) {
  for (QAction* action : window->menuBar()->findChildren<QAction*>()) {
    for (const QKeySequence& key : action->shortcuts()) {
      if (key.count() != 1) continue;
      const QKeyCombination combo = key[0];
      const bool functionKey = combo.key() >= Qt::Key_F1 && combo.key() <= Qt::Key_F35;
      const bool chord = functionKey || (combo.keyboardModifiers() & (Qt::ControlModifier | Qt::AltModifier));
      (chord ? m_chords : m_plain).insert(combo.toCombined());
    }
  }
  qApp->installEventFilter(this);
}

bool WindowShortcuts::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::ShortcutOverride) {
    const int combo = static_cast<QKeyEvent*>(event)->keyCombination().toCombined();
    auto* widget = qobject_cast<QWidget*>(watched);
    const bool textField = qobject_cast<QLineEdit*>(widget) || qobject_cast<QAbstractSpinBox*>(widget) ||
                           qobject_cast<QTextEdit*>(widget) || qobject_cast<QPlainTextEdit*>(widget);
    // Not delivered to the widget and left unaccepted: the shortcut map runs the action.
    if (widget && widget->window() == m_window && (m_chords.contains(combo) || (!textField && m_plain.contains(combo)))) {
      return true;
    }
  }
  return QObject::eventFilter(watched, event);
}
