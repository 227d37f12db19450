#include "window/PaneSplit.h"

#include <QEvent>
#include <QLayout>
#include <QSplitter>
#include <QStyle>
#include <QTabBar>
#include <QTabWidget>

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

SideFold::SideFold(QSplitter* splitter, QTabWidget* tabs) : QObject(splitter), m_splitter(splitter), m_tabs(tabs) {
  splitter->installEventFilter(this);
  connect(splitter, &QSplitter::splitterMoved, this, [this] { m_users = true; });
  connect(tabs, &QTabWidget::currentChanged, this, &SideFold::fit);
}

bool SideFold::eventFilter(QObject* watched, QEvent* event) {
  if (watched == m_splitter && event->type() == QEvent::Resize) fit();
  return QObject::eventFilter(watched, event);
}

void SideFold::fit() {
  const int height = m_splitter->height() - m_splitter->handleWidth();
  QWidget* page = m_tabs->currentWidget();
  if (m_users || height <= 0 || !page) return;
  if (page->layout()) page->layout()->activate();  // rows just hidden or shown counted
  const int frame = 2 * m_tabs->style()->pixelMetric(QStyle::PM_DefaultFrameWidth, nullptr, m_tabs) + 8;
  const int least = m_tabs->tabBar()->sizeHint().height() + frame;
  const int tabs = std::clamp(least + page->sizeHint().height(), least, height * 3 / 5);
  m_splitter->setSizes({height - tabs, tabs});
}
