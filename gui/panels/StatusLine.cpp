#include "panels/StatusLine.h"

#include <algorithm>

#include <QLabel>
#include <QLayout>
#include <QProgressBar>
#include <QStatusBar>

StatusLine::StatusLine(QStatusBar* bar) : QObject(bar), m_bar(bar) {
  m_model = new QLabel(tr("no model"), bar);
  m_step = new QLabel(bar);
  m_rate = new QLabel(bar);
  m_memory = new QLabel(bar);
  m_busy = new QProgressBar(bar);
  m_busy->setRange(0, 0);
  m_busy->setMaximumWidth(120);
  m_busy->setVisible(false);
  m_busy->setToolTip(tr("The engine is running steps"));
  bar->addWidget(m_model, 1);
  bar->addPermanentWidget(m_busy);
  bar->addPermanentWidget(m_step);
  bar->addPermanentWidget(m_rate);
  bar->addPermanentWidget(m_memory);
}

QString StatusLine::endedWord(const QString& reason) {
  if (reason.contains(QStringLiteral("without closing"))) return tr("lost");
  if (reason.contains(QStringLiteral("stopped by HookScope"))) return tr("stopped");
  if (reason.contains(QStringLiteral("closed by the script"))) return tr("finished");
  return tr("detached");
}

void StatusLine::say(const QString& text, int timeoutMs) {
  int room = m_bar->width() - 24;  // the bar's margins and its size grip
  for (const QWidget* part : {static_cast<QWidget*>(m_busy), static_cast<QWidget*>(m_step),
                              static_cast<QWidget*>(m_rate), static_cast<QWidget*>(m_memory)}) {
    if (part->isVisible()) room -= part->sizeHint().width() + m_bar->layout()->spacing();
  }
  const QString shown = m_bar->fontMetrics().elidedText(text, Qt::ElideRight, std::max(room, 80));
  m_bar->setToolTip(shown == text ? QString() : text);
  m_bar->showMessage(shown, timeoutMs);
}

void StatusLine::setBusy(bool busy) { m_busy->setVisible(busy); }

void StatusLine::restartRate(bool clear) {
  m_rateClock.restart();
  m_rateSteps = 0;
  if (clear) m_stepsPerSecond = 0;
}

void StatusLine::countStep() {
  ++m_rateSteps;
  if (m_rateClock.isValid() && m_rateClock.elapsed() > 0) {
    m_stepsPerSecond = 1000.0 * double(m_rateSteps) / double(m_rateClock.elapsed());
  }
}

void StatusLine::show(const State& state) {
  const SessionView& view = *state.view;
  const SessionSummary& summary = view.opened();
  const bool running = view.state.running(), paused = view.state.paused();
  m_model->setToolTip(QString());
  if (view.kind == SessionKind::Job) {
    const int live = int(view.ranksAttached.size() - view.ranksEnded.size());
    QString ranks = tr("%1 of %2 ranks attached").arg(live).arg(summary.worldSize);
    for (auto it = view.ranksEnded.constBegin(); it != view.ranksEnded.constEnd(); ++it) {
      ranks += tr(", rank %1 %2").arg(it.key()).arg(it.value().contains(QStringLiteral("without closing")) ? tr("lost") : tr("left"));
    }
    m_model->setText(running ? tr("Job %1 of %2: %3").arg(summary.job, summary.fileName, ranks)
                                   : tr("Job %1 of %2 — %3").arg(summary.job, summary.fileName, endedWord(view.scriptEnded)));
    m_model->setToolTip(summary.script);
  } else if (view.kind == SessionKind::Script) {
    m_model->setText(running ? tr("Attached: %1").arg(summary.script)
                             : tr("%1 — %2").arg(summary.script, endedWord(view.scriptEnded)));
    if (!running) m_model->setToolTip(view.scriptEnded);
  } else if (!state.listenAddress.isEmpty() && view.kind == SessionKind::Nothing) {
    m_model->setText(tr("Waiting for a training script at %1").arg(state.listenAddress));
  } else {
    m_model->setText(view.kind == SessionKind::Nothing ? tr("No model: File > Open (Ctrl+O) or Attach (Ctrl+Shift+A)")
                                                       : summary.fileName + (view.readOnly()            ? tr(" — read-only review")
                                                                             : view.state.engineStopped ? tr(" — engine stopped")
                                                                                                        : QString()));
    if (view.modelFile()) {
      m_model->setToolTip(summary.confinement.isEmpty() ? tr("Runs in an engine process of its own, not confined")
                                                        : tr("Runs in an engine process of its own: %1").arg(summary.confinement));
    }
  }
  // A reopened run's last step; a live one's newest settled step.
  const qint64 last = view.readOnly() && summary.store ? summary.store->latestStep() : view.settledStep;
  m_step->setText(last < 0 ? tr("step —") : tr("step %1").arg(last));
  m_rate->setText(running && !paused ? tr("%1 steps/s").arg(m_stepsPerSecond, 0, 'f', 1) : (paused ? tr("paused") : tr("idle")));
  m_busy->setVisible(running && !paused);
  if (summary.store) {
    const double used = double(summary.store->bytesUsed()) / (1 << 20);
    const double cap = double(summary.store->capBytes()) / (1 << 20);
    QString text = cap < 1e9 ? tr("captures %1 / %2 MiB").arg(used, 0, 'f', 1).arg(cap, 0, 'f', 0)
                             : tr("captures %1 MiB").arg(used, 0, 'f', 1);
    if (!summary.store->thinning().empty()) text += tr(" (thinned ×%1)").arg(summary.store->stride());
    m_memory->setText(text);
  } else {
    m_memory->clear();
  }
}
