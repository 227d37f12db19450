#pragma once

#include <QDoubleSpinBox>

/// A spin box for positive numbers over many decades (a learning rate): it takes what a user
/// types in plain or scientific notation ("0.003", "3e-4", "50"), shows values with six
/// significant digits, and its arrows multiply or divide by ten.
class ScientificSpinBox : public QDoubleSpinBox {
  Q_OBJECT

public:
  /// Values in [minimum, maximum] (both positive).
  ScientificSpinBox(double minimum, double maximum, QWidget* parent = nullptr);

  QString textFromValue(double value) const override;
  double valueFromText(const QString& text) const override;
  QValidator::State validate(QString& text, int& position) const override;
  void stepBy(int steps) override;
};
