#pragma once

#include <QObject>

class QMenu;
class QWidget;

/// Settings > Python for model files, and Python path for model files: which Python runs a
/// torch.export .pt2 or a whole-model pickle (HookScope's Python engine), and the folders its
/// classes are imported from. Remembered, and handed to every engine the window starts (as
/// HOOKSCOPE_PYTHON and HOOKSCOPE_PYTHON_PATH, which `hookscope-cli serve` reads).
class PythonSettings : public QObject {
  Q_OBJECT

public:
  PythonSettings(QMenu* menu, QWidget* window);
  /// Tests and the dialogs: set and remember ("" goes back to the default).
  void setPython(const QString& program);
  void setPythonPath(const QString& folders);
  QString python() const;
  QString pythonPath() const;

private:
  void choosePython();
  void choosePythonPath();
  QWidget* m_window;
};
