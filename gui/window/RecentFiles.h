#pragma once

#include <QObject>
#include <QString>

class QMenu;

/// File > Open recent: the last model files opened, kept in the settings, newest first.
class RecentFiles : public QObject {
  Q_OBJECT

public:
  /// Fills `menu` (and keeps filling it) with the remembered files.
  explicit RecentFiles(QMenu* menu, QObject* parent = nullptr);
  /// Puts `path` first in the list (once).
  void add(const QString& path);

Q_SIGNALS:
  void chosen(const QString& path);

private:
  void rebuild();
  QMenu* m_menu;
};
