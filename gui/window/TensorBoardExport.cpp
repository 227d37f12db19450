#include "window/TensorBoardExport.h"

#include "session/SessionHost.h"
#include "session/CliProcess.h"

#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QProcess>
#include <QSettings>
#include <QTemporaryDir>

namespace {
const char* const kLastLogKey = "paths/lastTensorBoardLog";
}

TensorBoardExport::TensorBoardExport(SessionHost* sessions, QWidget* window)
    : QObject(window), m_sessions(sessions), m_window(window) {
  connect(m_sessions, &SessionHost::exportFinished, this, &TensorBoardExport::onCapturesExported);
}

TensorBoardExport::~TensorBoardExport() {
  if (m_process) {
    m_process->disconnect(this);
    m_process->kill();
    m_process->waitForFinished(2000);
  }
}

bool TensorBoardExport::busy() const { return m_scratch != nullptr; }

void TensorBoardExport::exportWithDialog() {
  if (busy()) {
    Q_EMIT status(tr("A TensorBoard log is still being written."), 5000);
    return;
  }
  const QString last = QSettings().value(QLatin1String(kLastLogKey)).toString();
  const QString start = last.isEmpty() ? QDir::home().filePath(QStringLiteral("hookscope-tensorboard")) : last;
  QFileDialog dialog(m_window, tr("Export as TensorBoard log: a new folder"), start);
  dialog.setAcceptMode(QFileDialog::AcceptSave);
  dialog.setFileMode(QFileDialog::AnyFile);
  dialog.setLabelText(QFileDialog::Accept, tr("Export"));
  if (dialog.exec() != QDialog::Accepted || dialog.selectedFiles().isEmpty()) return;
  const QString logdir = dialog.selectedFiles().front();
  QSettings().setValue(QLatin1String(kLastLogKey), logdir);
  exportTo(logdir);
}

void TensorBoardExport::exportTo(const QString& logdir) {
  if (busy()) return;
  // Said before anything is written; the writer checks again when it moves the log into place.
  const QFileInfo target(logdir);
  if (target.exists() && (!target.isDir() || !QDir(logdir).isEmpty(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden))) {
    const QString error = tr("%1 already exists and is not an empty folder. TensorBoard shows every log under a "
                             "folder together: choose a new name.").arg(logdir);
    Q_EMIT problem(tr("Export as TensorBoard log"), error);
    Q_EMIT finished(logdir, error);
    return;
  }
  m_scratch = std::make_unique<QTemporaryDir>(QDir::temp().filePath(QStringLiteral("hookscope-tensorboard-XXXXXX")));
  if (!m_scratch->isValid()) {
    const QString error = tr("Cannot make a temporary folder (%1).").arg(m_scratch->errorString());
    m_scratch.reset();
    Q_EMIT problem(tr("Export as TensorBoard log"), error);
    Q_EMIT finished(logdir, error);
    return;
  }
  m_logdir = QFileInfo(logdir).absoluteFilePath();
  m_exportDir = m_scratch->filePath(QStringLiteral("captures"));
  Q_EMIT status(tr("Writing the TensorBoard log %1…").arg(m_logdir), 0);
  m_sessions->exportCaptures(m_exportDir, false);
}

void TensorBoardExport::onCapturesExported(const QString& dir, const QString& error) {
  if (!busy() || dir != m_exportDir) return;  // an export of the captures themselves
  if (!error.isEmpty()) {
    end(error);
    return;
  }
  m_process = new QProcess(this);
  m_process->setProcessChannelMode(QProcess::SeparateChannels);
  connect(m_process, &QProcess::finished, this, [this](int code, QProcess::ExitStatus exitStatus) {
    QString error;
    if (exitStatus != QProcess::NormalExit || code != 0) {
      // hookscope-cli's own message says what went wrong and what to do.
      error = cliMessage(m_process->readAllStandardError());
      if (error.isEmpty()) error = tr("hookscope-cli export-tensorboard ended with exit code %1.").arg(code);
    }
    end(error);
  });
  connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart) end(tr("Cannot start %1: %2").arg(cliProgram(), m_process->errorString()));
  });
  m_process->start(cliProgram(), {QStringLiteral("export-tensorboard"), m_exportDir, m_logdir});
}

void TensorBoardExport::end(const QString& error) {
  if (m_process) {
    m_process->disconnect(this);
    m_process->deleteLater();
    m_process = nullptr;
  }
  m_scratch.reset();  // the temporary export goes
  const QString logdir = m_logdir;
  if (error.isEmpty()) {
    Q_EMIT status(tr("TensorBoard log written to %1 (view it with: tensorboard --logdir %1)").arg(logdir), 15000);
  } else {
    Q_EMIT status(QString(), 1);
    Q_EMIT problem(tr("Export as TensorBoard log"), tr("The TensorBoard log was not written: %1").arg(error));
  }
  Q_EMIT finished(logdir, error);
}
