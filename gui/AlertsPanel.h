#pragma once

#include "RuleEngine.h"

#include <QWidget>

class QTableWidget;

/// Every rule firing of the session: step, layer, rule, value, message. Activating a row
/// asks the window to jump there.
class AlertsPanel : public QWidget {
  Q_OBJECT

public:
  explicit AlertsPanel(QWidget* parent = nullptr);
  void addAlerts(const std::vector<hookscope::Alert>& alerts);
  void clear();
  int count() const;
  /// Selects the row of this alert (the newest matching one).
  void highlight(const hookscope::Alert& alert);

Q_SIGNALS:
  void alertActivated(qint64 step, const QString& module);

private:
  QTableWidget* m_table;
};
