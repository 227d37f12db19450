#include "LossPlot.h"

#include "QCustomPlotInclude.h"

#include <QComboBox>

#include <algorithm>
#include <cmath>
#include <QVBoxLayout>

using namespace hookscope;

LossPlot::LossPlot(QWidget* parent) : PlotPage(tr("Loss"), parent) {
  QCPGraph* graph = m_plot->addGraph();
  graph->setName(tr("loss"));
  graph->setPen(QPen(QColor(200, 60, 40), 1.5));  // one line: width is cheap
  m_plot->xAxis->setLabel(tr("step"));
  m_plot->yAxis->setLabel(tr("loss"));
  // Shown once the store holds scalars besides the loss (an attached script's lr, accuracy...).
  m_chooser = new QComboBox(this);
  m_chooser->setToolTip(tr("Per-step scalar to plot"));
  m_chooser->setVisible(false);
  static_cast<QVBoxLayout*>(layout())->insertWidget(0, m_chooser);
  connect(m_chooser, &QComboBox::activated, this, [this](int index) { setScalar(m_chooser->itemText(index)); });
}

void LossPlot::setScalar(const QString& name) {
  if (name == m_name) return;
  m_name = name;
  m_plot->graph(0)->setName(name);
  m_plot->yAxis->setLabel(name);
  m_version = 0;  // redraw at the next refresh
}

void LossPlot::updateChoices(const std::vector<std::string>& names) {
  QStringList items;
  for (const auto& name : names) items << QString::fromStdString(name);
  items.removeAll(QStringLiteral("loss"));
  items.prepend(QStringLiteral("loss"));
  QStringList current;
  for (int i = 0; i < m_chooser->count(); ++i) current << m_chooser->itemText(i);
  if (items != current) {
    m_chooser->clear();
    m_chooser->addItems(items);
  }
  m_chooser->setCurrentText(m_name);
  m_chooser->setVisible(items.size() > 1);
}

void LossPlot::refresh(const ViewState& state) {
  setStepMarker(double(state.step), state.step >= 0);
  if (!state.store) {
    m_plot->graph(0)->data()->clear();
    m_version = 0;
  } else if (state.store->version() == m_version) {
    replotMarker();  // scrubbing: nothing but the marker moved
    return;
  } else {
    m_version = state.store->version();
    updateChoices(state.store->scalarNames());
    QVector<double> steps, losses;
    for (const auto& p : state.store->scalars(m_name.toStdString())) {
      steps.append(double(p.step));
      losses.append(p.value);
    }
    m_plot->graph(0)->setData(steps, losses, true);
    autoFit();
  }
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void LossPlot::fitAxes() {
  const auto* data = m_plot->graph(0)->data().data();
  if (data->isEmpty()) return;
  // Keys span every step, also one whose loss is NaN; values only the finite ones.
  const double first = data->constBegin()->key, last = (data->constEnd() - 1)->key;
  m_plot->xAxis->setRange(stepRange(first, last));
  double lo = INFINITY, hi = -INFINITY;
  for (auto it = data->constBegin(); it != data->constEnd(); ++it) {
    if (!std::isfinite(it->value)) continue;
    lo = std::min(lo, it->value);
    hi = std::max(hi, it->value);
  }
  if (lo <= hi) m_plot->yAxis->setRange(paddedRange(lo, hi, false));
}

int LossPlot::pointCount() const { return m_plot->graph(0)->data()->size(); }

QString LossPlot::toCsv() const {
  QString csv = QStringLiteral("step,%1\n").arg(m_name);
  const QCPGraph* graph = m_plot->graph(0);
  for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it) {
    csv += QStringLiteral("%1,%2\n").arg(it->key).arg(it->value, 0, 'g', 17);
  }
  return csv;
}
