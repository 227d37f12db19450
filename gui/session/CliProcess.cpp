#include "session/CliProcess.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>

QString cliMessage(const QByteArray& standardError) {
  const QString text = QString::fromUtf8(standardError).trimmed();
  const QString prefix = QStringLiteral("hookscope-cli: ");
  const int last = text.lastIndexOf(prefix);
  return last >= 0 ? text.mid(last + prefix.size()) : text;
}

QString cliProgram() {
  const QString given = qEnvironmentVariable("HOOKSCOPE_CLI");
  if (!given.isEmpty()) return given;
  // Its name until 0.1: it names hookscope-cli, not an engine. Read for one more release.
  const QString old = qEnvironmentVariable("HOOKSCOPE_ENGINE");
  if (!old.isEmpty()) {
    static const bool warned = [] {
      qWarning("hookscope: HOOKSCOPE_ENGINE is now HOOKSCOPE_CLI (it names hookscope-cli); the old name "
               "is read until the next release");
      return true;
    }();
    (void)warned;
    return old;
  }
  const QDir here(QCoreApplication::applicationDirPath());
  for (const QString& candidate : {here.filePath(QStringLiteral("hookscope-cli")),
                                   here.filePath(QStringLiteral("../cli/hookscope-cli"))}) {
    if (QFileInfo(candidate).isExecutable()) return QFileInfo(candidate).canonicalFilePath();
  }
  return here.filePath(QStringLiteral("hookscope-cli"));
}
