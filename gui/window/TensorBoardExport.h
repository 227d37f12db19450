#pragma once

#include <QObject>
#include <QString>

#include <memory>

class SessionHost;
class QProcess;
class QTemporaryDir;
class QWidget;

/// File > Export as TensorBoard log: the captures on screen, written as an export into a
/// temporary folder, then turned into TensorBoard event files by `hookscope-cli
/// export-tensorboard` (PyTorch's SummaryWriter), so the window and the command line write the
/// same log. The window stays responsive; the status bar says how it went.
class TensorBoardExport : public QObject {
  Q_OBJECT

public:
  TensorBoardExport(SessionHost* sessions, QWidget* window);
  ~TensorBoardExport() override;

  /// Asks for a new log folder, then writes it.
  void exportWithDialog();
  /// Writes the log into `logdir` (new or empty); finished() says how it went.
  void exportTo(const QString& logdir);
  bool busy() const;

Q_SIGNALS:
  void status(const QString& text, int timeoutMs);
  void problem(const QString& title, const QString& text);
  /// `error` is empty when the log was written.
  void finished(const QString& logdir, const QString& error);

private:
  void onCapturesExported(const QString& dir, const QString& error);
  void end(const QString& error);

  SessionHost* m_sessions;
  QWidget* m_window;
  std::unique_ptr<QTemporaryDir> m_scratch;
  QString m_exportDir;  ///< the captures' export inside m_scratch, while it is written
  QString m_logdir;
  QProcess* m_process = nullptr;
};
