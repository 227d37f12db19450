#include "window/PaneSplit.h"

#include <QEvent>
#include <QSplitter>

#include <algorithm>

PaneSplit::PaneSplit(QSplitter* splitter, std::function<int()> needed)
    : QObject(splitter), m_splitter(splitter), m_needed(std::move(needed)) {
  splitter->installEventFilter(this);
  connect(splitter, &QSplitter::splitterMoved, this, [this] {
    if (!m_sharing) m_users = true;
  });
}

int PaneSplit::treeWidth(int width, int needed) { return std::min(std::max(width * 2 / 5, needed), width / 2); }

bool PaneSplit::eventFilter(QObject* watched, QEvent* event) {
  if (watched == m_splitter && event->type() == QEvent::Resize && !m_users) share();
  return QObject::eventFilter(watched, event);
}

void PaneSplit::share() {
  const int width = m_splitter->width() - m_splitter->handleWidth();
  if (width <= 0) return;
  const int tree = treeWidth(width, m_needed());
  m_sharing = true;  // not the user's drag
  m_splitter->setSizes({tree, width - tree});
  m_sharing = false;
}
