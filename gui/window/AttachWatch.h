#pragma once

#include <QMap>
#include <QObject>
#include <QSet>
#include <QString>

class AttachDialog;
class SessionHost;
class PlotsPanel;
class QWidget;

/// Training scripts attaching to the window: waiting at an address (with the dialog that shows
/// the line to run a script with), refused connections, the ranks of a job joining and leaving,
/// and why the script or job left.
class AttachWatch : public QObject {
  Q_OBJECT

public:
  /// The dialog opens over `window`; ranks that leave are marked in `plots`' rank chooser.
  AttachWatch(SessionHost* sessions, PlotsPanel* plots, QWidget* window);
  /// Tests: the dialog is not shown.
  void setInteractive(bool interactive) { m_interactive = interactive; }
  /// Stops waiting for a script (a file was chosen instead).
  void stopWaiting();

  QString listeningAddress() const { return m_address; }
  QString lastRefusal() const { return m_lastRefusal; }
  /// The open job's ranks that joined, and why each that left did (the sessions' view's).
  const QSet<int>& ranksAttached() const;
  const QMap<int, QString>& ranksEnded() const;
  /// Why the script or job left, once it has ("" while attached).
  QString scriptEnded() const;
  /// The lowest rank still attached, or `fallback` when none is: the one a step rate counts.
  int lowestLiveRank(int fallback) const;
  AttachDialog* dialog() const { return m_dialog; }

Q_SIGNALS:
  void status(const QString& text, int timeoutMs);
  void problem(const QString& title, const QString& text);
  /// Something the status line or the actions show changed.
  void changed();
  void listening(const QString& address);
  void scriptDetached(const QString& reason);

private:
  SessionHost* m_sessions;
  PlotsPanel* m_plots;
  AttachDialog* m_dialog;
  bool m_interactive = true;
  QString m_address;
  QString m_lastRefusal;
};
