#include "window/DiscardGuard.h"

#include "session/SessionHost.h"
#include "files/ExportTarget.h"

#include <QAction>
#include <QCheckBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>

namespace {
// Settings: the folder of the last export, and the remembered answer to "discard captures?".
const char* const kLastExportKey = "paths/lastExport";
const char* const kAnswerKey = "prompts/unexportedCaptures";
} // namespace

DiscardGuard::DiscardGuard(SessionHost* sessions, QWidget* window)
    : QObject(window), m_sessions(sessions), m_window(window), m_askAction(new QAction(tr("&Ask before discarding captures"), this)) {
  m_askAction->setCheckable(true);
  m_askAction->setChecked(!QSettings().contains(QLatin1String(kAnswerKey)));
  m_askAction->setToolTip(tr("Ask Export / Discard / Cancel before a reset, an open or quitting drops captures not exported"));
  connect(m_askAction, &QAction::toggled, this, [](bool ask) {
    QSettings settings;
    if (ask) settings.remove(QLatin1String(kAnswerKey));
    else if (!settings.contains(QLatin1String(kAnswerKey))) settings.setValue(QLatin1String(kAnswerKey), QStringLiteral("discard"));
  });
  connect(m_sessions, &SessionHost::exportFinished, this, &DiscardGuard::onExportFinished);
  // Other captures shown: no export has saved them yet.
  connect(m_sessions, &SessionHost::sessionOpened, this, [this] { m_exportedStore = nullptr; });
}

QString DiscardGuard::lastExportFolder() { return QSettings().value(QLatin1String(kLastExportKey)).toString(); }

void DiscardGuard::setAnswer(Choice choice, const QString& exportDir) {
  m_answer = choice;
  m_answerDir = exportDir;
}

const SessionSummary& DiscardGuard::captures() const { return m_sessions->view().opened(); }

bool DiscardGuard::hasUnexported() const {
  const auto& store = captures().store;
  if (!store || captures().reviewOnly || store->latestStep() < 0) return false;
  return !(m_exportedStore == store.get() && m_exportedVersion == store->version());
}

QString DiscardGuard::question(const QString& what) const {
  const std::int64_t last = captures().store->latestStep();  // steps 0..last, as the slider
  if (last < 0) return tr("%1 discards captures that were not exported.").arg(what);
  if (last == 0) return tr("%1 discards 1 captured step (step 0) that was not exported.").arg(what);
  return tr("%1 discards %2 captured steps (0–%3) that were not exported.").arg(what).arg(last + 1).arg(last);
}

bool DiscardGuard::confirm(const QString& what, std::function<void()> then) {
  if (m_afterExport) {  // an export asked for by an earlier answer is still being written
    Q_EMIT status(tr("Writing the export first: %1 waits for it.").arg(what), 5000);
    return false;
  }
  if (!hasUnexported()) return true;
  ++m_questions;
  Choice choice = m_answer;
  const QString remembered = QSettings().value(QLatin1String(kAnswerKey)).toString();
  if (remembered == QLatin1String("discard")) {
    choice = Choice::Discard;
  } else if (remembered == QLatin1String("export")) {
    choice = Choice::Export;
  } else if (m_interactive) {
    QMessageBox box(QMessageBox::Question, tr("Captures not exported"),
                    question(what),
                    QMessageBox::NoButton, m_window);
    box.setInformativeText(tr("Export them first, discard them, or cancel?"));
    QPushButton* exportButton = box.addButton(tr("&Export…"), QMessageBox::AcceptRole);
    QPushButton* discardButton = box.addButton(tr("&Discard"), QMessageBox::DestructiveRole);
    box.addButton(QMessageBox::Cancel);
    box.setDefaultButton(exportButton);
    auto* dontAsk = new QCheckBox(tr("Don't ask again (Settings > Ask before discarding captures)"), &box);
    box.setCheckBox(dontAsk);
    box.exec();
    choice = box.clickedButton() == exportButton    ? Choice::Export
             : box.clickedButton() == discardButton ? Choice::Discard
                                                    : Choice::Cancel;
    if (dontAsk->isChecked() && choice != Choice::Cancel) {
      QSettings().setValue(QLatin1String(kAnswerKey), choice == Choice::Export ? QStringLiteral("export") : QStringLiteral("discard"));
      m_askAction->setChecked(false);
    }
  }
  if (choice == Choice::Discard) return true;
  if (choice != Choice::Export) return false;
  m_afterExport = std::move(then);
  const bool started = m_interactive ? exportWithDialog() : (exportTo(m_answerDir, false), true);
  if (!started) m_afterExport = nullptr;
  return false;
}

QString DiscardGuard::exportStartFolder() const {
  const QString last = lastExportFolder();
  if (!last.isEmpty() && QFileInfo(last).isDir()) return last;
  return !captures().attached && !captures().path.isEmpty() ? QFileInfo(captures().path).absolutePath() : QDir::homePath();
}

bool DiscardGuard::exportWithDialog() {
  const QString folder = exportStartFolder();
  const QString dir = QFileDialog::getSaveFileName(
      m_window, tr("Export captures to a new folder"),
      QDir(folder).filePath(QFileInfo(captures().fileName).completeBaseName() + QStringLiteral("-capture")));
  if (dir.isEmpty()) return false;
  bool overwrite = false;
  if (QDir target(dir); target.exists() && !target.isEmpty()) {
    // Only an earlier HookScope export may be replaced; any other folder keeps its files.
    if (!hookscope::isHookScopeExport(dir.toStdString())) {
      Q_EMIT problem(tr("Export"), QString::fromStdString(hookscope::checkExportTarget(dir.toStdString(), true)));
      return false;
    }
    if (!m_interactive) {
      Q_EMIT problem(tr("Export"), tr("%1 already holds a HookScope export.").arg(dir));
      return false;
    }
    overwrite = QMessageBox::question(m_window, tr("Replace export?"),
                                      tr("%1 already holds a HookScope export. Replace it with this one?").arg(dir)) ==
                QMessageBox::Yes;
    if (!overwrite) return false;
  }
  exportTo(dir, overwrite);
  return true;
}

void DiscardGuard::exportTo(const QString& dir, bool overwrite, const QString& interrupted) {
  Q_EMIT status(tr("Exporting captures to %1…").arg(dir), 0);
  m_exportingVersion = captures().store ? captures().store->version() : 0;
  m_exportingDir = dir;
  m_exportingRecovery = !interrupted.isEmpty();
  m_sessions->exportCaptures(dir, overwrite, interrupted);
}

void DiscardGuard::onExportFinished(const QString& dir, const QString& error) {
  if (dir != m_exportingDir) return;  // an export written for something else (a TensorBoard log)
  m_exportingDir.clear();
  auto then = std::move(m_afterExport);
  m_afterExport = nullptr;
  if (error.isEmpty()) {
    m_exportedVersion = m_exportingVersion;
    m_exportedStore = captures().store.get();
    // A save on a stop signal goes to the recovery folder: not where the user exports.
    if (!m_exportingRecovery) QSettings().setValue(QLatin1String(kLastExportKey), QFileInfo(dir).absolutePath());
    Q_EMIT status(tr("Exported captures to %1").arg(dir), 8000);
  } else if (!m_exportingRecovery) {  // a save on a stop signal says so on stderr, and quits
    Q_EMIT problem(tr("Export failed"), error);
  }
  Q_EMIT exportDone(dir, error);
  if (error.isEmpty() && then) then();  // what waited for the export: reset, open, quit
}
