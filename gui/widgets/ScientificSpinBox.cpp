#include "widgets/ScientificSpinBox.h"

#include <QLocale>
#include <QRegularExpression>

#include <algorithm>
#include <cmath>

ScientificSpinBox::ScientificSpinBox(double minimum, double maximum, QWidget* parent) : QDoubleSpinBox(parent) {
  // QDoubleSpinBox rounds every value to `decimals` places: enough for the smallest one.
  setDecimals(int(std::ceil(-std::log10(minimum))) + 6);
  setRange(minimum, maximum);
  setKeyboardTracking(false);
}

QString ScientificSpinBox::textFromValue(double value) const { return locale().toString(value, 'g', 6); }

double ScientificSpinBox::valueFromText(const QString& text) const {
  bool ok = false;
  const double value = locale().toDouble(text.trimmed(), &ok);
  if (ok) return value;
  return QLocale::c().toDouble(text.trimmed());  // "3e-4" typed in a locale with a decimal comma
}

QValidator::State ScientificSpinBox::validate(QString& text, int&) const {
  const QString t = text.trimmed();
  if (t.isEmpty()) return QValidator::Intermediate;
  bool ok = false;
  double value = locale().toDouble(t, &ok);
  if (!ok) value = QLocale::c().toDouble(t, &ok);
  if (!ok) {
    // A number still being typed: "1e", "1e-", "0.", "-".
    static const QRegularExpression partial(QStringLiteral("^[+-]?[0-9]*[.,]?[0-9]*([eE][+-]?[0-9]*)?$"));
    return partial.match(t).hasMatch() ? QValidator::Intermediate : QValidator::Invalid;
  }
  return value >= minimum() && value <= maximum() ? QValidator::Acceptable : QValidator::Intermediate;
}

void ScientificSpinBox::stepBy(int steps) {
  setValue(std::clamp(value() * std::pow(10.0, steps), minimum(), maximum()));
}
