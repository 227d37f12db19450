#pragma once
// File > Compare checkpoints, run: `hookscope-cli checkpoint A --compare B --csv` (weights only,
// in the confined Python engine), its table or what went wrong handed to whoever shows it
// (dialogs/CheckpointCompare), which runs nothing itself.

#include <QByteArray>
#include <QObject>
#include <QString>

class QProcess;

class CheckpointComparison : public QObject {
  Q_OBJECT

public:
  using QObject::QObject;
  /// Compares `first` with `second`; compared() with the CSV, or failed() with why.
  void start(const QString& first, const QString& second);

Q_SIGNALS:
  void compared(const QByteArray& csv);
  void failed(const QString& why);

private:
  QProcess* m_process = nullptr;
};
