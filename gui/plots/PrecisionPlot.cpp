#include "plots/PrecisionPlot.h"

#include "plots/QCustomPlotInclude.h"

#include <algorithm>
#include <cmath>

using namespace hookscope;

PrecisionPlot::PrecisionPlot(QWidget* parent) : PlotPage(tr("Precision"), parent) {
  setHeading(tr("Low precision: values lost"), tr("Precision"));
  const QColor colors[] = {QColor(200, 40, 40), QColor(230, 140, 20), QColor(31, 119, 180), QColor(44, 160, 44)};
  for (std::size_t i = 0; i < m_lines.size(); ++i) {
    m_lines[i] = m_plot->addGraph();
    m_lines[i]->setName(QString::fromLatin1(kPrecisionCounts[i].label));
    m_lines[i]->setPen(QPen(colors[i], 1.5));
  }
  // The legend under the plot, two names a row: inside, it would cover a narrow plot.
  QCPLegend* legend = m_plot->legend;
  legend->setVisible(true);
  legend->setFont(QFont(font().family(), font().pointSize() - 1));
  legend->setIconSize(14, 8);
  legend->setRowSpacing(0);
  legend->setColumnSpacing(6);
  legend->setMargins(QMargins(2, 0, 2, 0));
  legend->setBorderPen(Qt::NoPen);
  legend->setBrush(Qt::NoBrush);
  legend->setWrap(2);
  legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);  // after the wrap: it rearranges the names
  m_plot->axisRect()->insetLayout()->take(legend);
  m_plot->axisRect()->insetLayout()->simplify();
  m_plot->plotLayout()->addElement(m_plot->plotLayout()->rowCount(), 0, legend);
  m_plot->plotLayout()->setRowStretchFactor(m_plot->plotLayout()->rowCount() - 1, 0.001);
  m_note = addCentredNote();
  setStepAxis();
  m_plot->yAxis->setLabel(tr("% of values"));
  m_offersLogScale = true;
  showNote(tr("Select a hooked\nlayer in the tree."));
  applyPalette();
}

void PrecisionPlot::showNote(const QString& text) {
  m_note->setText(text);
  m_note->setVisible(!text.isEmpty());
  m_note->setColor(palette().color(QPalette::WindowText));
  m_plot->legend->setVisible(text.isEmpty());
  if (!text.isEmpty()) {
    for (QCPGraph* line : m_lines) line->data()->clear();
  }
}

QString PrecisionPlot::note() const { return m_note->visible() ? m_note->text() : QString(); }

void PrecisionPlot::refresh(const ViewState& state) {
  const bool ok = state.store && state.hasSelection;
  setStepMarker(double(state.step), ok && state.step >= 0);
  if (!ok) {
    m_series.clear();
    showNote(state.store ? tr("Select a hooked\nlayer in the tree.") : tr("Open a model,\na capture or\nattach a script."));
    m_plot->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  if (!m_series.update(*state.store, state.selected)) {  // scrubbing: only the marker moved
    replotMarker();
    return;
  }
  std::array<QVector<double>, 4> steps, percents;
  for (const auto& p : m_series.points()) {
    for (std::size_t i = 0; i < kPrecisionCounts.size(); ++i) {
      const double fraction = precisionFraction(p.stats, kPrecisionCounts[i]);
      if (std::isnan(fraction)) continue;
      steps[i].append(double(p.step));
      percents[i].append(100 * fraction);
    }
  }
  if (m_series.points().empty()) {
    showNote(tr("No %1\ncaptured yet.").arg(QString::fromLatin1(captureKindName(state.selected.kind))));
  } else if (steps[0].isEmpty()) {
    // Counted since export format 3 and the package that sends them (protocol.md).
    showNote(tr("Not counted in\nthis capture: its\nhookscope package,\nor its export,\nis older."));
  } else {
    showNote(QString());
    for (std::size_t i = 0; i < m_lines.size(); ++i) m_lines[i]->setData(steps[i], percents[i], true);
  }
  autoFit();
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void PrecisionPlot::fitAxes() {
  double first = INFINITY, last = -INFINITY, high = 0, lowPositive = INFINITY;
  for (QCPGraph* line : m_lines) {
    for (auto it = line->data()->constBegin(); it != line->data()->constEnd(); ++it) {
      first = std::min(first, it->key);
      last = std::max(last, it->key);
      high = std::max(high, it->value);
      if (it->value > 0) lowPositive = std::min(lowPositive, it->value);
    }
  }
  if (!(first <= last)) return;
  m_plot->xAxis->setRange(stepRange(first, last));
  if (m_log) {
    m_plot->yAxis->setRange(paddedRange(std::isfinite(lowPositive) ? lowPositive : 1e-3, high > 0 ? high : 1, true));
  } else {
    // From just under 0: "none lost" is a line at the floor, above the axis, not mid-plot.
    const double top = high > 0 ? std::min(100.0, high) * 1.1 : 1.0;
    m_plot->yAxis->setRange(-0.04 * top, top);
  }
}

int PrecisionPlot::pointCount(int count) const {
  return count >= 0 && count < int(m_lines.size()) && !m_note->visible() ? m_lines[std::size_t(count)]->dataCount() : 0;
}

QString PrecisionPlot::toCsv() const {
  QString csv = QStringLiteral("step");
  for (const auto& count : kPrecisionCounts) csv += QStringLiteral(",%1_percent").arg(QString::fromLatin1(count.name));
  csv += '\n';
  if (m_note->visible()) return csv;
  for (const auto& p : m_series.points()) {
    if (!p.stats.hasPrecision()) continue;
    csv += QString::number(p.step);
    for (const auto& count : kPrecisionCounts) csv += ',' + QString::number(100 * precisionFraction(p.stats, count), 'g', 10);
    csv += '\n';
  }
  return csv;
}

void PrecisionPlot::resetView() {
  m_series.clear();  // another store: read whole, whatever its address and version
  PlotPage::resetView();
}
