#include "window/SideFold.h"

#include <QEvent>
#include <QLayout>
#include <QSplitter>
#include <QStyle>
#include <QTabBar>
#include <QTabWidget>

#include <algorithm>

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
