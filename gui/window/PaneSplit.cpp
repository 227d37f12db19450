#include "window/PaneSplit.h"

#include <QEvent>
#include <QSplitter>

#include <algorithm>

PaneSplit::PaneSplit(QSplitter* splitter, std::function<int()> needed)
    : QObject(splitter), m_splitter(splitter), m_needed(std::move(needed)) {
  splitter->installEventFilter(this);
  connect(splitter, &QSplitter::splitterMoved, this, [this] { m_users = true; });
}

bool PaneSplit::eventFilter(QObject* watched, QEvent* event) {
  if (watched == m_splitter && event->type() == QEvent::Resize && !m_users) share();
  return QObject::eventFilter(watched, event);
}

void PaneSplit::share() {
  const int width = m_splitter->width() - m_splitter->handleWidth();
  if (width <= 0) return;
  // What its columns need, at least two fifths, at most half.
  const int tree = std::min(std::max(width * 2 / 5, m_needed()), width / 2);
  m_splitter->setSizes({tree, width - tree});
}
