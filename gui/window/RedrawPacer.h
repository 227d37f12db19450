#pragma once
// When the window redraws: requests are coalesced, at most about 30 redraws a second, and a
// redraw never takes more than a fifth of the time. A run shares the machine with the window
// (its engine process on the same cores): a window that redrew after every step slowed a
// 1000-step run of the sample to three times the CLI's time (issue 48, item 7).

#include <QObject>

#include <functional>

class QTimer;

class RedrawPacer : public QObject {
  Q_OBJECT

public:
  RedrawPacer(std::function<void()> redraw, QObject* parent);
  /// A redraw soon: after the last one's pause, once for any number of requests.
  void schedule();
  bool pending() const;
  /// The pause before the next redraw (ms): the least, or four times the last redraw's time.
  int interval() const;

private:
  void redraw();

  std::function<void()> m_redraw;
  QTimer* m_timer;
};
