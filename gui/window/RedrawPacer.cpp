#include "window/RedrawPacer.h"

#include <QElapsedTimer>
#include <QTimer>

#include <algorithm>

namespace {
constexpr int kLeastMs = 33;  // at most about 30 redraws a second
constexpr int kShare = 4;     // a pause of four redraws' time after each: a fifth of the time at most
}  // namespace

RedrawPacer::RedrawPacer(std::function<void()> redraw, QObject* parent)
    : QObject(parent), m_redraw(std::move(redraw)), m_timer(new QTimer(this)) {
  m_timer->setSingleShot(true);
  m_timer->setInterval(kLeastMs);
  connect(m_timer, &QTimer::timeout, this, &RedrawPacer::redraw);
}

void RedrawPacer::schedule() {
  if (!m_timer->isActive()) m_timer->start();
}

bool RedrawPacer::pending() const { return m_timer->isActive(); }

int RedrawPacer::interval() const { return m_timer->interval(); }

void RedrawPacer::redraw() {
  QElapsedTimer took;
  took.start();
  m_redraw();
  m_timer->setInterval(std::max<int>(kLeastMs, int(kShare * took.elapsed())));
}
