#pragma once

#include <QDialog>

class QLabel;
class QPlainTextEdit;

/// Shows where HookScope waits for a training script and the lines that attach one; stays
/// open (not modal) until a script attaches or the user closes it.
class AttachDialog : public QDialog {
  Q_OBJECT

public:
  explicit AttachDialog(QWidget* parent = nullptr);
  /// The address scripts connect to (token included).
  void setAddress(const QString& address);
  /// The text shown (and copied): the environment line and the Python lines.
  QString instructions() const;

Q_SIGNALS:
  /// The user chose "Stop waiting".
  void cancelled();

private:
  QLabel* m_status;
  QPlainTextEdit* m_text;
};
