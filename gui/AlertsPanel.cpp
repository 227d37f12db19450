#include "AlertsPanel.h"

#include <QHeaderView>
#include <QTableWidget>
#include <QVBoxLayout>

using namespace hookscope;

namespace {
constexpr int kMaxRows = 5000;  // a runaway rule must not grow the table without bound
}

AlertsPanel::AlertsPanel(QWidget* parent) : QWidget(parent), m_table(new QTableWidget(0, 5, this)) {
  m_table->setHorizontalHeaderLabels({tr("Step"), tr("Layer"), tr("Rule"), tr("Value"), tr("Message")});
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->verticalHeader()->setVisible(false);
  m_table->horizontalHeader()->setStretchLastSection(true);
  m_table->setColumnWidth(0, 50);
  m_table->setColumnWidth(1, 110);
  m_table->setColumnWidth(2, 130);
  m_table->setColumnWidth(3, 80);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(m_table);
  auto activate = [this](int row) {
    if (row < 0) return;
    Q_EMIT alertActivated(m_table->item(row, 0)->text().toLongLong(), m_table->item(row, 1)->data(Qt::UserRole).toString());
  };
  connect(m_table, &QTableWidget::cellClicked, this, [activate](int row, int) { activate(row); });
  connect(m_table, &QTableWidget::cellActivated, this, [activate](int row, int) { activate(row); });
}

void AlertsPanel::addAlerts(const std::vector<Alert>& alerts) {
  for (const auto& alert : alerts) {
    if (m_table->rowCount() >= kMaxRows) return;
    const int row = m_table->rowCount();
    m_table->insertRow(row);
    auto* layer = new QTableWidgetItem(alert.module.empty() ? tr("(model)") : QString::fromStdString(alert.module));
    layer->setData(Qt::UserRole, QString::fromStdString(alert.module));
    m_table->setItem(row, 0, new QTableWidgetItem(QString::number(alert.step)));
    m_table->setItem(row, 1, layer);
    m_table->setItem(row, 2, new QTableWidgetItem(QString::fromLatin1(ruleName(alert.rule))));
    m_table->setItem(row, 3, new QTableWidgetItem(QString::number(alert.value, 'g', 4)));
    m_table->setItem(row, 4, new QTableWidgetItem(QString::fromStdString(alert.message)));
    m_table->item(row, 4)->setToolTip(QString::fromStdString(alert.message));
  }
}

void AlertsPanel::clear() { m_table->setRowCount(0); }
int AlertsPanel::count() const { return m_table->rowCount(); }

void AlertsPanel::highlight(const Alert& alert) {
  for (int row = m_table->rowCount() - 1; row >= 0; --row) {
    if (m_table->item(row, 0)->text().toLongLong() == alert.step &&
        m_table->item(row, 1)->data(Qt::UserRole).toString() == QString::fromStdString(alert.module) &&
        m_table->item(row, 2)->text() == QString::fromLatin1(ruleName(alert.rule))) {
      m_table->selectRow(row);
      m_table->scrollToItem(m_table->item(row, 0));
      return;
    }
  }
}
