#include "window/RecentFiles.h"

#include <QFileInfo>
#include <QMenu>
#include <QSettings>

namespace {
constexpr int kMaxRecent = 8;
const char* const kRecentKey = "recentFiles";
} // namespace

RecentFiles::RecentFiles(QMenu* menu, QObject* parent) : QObject(parent), m_menu(menu) { rebuild(); }

void RecentFiles::add(const QString& path) {
  QSettings settings;
  QStringList recent = settings.value(QLatin1String(kRecentKey)).toStringList();
  const QString absolute = QFileInfo(path).absoluteFilePath();
  recent.removeAll(absolute);
  recent.prepend(absolute);
  while (recent.size() > kMaxRecent) recent.removeLast();
  settings.setValue(QLatin1String(kRecentKey), recent);
  rebuild();
}

void RecentFiles::rebuild() {
  m_menu->clear();
  const QStringList recent = QSettings().value(QLatin1String(kRecentKey)).toStringList();
  for (const QString& path : recent) {
    m_menu->addAction(QFileInfo(path).fileName() + QStringLiteral("  —  ") + QFileInfo(path).absolutePath(), this,
                      [this, path] { Q_EMIT chosen(path); });
  }
  m_menu->setEnabled(!recent.isEmpty());
}
