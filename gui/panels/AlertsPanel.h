#pragma once

#include "rules/RuleEvaluator.h"

#include <QHash>
#include <QWidget>

class QTableWidget;

/// Every rule firing of the session, one row per rule and layer: its steps (first, last,
/// count), layer, rule, first value and message. Activating a row jumps to its first step.
class AlertsPanel : public QWidget {
  Q_OBJECT

public:
  explicit AlertsPanel(QWidget* parent = nullptr);
  void addAlerts(const std::vector<hookscope::Alert>& alerts);
  /// Clears; then rows name their rank when `ranks` (the alerts of a torch.distributed job).
  void clear();
  void setRanksShown(bool ranks) { m_ranks = ranks; }
  int count() const;
  /// Selects the row of this alert's rule and layer.
  void highlight(const hookscope::Alert& alert);
  /// What the line under the table says: the selected alert's whole message.
  QString detailText() const;

Q_SIGNALS:
  void alertActivated(qint64 step, const QString& module, int rank, hookscope::CaptureKind kind);

private:
  /// The line under the table when no alert is selected.
  QString hint() const;
  /// The Layer column as wide as its paths need, up to a third of the table.
  void fitLayerColumn();

  QTableWidget* m_table;
  class QLabel* m_detail;
  int m_layerLeast = 0;  ///< the Layer column's width with no alerts
  QHash<QString, int> m_rows;  ///< rule|kind|rank|module -> row
  bool m_ranks = false;
};
