#include "dialogs/RuleThresholdsDialog.h"

#include <QDialogButtonBox>
#include <QFormLayout>
#include <QLineEdit>
#include <QMessageBox>

using namespace hookscope;

RuleThresholdsDialog::RuleThresholdsDialog(const RuleSettings& settings, QWidget* parent)
    : QDialog(parent), m_settings(settings) {
  setWindowTitle(tr("Rule thresholds"));
  auto* form = new QFormLayout(this);
  for (int i = 1; i < kRuleCount; ++i) {  // non_finite has none
    const auto rule = RuleKind(i);
    auto* edit = new QLineEdit(QString::number(ruleThreshold(m_settings, rule), 'g', 6), this);
    edit->setToolTip(QString::fromLatin1(ruleThresholdMeaning(rule)));
    form->addRow(QStringLiteral("%1 (%2)").arg(QString::fromLatin1(ruleName(rule)), QString::fromLatin1(ruleThresholdMeaning(rule))), edit);
    m_edits.emplace_back(rule, edit);
  }
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  form->addRow(buttons);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(buttons, &QDialogButtonBox::accepted, this, &RuleThresholdsDialog::accept);
}

void RuleThresholdsDialog::accept() {
  RuleSettings settings = m_settings;
  for (const auto& [rule, edit] : m_edits) {
    // Only what was edited: setting a threshold can turn its rule on (anomaly), and OK on an
    // untouched dialog must not.
    if (edit->text() == QString::number(ruleThreshold(m_settings, rule), 'g', 6)) continue;
    bool ok = false;
    const double value = edit->text().toDouble(&ok);
    std::string error;
    if (!ok || !setRuleThreshold(settings, rule, value, &error)) {
      QMessageBox::warning(this, tr("Rule thresholds"), ok ? QString::fromStdString(error) : tr("%1 is not a number.").arg(edit->text()));
      edit->setFocus();
      return;
    }
  }
  m_settings = settings;
  QDialog::accept();
}
