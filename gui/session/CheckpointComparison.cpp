#include "session/CheckpointComparison.h"

#include "session/CliProcess.h"

#include <QProcess>

void CheckpointComparison::start(const QString& first, const QString& second) {
  if (m_process) m_process->deleteLater();
  m_process = new QProcess(this);
  connect(m_process, &QProcess::finished, this, [this, process = m_process](int code, QProcess::ExitStatus status) {
    if (process != m_process) return;
    if (status != QProcess::NormalExit || code != 0) {
      QString why = cliMessage(process->readAllStandardError());
      if (why.isEmpty()) why = tr("hookscope-cli checkpoint ended with exit code %1").arg(code);
      Q_EMIT failed(why);
      return;
    }
    Q_EMIT compared(process->readAllStandardOutput());
  });
  connect(m_process, &QProcess::errorOccurred, this, [this, process = m_process](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart || process != m_process) return;
    Q_EMIT failed(tr("Cannot start %1: %2").arg(cliProgram(), process->errorString()));
  });
  m_process->start(cliProgram(), {QStringLiteral("checkpoint"), first, QStringLiteral("--compare"), second,
                                  QStringLiteral("--csv")});
}
