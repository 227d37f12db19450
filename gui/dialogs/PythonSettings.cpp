#include "dialogs/PythonSettings.h"

#include <QFileDialog>
#include <QFileInfo>
#include <QInputDialog>
#include <QLineEdit>
#include <QMenu>
#include <QMessageBox>
#include <QProcess>
#include <QSettings>

namespace {
const char* const kPythonKey = "engine/python";
const char* const kPythonPathKey = "engine/pythonPath";

void apply(const char* variable, const QString& value) {
  if (value.isEmpty()) {
    qunsetenv(variable);
  } else {
    qputenv(variable, value.toLocal8Bit());
  }
}
}  // namespace

PythonSettings::PythonSettings(QMenu* menu, QWidget* window) : QObject(window), m_window(window) {
  QAction* python = menu->addAction(tr("&Python for model files…"), this, &PythonSettings::choosePython);
  python->setToolTip(tr("The Python (with PyTorch) that runs torch.export .pt2 files and pickled models"));
  QAction* path = menu->addAction(tr("Python &path for model files…"), this, &PythonSettings::choosePythonPath);
  path->setToolTip(tr("Folders a pickled model's classes are imported from"));
  // A remembered choice wins over the environment the window was started in.
  const QSettings settings;
  if (settings.contains(QLatin1String(kPythonKey))) apply("HOOKSCOPE_PYTHON", settings.value(QLatin1String(kPythonKey)).toString());
  if (settings.contains(QLatin1String(kPythonPathKey))) {
    apply("HOOKSCOPE_PYTHON_PATH", settings.value(QLatin1String(kPythonPathKey)).toString());
  }
}

QString PythonSettings::python() const { return qEnvironmentVariable("HOOKSCOPE_PYTHON"); }
QString PythonSettings::pythonPath() const { return qEnvironmentVariable("HOOKSCOPE_PYTHON_PATH"); }

void PythonSettings::setPython(const QString& program) {
  QSettings().setValue(QLatin1String(kPythonKey), program);
  apply("HOOKSCOPE_PYTHON", program);
}

void PythonSettings::setPythonPath(const QString& folders) {
  QSettings().setValue(QLatin1String(kPythonPathKey), folders);
  apply("HOOKSCOPE_PYTHON_PATH", folders);
}

void PythonSettings::choosePython() {
  const QString current = python();
  const QString chosen = QFileDialog::getOpenFileName(
      m_window, tr("Python for model files (cancel keeps %1)").arg(current.isEmpty() ? tr("the default") : current),
      current.isEmpty() ? QStringLiteral("/usr/bin") : QFileInfo(current).absolutePath());
  if (chosen.isEmpty()) return;
  // Said now rather than at the next open: a Python without PyTorch cannot run a model.
  QProcess probe;
  probe.start(chosen, {QStringLiteral("-c"), QStringLiteral("import torch; print(torch.__version__)")});
  const bool ran = probe.waitForFinished(60000) && probe.exitStatus() == QProcess::NormalExit && probe.exitCode() == 0;
  if (!ran) {
    QMessageBox::warning(m_window, tr("Python for model files"),
                         tr("%1 cannot import torch, so it cannot run a model. Choose a Python with PyTorch (a "
                            "virtual environment's bin/python).").arg(chosen));
    return;
  }
  setPython(chosen);
  QMessageBox::information(m_window, tr("Python for model files"),
                           tr("%1 (PyTorch %2) runs .pt2 files and pickled models from the next one opened.")
                               .arg(chosen, QString::fromUtf8(probe.readAllStandardOutput()).trimmed()));
}

void PythonSettings::choosePythonPath() {
  bool ok = false;
  const QString folders = QInputDialog::getText(
      m_window, tr("Python path for model files"),
      tr("Folders to import a pickled model's classes from, separated by ':'"), QLineEdit::Normal, pythonPath(), &ok);
  if (ok) setPythonPath(folders.trimmed());
}
