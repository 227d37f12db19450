#pragma once

#include "common/RunConfig.h"

#include <QWidget>

#include <optional>

class QComboBox;
class ScientificSpinBox;
class QLabel;
class QLineEdit;
class QSpinBox;

/// The inputs, loss, optimizer and step count of a run.
class RunControls : public QWidget {
  Q_OBJECT

public:
  explicit RunControls(QWidget* parent = nullptr);

  /// The configuration the widgets describe.
  hookscope::RunConfig config() const;
  /// Steps to run; 0 means until stopped.
  qint64 steps() const;
  QString inputSpecs() const;
  void setInputSpecs(const QString& specs);
  /// The inputs typed for a model file are kept in the settings and shown again when it is
  /// reopened; a file never run shows its example input.
  void rememberInputs(const QString& modelPath) const;
  void recallInputs(const QString& modelPath, const QString& example);
  /// Shows a configuration in the widgets (inputs or data file, loss, optimizer, mode...).
  void setConfig(const hookscope::RunConfig& config);
  void setSteps(int steps);
  void setEditable(bool editable);
  /// What is open now: a run of the user's own (editable, with what they typed last), or one
  /// read back (read-only): the configuration it ran with and its steps, or a note why none.
  void showOpened(bool reviewOnly, const std::optional<hookscope::RunConfig>& recorded, qint64 steps, const QString& note);
  /// A line above the controls (e.g. why they are disabled); hidden when empty.
  void setNote(const QString& note);
  QString note() const;
  /// Read-only, with a note: an attached script's own data, loss and optimizer are used.
  void showAttached(const QString& scriptName, int worldSize);
  /// The note once the attached script (or every rank of its job) has gone, and why.
  void showEnded(const QString& scriptName, const QString& reason);
  qint64 memoryCapBytes() const;

Q_SIGNALS:
  void memoryCapChanged(qint64 bytes);

private:
  /// What the user had typed, while a read-back run's configuration is shown instead.
  std::optional<hookscope::RunConfig> m_own;
  qint64 m_ownSteps = 0;
  QLabel* m_note;
  QLineEdit* m_inputs;
  QLineEdit* m_dataFile;
  QSpinBox* m_batchSize;
  QComboBox* m_loss;
  QComboBox* m_optimizer;
  ScientificSpinBox* m_lr;
  QComboBox* m_mode;
  QSpinBox* m_steps;
  QSpinBox* m_seed;
  QSpinBox* m_bins;
  QSpinBox* m_memoryCap;
};
