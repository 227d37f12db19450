#pragma once

#include "state/SessionTypes.h"

#include <QObject>
#include <QString>

#include <cstdint>
#include <functional>

class SessionHost;
class QAction;
class QWidget;

/// Keeps captures that no export saved from being dropped unasked: before a reset, an open or
/// quitting, asks Export / Discard / Cancel (or uses the remembered answer), and writes the
/// export (File > Export captures) before what waited for it goes on.
class DiscardGuard : public QObject {
  Q_OBJECT

public:
  /// How the question is answered.
  enum class Choice { Ask, Export, Discard, Cancel };

  /// Dialogs open over `window`; exports are written by `sessions`.
  DiscardGuard(SessionHost* sessions, QWidget* window);
  /// Tests: no dialogs; the question takes setAnswer's answer, a folder to replace is refused.
  void setInteractive(bool interactive) { m_interactive = interactive; }
  /// Tests: the answer given without a dialog, and the folder an Export answer writes to.
  void setAnswer(Choice choice, const QString& exportDir = QString());
  /// Times the question was asked.
  int questions() const { return m_questions; }

  /// Whether the captures hold steps that no export has saved.
  bool hasUnexported() const;
  /// Before `what` discards captures no export saved. True to go on now; an Export answer
  /// runs `then` once the export is written.
  bool confirm(const QString& what, std::function<void()> then);
  /// What asking before `what` says of the captures: "Quitting discards 100 captured steps
  /// (0–99) that were not exported." — the steps as the slider names them.
  QString question(const QString& what) const;
  /// Asks for a new folder (or an earlier export's, to replace) and exports into it; false
  /// when the user cancelled.
  bool exportWithDialog();
  /// Exports into `dir`; `overwrite` replaces an earlier HookScope export there; `interrupted`
  /// names the signal that ended the session early, for the manifest.
  void exportTo(const QString& dir, bool overwrite, const QString& interrupted = QString());
  /// Settings > Ask before discarding captures (unchecked once an answer is remembered).
  QAction* askAction() const { return m_askAction; }
  /// The folder the last export went into (a save on a stop signal is not one).
  static QString lastExportFolder();
  /// Where File > Export captures starts: the last export's folder, else the model file's (an
  /// attached script's: the home folder).
  QString exportStartFolder() const;

Q_SIGNALS:
  /// Something to say in the status bar for `timeoutMs` (0: until replaced).
  void status(const QString& text, int timeoutMs);
  /// A problem to show the user.
  void problem(const QString& title, const QString& text);
  /// An export ended: `error` is empty when it was written.
  void exportDone(const QString& dir, const QString& error);

private:
  /// The captures now shown (a model opened, a script attached, an export reopened).
  const SessionSummary& captures() const;
  void onExportFinished(const QString& dir, const QString& error);

  SessionHost* m_sessions;
  QWidget* m_window;
  QAction* m_askAction;
  bool m_interactive = true;
  std::function<void()> m_afterExport;
  QString m_exportingDir;                 ///< the export this guard asked for, until it ends
  bool m_exportingRecovery = false;       ///< ... saved on a stop signal
  std::uint64_t m_exportingVersion = 0;  ///< the store's version when the last export was asked for
  std::uint64_t m_exportedVersion = 0;   ///< ... and when one last succeeded
  const hookscope::CaptureStore* m_exportedStore = nullptr;
  Choice m_answer = Choice::Discard;
  QString m_answerDir;
  int m_questions = 0;
};
