#include "panels/AlertsPanel.h"

#include "models/PathElideDelegate.h"

#include <QHeaderView>
#include <QLabel>
#include <QStyledItemDelegate>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

using namespace hookscope;

namespace {
constexpr int kMaxRows = 5000;  // a runaway rule must not grow the table without bound

/// One line cut once, at its end: the message (whole under the table) and the values (a range
/// cut in its middle read as another number: "63.7…4.86" for 63.7 – 64.86).
class EndElideDelegate : public QStyledItemDelegate {
public:
  using QStyledItemDelegate::QStyledItemDelegate;

protected:
  void initStyleOption(QStyleOptionViewItem* option, const QModelIndex& index) const override {
    QStyledItemDelegate::initStyleOption(option, index);
    option->textElideMode = Qt::ElideRight;
    option->features &= ~QStyleOptionViewItem::WrapText;
  }
};
}  // namespace

AlertsPanel::AlertsPanel(QWidget* parent) : QWidget(parent), m_table(new QTableWidget(0, 5, this)) {
  m_table->setHorizontalHeaderLabels({tr("Steps"), tr("Layer"), tr("Rule"), tr("Value"), tr("Message")});
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->verticalHeader()->setVisible(false);
  m_table->horizontalHeader()->setSectionResizeMode(4, QHeaderView::Stretch);  // the message takes the rest
  // Widths from the font: a rule's name whole, a range of steps, a value; a layer's path is cut
  // in the middle (its last part stays) and whole in its tooltip, the message fills the rest.
  m_table->setTextElideMode(Qt::ElideMiddle);
  m_table->setItemDelegateForColumn(1, new PathElideDelegate(m_table));  // "layer3.…downsample.0"
  m_table->horizontalHeader()->setMinimumSectionSize(40);
  m_table->horizontalHeader()->setDefaultSectionSize(60);  // the least the stretched message column takes
  const QFontMetrics metrics(m_table->font());
  const int pad = 12;
  m_table->setColumnWidth(0, metrics.horizontalAdvance(QStringLiteral("101–110 (×10)")) + pad);
  m_layerLeast = metrics.horizontalAdvance(QStringLiteral("layer3.conv2")) + pad;
  m_table->setColumnWidth(1, m_layerLeast);
  int rule = 0;
  for (int i = 0; i < kRuleCount; ++i) rule = std::max(rule, metrics.horizontalAdvance(QString::fromLatin1(ruleName(RuleKind(i)))));
  m_table->setColumnWidth(2, rule + pad);
  m_table->setColumnWidth(3, metrics.horizontalAdvance(QStringLiteral("-9.61 – 118.3")) + pad);  // a range whole
  m_table->setItemDelegateForColumn(3, new EndElideDelegate(m_table));
  m_table->setItemDelegateForColumn(4, new EndElideDelegate(m_table));
  m_table->setWordWrap(false);
  // The selected alert's whole message, wrapped, under the table: the column has room for its
  // start only (at 1024 px a message was cut twice, "11.25% of the gradien…'fc2' …").
  m_detail = new QLabel(hint(), this);
  m_detail->setWordWrap(true);
  m_detail->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_detail->setContentsMargins(4, 2, 4, 2);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(m_table, 1);
  layout->addWidget(m_detail);
  connect(m_table, &QTableWidget::currentCellChanged, this, [this](int row) {
    const QTableWidgetItem* message = row >= 0 ? m_table->item(row, 4) : nullptr;
    if (message) m_detail->setText(message->text());
  });
  auto activate = [this](int row) {
    if (row < 0) return;
    const QTableWidgetItem* layer = m_table->item(row, 1);
    Q_EMIT alertActivated(m_table->item(row, 0)->data(Qt::UserRole).toLongLong(), layer->data(Qt::UserRole).toString(),
                          layer->data(Qt::UserRole + 1).toInt(), CaptureKind(layer->data(Qt::UserRole + 2).toInt()));
  };
  connect(m_table, &QTableWidget::cellClicked, this, [activate](int row, int) { activate(row); });
  connect(m_table, &QTableWidget::cellActivated, this, [activate](int row, int) { activate(row); });
}

namespace {

QString groupKey(const Alert& alert) {
  return QStringLiteral("%1|%2|%3|%4")
      .arg(int(alert.rule))
      .arg(int(alert.kind))
      .arg(alert.rank)
      .arg(QString::fromStdString(alert.module));
}

QString stepsText(std::int64_t first, std::int64_t last, std::int64_t count) {
  if (count <= 1) return QString::number(first);
  if (first == last) return QStringLiteral("%1 (×%2)").arg(first).arg(count);  // two calls in one step
  return QStringLiteral("%1–%2 (×%3)").arg(first).arg(last).arg(count);
}

/// A group's values: the one value, or the lowest and highest of its firings.
void showValues(QTableWidgetItem* item, double value) {
  double low = item->data(Qt::UserRole).isValid() ? item->data(Qt::UserRole).toDouble() : value;
  double high = item->data(Qt::UserRole + 1).isValid() ? item->data(Qt::UserRole + 1).toDouble() : value;
  if (std::isnan(low) || value < low) low = value;  // a NaN value gives way to any number
  if (std::isnan(high) || value > high) high = value;
  item->setData(Qt::UserRole, low);
  item->setData(Qt::UserRole + 1, high);
  const QString lowText = QString::number(low, 'g', 4), highText = QString::number(high, 'g', 4);
  item->setText(lowText == highText ? lowText : QStringLiteral("%1 – %2").arg(lowText, highText));
  item->setToolTip(lowText == highText ? QString() : QObject::tr("The lowest and highest value over the firings grouped here"));
}

} // namespace

void AlertsPanel::addAlerts(const std::vector<Alert>& alerts) {
  for (const auto& alert : alerts) {
    // Repeats of one rule on one layer are one row: first step, last step, count.
    const QString key = groupKey(alert);
    // A reopened export's alert already spans steps (its last step and count).
    const std::int64_t last = std::max(alert.step, alert.lastStep);
    const std::int64_t count = std::max<std::int64_t>(1, alert.count);
    if (const auto found = m_rows.find(key); found != m_rows.end()) {
      QTableWidgetItem* steps = m_table->item(found.value(), 0);
      const qint64 total = steps->data(Qt::UserRole + 1).toLongLong() + count;
      const qint64 newest = std::max<qint64>(steps->data(Qt::UserRole + 2).toLongLong(), last);
      steps->setData(Qt::UserRole + 1, total);
      steps->setData(Qt::UserRole + 2, newest);
      steps->setText(stepsText(steps->data(Qt::UserRole).toLongLong(), newest, total));
      showValues(m_table->item(found.value(), 3), alert.value);
      continue;
    }
    if (m_table->rowCount() >= kMaxRows) continue;
    const int row = m_table->rowCount();
    m_table->insertRow(row);
    m_rows.insert(key, row);
    QString where = alert.module.empty() ? tr("(model)") : QString::fromStdString(alert.module);
    if (m_ranks) where += tr(" · rank %1").arg(alert.rank);  // a job's: the rank where it fired
    auto* layer = new QTableWidgetItem(where);
    layer->setToolTip(where);
    layer->setData(Qt::UserRole, QString::fromStdString(alert.module));
    layer->setData(Qt::UserRole + 1, alert.rank);
    layer->setData(Qt::UserRole + 2, int(alert.kind));
    auto* steps = new QTableWidgetItem(stepsText(alert.step, last, count));
    steps->setData(Qt::UserRole, qint64(alert.step));
    steps->setData(Qt::UserRole + 1, qint64(count));
    steps->setData(Qt::UserRole + 2, qint64(last));
    m_table->setItem(row, 0, steps);
    m_table->setItem(row, 1, layer);
    m_table->setItem(row, 2, new QTableWidgetItem(QString::fromLatin1(ruleName(alert.rule))));
    auto* value = new QTableWidgetItem;
    showValues(value, alert.value);
    m_table->setItem(row, 3, value);
    m_table->setItem(row, 4, new QTableWidgetItem(QString::fromStdString(alert.message)));
    m_table->item(row, 4)->setToolTip(QString::fromStdString(alert.message));
  }
  fitLayerColumn();
}

void AlertsPanel::fitLayerColumn() {
  // As wide as the longest layer listed, up to a third of the table: the paths shortened less,
  // and alike ("blocks.1.norm" read "b.1.norm" beside a whole "blocks.2.fc1").
  const QFontMetrics metrics(m_table->font());
  int widest = m_layerLeast;
  for (int row = 0; row < m_table->rowCount(); ++row) {
    widest = std::max(widest, metrics.horizontalAdvance(m_table->item(row, 1)->text()) + 12);
  }
  m_table->setColumnWidth(1, std::min(widest, std::max(m_layerLeast, m_table->viewport()->width() / 3)));
}

QString AlertsPanel::detailText() const { return m_detail->text(); }

void AlertsPanel::clear() {
  m_table->setRowCount(0);
  m_rows.clear();
  m_table->setColumnWidth(1, m_layerLeast);
  m_ranks = false;
  m_detail->setText(hint());  // not the last session's alert under an empty table
}

QString AlertsPanel::hint() const {
  return tr("Select an alert to read its whole message; activate it to go to its step.");
}
int AlertsPanel::count() const { return m_table->rowCount(); }

void AlertsPanel::highlight(const Alert& alert) {
  const auto found = m_rows.find(groupKey(alert));
  if (found == m_rows.end()) return;
  m_table->selectRow(found.value());
  m_table->scrollToItem(m_table->item(found.value(), 0));
}
