#pragma once

#include <QDialog>

class QLabel;
class QTableWidget;

/// File > Compare checkpoints: per tensor, the norm of the change from one checkpoint to another
/// and its size relative to the first, tensors that went NaN or Inf first, then the largest
/// change ("which layers did fine-tuning change, and which went NaN"). It shows what
/// session/CheckpointComparison reads (`hookscope-cli checkpoint A --compare B --csv`); the
/// window wires the two.
class CheckpointCompare : public QDialog {
  Q_OBJECT

public:
  explicit CheckpointCompare(QWidget* parent = nullptr);
  /// Asks for the two files unless both are given; false when the user cancelled.
  static bool chooseFiles(QWidget* parent, QString* first, QString* second);
  QTableWidget* table() const { return m_table; }
  QString summary() const;

public Q_SLOTS:
  /// "Reading A and B…", the table emptied.
  void showReading(const QString& first, const QString& second);
  /// The comparison's CSV as the table; then finished().
  void showTable(const QByteArray& csv);
  /// What went wrong, in place of the table; then failed().
  void showFailure(const QString& why);

Q_SIGNALS:
  void finished();
  void failed(const QString& why);

private:
  void fill(const QByteArray& csv);

  QLabel* m_summary;
  QTableWidget* m_table;
  QString m_first, m_second;
};
