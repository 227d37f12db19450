#include "window/AttachWatch.h"

#include "dialogs/AttachDialog.h"
#include "session/SessionHost.h"
#include "panels/PlotsPanel.h"

#include <algorithm>

AttachWatch::AttachWatch(SessionHost* sessions, PlotsPanel* plots, QWidget* window)
    : QObject(window), m_sessions(sessions), m_plots(plots), m_dialog(new AttachDialog(window)) {
  connect(m_dialog, &AttachDialog::cancelled, this, [this] {
    stopWaiting();
    Q_EMIT status(tr("Stopped waiting for a training script"), 5000);
    Q_EMIT changed();
  });
  connect(m_sessions, &SessionHost::listening, this, [this](const QString& address) {
    m_address = address;
    m_dialog->setAddress(address);
    if (m_interactive) {
      m_dialog->show();
      m_dialog->raise();
    }
    Q_EMIT status(tr("Waiting for a training script: run it with HOOKSCOPE_ADDRESS=%1").arg(address), 0);
    Q_EMIT changed();
    Q_EMIT listening(address);
  });
  connect(m_sessions, &SessionHost::listenFailed, this, [this](const QString& message) {
    Q_EMIT problem(tr("Cannot attach"), message);
  });
  connect(m_sessions, &SessionHost::attachRefused, this, [this](const QString& message) {
    m_lastRefusal = message;
    Q_EMIT status(tr("Refused a connection: %1").arg(message), 10000);
  });
  // A script attached no longer waits at an address.
  connect(m_sessions, &SessionHost::sessionOpened, this, [this](const SessionView& view) {
    if (!view.attached()) return;
    m_dialog->hide();
    m_address.clear();
  });
  // Which ranks came and went is the sessions' view's (SessionHost counted them before it said so).
  connect(m_sessions, &SessionHost::rankAttached, this, [this](int rank, const QString& who) {
    m_plots->setRankNote(rank, QString());
    Q_EMIT status(tr("Rank %1 of %2 attached: %3").arg(rank).arg(m_sessions->view().opened().worldSize).arg(who), 8000);
    Q_EMIT changed();
  });
  connect(m_sessions, &SessionHost::rankEnded, this, [this](int rank, const QString& why) {
    m_plots->setRankNote(rank, why.contains(QStringLiteral("without closing")) ? tr("lost") : tr("left"));
    // A rank that dies mid-run is news; the last ones leaving are said by scriptDetached.
    if (ranksEnded().size() < ranksAttached().size()) {
      Q_EMIT status(tr("Rank %1 left: %2. The other ranks are still recorded.").arg(rank).arg(why), 15000);
    }
    Q_EMIT changed();
  });
  connect(m_sessions, &SessionHost::scriptDetached, this, [this](const QString& reason) {
    m_address.clear();
    Q_EMIT changed();
    // Said, not asked: no dialog waits on a script that ended (or a Stop the user pressed). For
    // 15 s, not until replaced: then what the spike finder found is back (issue 57), and the
    // standing part still says how the script ended (its tooltip, why).
    Q_EMIT status(tr("%1. Its captures stay: File > Export captures (Ctrl+E) keeps them.").arg(reason), 15000);
    Q_EMIT scriptDetached(reason);
  });
}

void AttachWatch::stopWaiting() {
  if (m_address.isEmpty()) return;
  m_address.clear();
  m_dialog->hide();
  m_sessions->stopListening();
}

int AttachWatch::lowestLiveRank(int fallback) const {
  int lowest = fallback;
  for (int rank : ranksAttached()) {
    if (!ranksEnded().contains(rank)) lowest = std::min(lowest, rank);
  }
  return lowest;
}

const QSet<int>& AttachWatch::ranksAttached() const { return m_sessions->view().ranksAttached; }
const QMap<int, QString>& AttachWatch::ranksEnded() const { return m_sessions->view().ranksEnded; }
QString AttachWatch::scriptEnded() const { return m_sessions->view().scriptEnded; }
