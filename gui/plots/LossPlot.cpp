#include "LossPlot.h"

#include "QCustomPlotInclude.h"

using namespace hookscope;

LossPlot::LossPlot(QWidget* parent) : PlotPage(tr("Loss"), parent) {
  QCPGraph* graph = m_plot->addGraph();
  graph->setName(tr("loss"));
  graph->setPen(QPen(QColor(200, 60, 40), 1.5));  // one line: width is cheap
  m_plot->xAxis->setLabel(tr("step"));
  m_plot->yAxis->setLabel(tr("loss"));
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
    QVector<double> steps, losses;
    for (const auto& p : state.store->scalars("loss")) {
      steps.append(double(p.step));
      losses.append(p.value);
    }
    m_plot->graph(0)->setData(steps, losses, true);
    m_plot->rescaleAxes();
    // Keys span every step, also where values are NaN and not drawn.
    if (state.latestStep > 0) m_plot->xAxis->setRange(0, double(state.latestStep));
  }
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

int LossPlot::pointCount() const { return m_plot->graph(0)->data()->size(); }

QString LossPlot::toCsv() const {
  QString csv = QStringLiteral("step,loss\n");
  const QCPGraph* graph = m_plot->graph(0);
  for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it) {
    csv += QStringLiteral("%1,%2\n").arg(it->key).arg(it->value, 0, 'g', 17);
  }
  return csv;
}
