#pragma once

#include <QDialog>

class QLabel;
class QProcess;
class QTableWidget;

/// File > Compare checkpoints: per tensor, the norm of the change from one checkpoint to another
/// and its size relative to the first, tensors that went NaN or Inf first, then the largest
/// change ("which layers did fine-tuning change, and which went NaN"). Read by
/// `hookscope-cli checkpoint A --compare B --csv` (weights only, in the confined Python engine).
class CheckpointCompare : public QDialog {
  Q_OBJECT

public:
  explicit CheckpointCompare(QWidget* parent = nullptr);
  /// Asks for the two files (unless both are given) and shows a dialog comparing them, deleted when
  /// closed; null when the user cancelled.
  static CheckpointCompare* open(QWidget* parent, const QString& first = QString(), const QString& second = QString());
  /// Compares `first` with `second`; finished() when the table is filled or failed() says why.
  void compare(const QString& first, const QString& second);
  QTableWidget* table() const { return m_table; }
  QString summary() const;

Q_SIGNALS:
  void finished();
  void failed(const QString& why);

private:
  void fill(const QByteArray& csv);

  QLabel* m_summary;
  QTableWidget* m_table;
  QProcess* m_process = nullptr;
  QString m_first, m_second;
};
