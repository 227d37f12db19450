#include "HeatmapPlot.h"

#include "QCustomPlotInclude.h"

#include <cmath>

using namespace hookscope;

namespace {
constexpr int kRows = 96;
}

HeatmapPlot::HeatmapPlot(QWidget* parent) : PlotPage(tr("Distribution over steps"), parent) {
  m_map = new QCPColorMap(m_plot->xAxis, m_plot->yAxis);
  m_scale = new QCPColorScale(m_plot);
  m_plot->plotLayout()->addElement(1, 1, m_scale);
  m_scale->setType(QCPAxis::atRight);
  m_scale->axis()->setLabel(tr("log10(1 + count)"));
  m_map->setColorScale(m_scale);
  m_map->setGradient(QCPColorGradient::gpThermal);
  m_map->setInterpolate(false);
  auto* margins = new QCPMarginGroup(m_plot);
  m_plot->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  m_scale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  m_plot->xAxis->setLabel(tr("step"));
  m_plot->yAxis->setLabel(tr("value"));
  applyPalette();
}

void HeatmapPlot::refresh(const ViewState& state) {
  const bool ok = state.store && state.hasSelection;
  setStepMarker(double(state.step), ok && state.step >= 0);
  if (!ok) {
    m_map->data()->clear();
    m_columns = 0;
    m_plot->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  // The history only changes with the store; the marker moves with scrubbing.
  if (state.store->version() == m_version && state.selected == m_key) {
    replotMarker();
    return;
  }
  m_version = state.store->version();
  m_key = state.selected;
  const auto points = state.store->series(state.selected);
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& p : points) {
    if (p.stats.histogram.empty() || !std::isfinite(p.stats.histLow)) continue;
    lo = std::min(lo, p.stats.histLow);
    hi = std::max(hi, p.stats.histHigh);
  }
  m_columns = int(points.size());
  if (points.empty() || !(hi > lo)) {
    m_map->data()->clear();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  const double first = double(points.front().step), last = double(points.back().step);
  m_map->data()->setSize(m_columns, kRows);
  m_map->data()->setRange(QCPRange(first, std::max(last, first + 1)), QCPRange(lo, hi));
  m_map->data()->fill(0);
  // Thinned runs have gaps: each column spans from its step to the next one.
  for (int column = 0; column < m_columns; ++column) {
    const auto& s = points[std::size_t(column)].stats;
    const auto edges = s.edges();
    std::vector<double> rows(kRows, 0.0);
    for (std::size_t b = 0; b < s.histogram.size(); ++b) {
      const double center = 0.5 * (edges[b] + edges[b + 1]);
      const int row = std::clamp(int((center - lo) / (hi - lo) * kRows), 0, kRows - 1);
      rows[std::size_t(row)] += double(s.histogram[b]);
    }
    for (int row = 0; row < kRows; ++row) m_map->data()->setCell(column, row, std::log10(1.0 + rows[std::size_t(row)]));
  }
  m_map->rescaleDataRange(true);
  m_plot->rescaleAxes();
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

QString HeatmapPlot::toCsv() const {
  QString csv = QStringLiteral("step_from,step_to,value_low,value_high,log10_1_plus_count\n");
  auto* data = m_map->data();  // QCPColorMapData::cell is not const
  if (m_columns == 0) return csv;
  const QCPRange keys = data->keyRange(), values = data->valueRange();
  const int nx = data->keySize(), ny = data->valueSize();
  for (int x = 0; x < nx; ++x) {
    for (int y = 0; y < ny; ++y) {
      csv += QStringLiteral("%1,%2,%3,%4,%5\n")
                 .arg(keys.lower + keys.size() * x / nx, 0, 'g', 10)
                 .arg(keys.lower + keys.size() * (x + 1) / nx, 0, 'g', 10)
                 .arg(values.lower + values.size() * y / ny, 0, 'g', 10)
                 .arg(values.lower + values.size() * (y + 1) / ny, 0, 'g', 10)
                 .arg(data->cell(x, y), 0, 'g', 10);
    }
  }
  return csv;
}
