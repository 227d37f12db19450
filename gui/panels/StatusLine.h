#pragma once

#include "state/SessionView.h"

#include <QElapsedTimer>
#include <QMap>
#include <QObject>
#include <QSet>
#include <QString>

class QLabel;
class QProgressBar;
class QStatusBar;

/// The status bar's standing parts, right of its passing messages: what is open (a model, an
/// attached script or job and its ranks, or the address a script is awaited at), the last
/// step, the step rate, the captures' memory, and a busy bar while steps run.
class StatusLine : public QObject {
  Q_OBJECT

public:
  /// What the line shows: what is open, as published, and how the window waits for scripts.
  struct State {
    const SessionView* view = nullptr;
    QString listenAddress;
  };

  explicit StatusLine(QStatusBar* bar);
  /// One word for how a script's session ended: finished (it closed), stopped (by HookScope),
  /// lost (it disconnected without closing), or detached (the user detached it).
  static QString endedWord(const QString& reason);
  void show(const State& state);
  /// A passing message for `timeoutMs` (0: until replaced), cut with "…" where it would run into
  /// the standing parts; the whole text is then the bar's tooltip.
  void say(const QString& text, int timeoutMs = 0);
  /// The busy bar alone, for work that is not a run (opening a model, one step).
  void setBusy(bool busy);
  /// Counts the rate from now: a run starts or resumes; `clear` also forgets the last rate.
  void restartRate(bool clear = false);
  /// One more step of the rank the rate counts.
  void countStep();

private:
  QStatusBar* m_bar;
  QLabel* m_model;
  QLabel* m_step;
  QLabel* m_rate;
  QLabel* m_memory;
  QProgressBar* m_busy;
  QElapsedTimer m_rateClock;
  qint64 m_rateSteps = 0;
  double m_stepsPerSecond = 0;
};
