#include "GradNormPlot.h"

#include "QCustomPlotInclude.h"

#include <QToolTip>

#include <cmath>

using namespace hookscope;

namespace {

QString seriesLabel(const SeriesKey& key) {
  QString label = key.module.empty() ? QStringLiteral("(root)") : QString::fromStdString(key.module);
  if (key.call > 0) label += QStringLiteral(" #%1").arg(key.call);
  if (key.index > 0) label += QStringLiteral("[%1]").arg(key.index);
  return label;
}

QColor lineColor(int i) {
  static const QColor colors[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44),
                                  QColor(214, 39, 40),  QColor(148, 103, 189), QColor(140, 86, 75),
                                  QColor(227, 119, 194), QColor(127, 127, 127), QColor(188, 189, 34),
                                  QColor(23, 190, 207)};
  return colors[i % 10];
}

} // namespace

GradNormPlot::GradNormPlot(QWidget* parent) : PlotPage(tr("Gradient norm per layer"), parent) {
  m_plot->xAxis->setLabel(tr("step"));
  m_plot->yAxis->setLabel(tr("L2 norm of output gradient"));
  m_plot->legend->setVisible(true);
  m_plot->legend->setFont(QFont(font().family(), font().pointSize() - 1));
  m_plot->legend->setSelectableParts(QCPLegend::spItems);
  m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom | QCP::iSelectPlottables | QCP::iSelectLegend);
  m_plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
  // Many long lines: drawn without antialiasing (fast polylines measured no faster).
  m_plot->setNotAntialiasedElements(QCP::aePlottables);
  m_plot->setPlottingHint(QCP::phFastPolylines, false);
  setLogScale(true);
  connect(m_plot, &QCustomPlot::plottableClick, this, [this](QCPAbstractPlottable* plottable, int, QMouseEvent*) {
    for (int i = 0; i < m_plot->graphCount(); ++i) {
      if (m_plot->graph(i) == plottable) Q_EMIT moduleClicked(QString::fromStdString(m_keys[std::size_t(i)].module));
    }
  });
  connect(m_plot, &QCustomPlot::legendClick, this, [this](QCPLegend*, QCPAbstractLegendItem* item, QMouseEvent*) {
    if (auto* plItem = qobject_cast<QCPPlottableLegendItem*>(item)) {
      for (int i = 0; i < m_plot->graphCount(); ++i) {
        if (m_plot->graph(i) == plItem->plottable()) Q_EMIT moduleClicked(QString::fromStdString(m_keys[std::size_t(i)].module));
      }
    }
  });
  connect(m_plot, &QCustomPlot::mouseMove, this, &GradNormPlot::onMouseMove);
}

void GradNormPlot::setLogScale(bool on) {
  m_log = on;
  m_plot->yAxis->setScaleType(on ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  if (on) {
    m_plot->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    // "g" keeps labels distinct when the range spans less than a decade.
    m_plot->yAxis->setNumberFormat("gb");
    m_plot->yAxis->setNumberPrecision(2);
  } else {
    m_plot->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    m_plot->yAxis->setNumberFormat("gb");
    m_plot->yAxis->setNumberPrecision(3);
  }
  m_plot->rescaleAxes();
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void GradNormPlot::refresh(const ViewState& state) {
  setStepMarker(double(state.step), state.step >= 0);
  if (!state.store) {
    m_plot->clearGraphs();
    m_keys.clear();
    m_version = 0;
    m_plot->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  const std::string highlighted = state.hasSelection ? state.selected.module : std::string();
  if (state.store->version() == m_version && highlighted == m_highlighted) {
    replotMarker();  // scrubbing: nothing but the marker moved
    return;
  }
  if (state.store->version() != m_version) {
    m_version = state.store->version();
    std::vector<SeriesKey> keys;
    for (const auto& key : state.store->seriesKeys()) {
      if (key.kind == CaptureKind::Gradient) keys.push_back(key);
    }
    if (keys != m_keys) {
      m_plot->clearGraphs();
      m_keys = keys;
      for (std::size_t i = 0; i < m_keys.size(); ++i) {
        QCPGraph* graph = m_plot->addGraph();
        graph->setName(seriesLabel(m_keys[i]));
        // Cosmetic 1-px lines: Qt strokes other pens as filled polygons, far too slow for
        // 100 long lines.
        QPen pen(lineColor(int(i)), 1);
        pen.setCosmetic(true);
        graph->setPen(pen);
        graph->setSelectable(QCP::stWhole);
      }
      // With many layers a legend would cover the plot (and its layout alone costs more
      // than drawing): show it only while it stays readable.
      if (m_keys.size() > 16) m_plot->legend->clearItems();
      m_plot->legend->setVisible(m_keys.size() <= 16);
    }
    for (std::size_t i = 0; i < m_keys.size(); ++i) {
      QVector<double> steps, norms;
      for (const auto& p : state.store->values(m_keys[i], &TensorStats::l2norm)) {
        steps.append(double(p.step));
        // Zero cannot be drawn on a log axis; NaN/Inf leave a gap that the tree flags.
        norms.append(m_log && p.value <= 0 ? std::nan("") : p.value);
      }
      m_plot->graph(int(i))->setData(steps, norms, true);
    }
    m_plot->rescaleAxes();
    // Keys span every step, also where values are NaN and not drawn.
    if (state.latestStep > 0) m_plot->xAxis->setRange(0, double(state.latestStep));
  }
  highlight(highlighted);
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void GradNormPlot::highlight(const std::string& module) {
  if (module == m_highlighted && m_plot->graphCount() == int(m_keys.size())) return;
  m_highlighted = module;
  for (std::size_t i = 0; i < m_keys.size(); ++i) {
    QPen pen = m_plot->graph(int(i))->pen();
    pen.setWidthF(m_keys[i].module == module ? 2.5 : 1.0);
    m_plot->graph(int(i))->setPen(pen);
  }
}

void GradNormPlot::onMouseMove(QMouseEvent* event) {
  double best = 12;  // pixels
  QString text;
  for (int i = 0; i < m_plot->graphCount(); ++i) {
    QCPGraph* graph = m_plot->graph(i);
    for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it) {
      if (std::isnan(it->value)) continue;
      const QPointF at = graph->coordsToPixels(it->key, it->value);
      const double d = std::hypot(at.x() - event->position().x(), at.y() - event->position().y());
      if (d < best) {
        best = d;
        text = tr("%1\nstep %2: %3").arg(graph->name()).arg(it->key).arg(it->value, 0, 'g', 5);
      }
    }
  }
  if (text.isEmpty()) {
    QToolTip::hideText();
  } else {
    QToolTip::showText(event->globalPosition().toPoint(), text, m_plot);
  }
}

int GradNormPlot::lineCount() const { return m_plot->graphCount(); }

int GradNormPlot::pointCount(const std::string& module) const {
  for (std::size_t i = 0; i < m_keys.size(); ++i) {
    if (m_keys[i].module == module && m_keys[i].call == 0 && m_keys[i].index == 0) {
      return m_plot->graph(int(i))->data()->size();
    }
  }
  return 0;
}

QString GradNormPlot::toCsv() const {
  QString csv = QStringLiteral("series,step,l2norm\n");
  for (int i = 0; i < m_plot->graphCount(); ++i) {
    const QCPGraph* graph = m_plot->graph(i);
    for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it) {
      csv += QStringLiteral("\"%1\",%2,%3\n").arg(graph->name()).arg(it->key).arg(it->value, 0, 'g', 17);
    }
  }
  return csv;
}
