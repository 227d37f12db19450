#pragma once

#include "rules/RuleEvaluator.h"

#include <QDialog>

#include <utility>
#include <vector>

class QLineEdit;

/// Run > Rule thresholds: each rule's threshold, checked as the command line checks
/// --threshold; OK keeps the dialog open on a bad value and says why.
class RuleThresholdsDialog : public QDialog {
  Q_OBJECT

public:
  explicit RuleThresholdsDialog(const hookscope::RuleSettings& settings, QWidget* parent = nullptr);
  /// The settings as accepted.
  const hookscope::RuleSettings& settings() const { return m_settings; }
  /// Keeps the dialog open, saying why, while a value is not a threshold its rule takes.
  void accept() override;

private:
  hookscope::RuleSettings m_settings;
  std::vector<std::pair<hookscope::RuleKind, QLineEdit*>> m_edits;
};
