#include "plots/DeviationPlot.h"

#include "models/PathElideDelegate.h"
#include "plots/QCustomPlotInclude.h"
#include "plots/ReadableTicker.h"

#include <algorithm>
#include <cmath>
#include <map>

using namespace hookscope;

namespace {
// More steps than this are wider than the plot: a column then holds several, at their furthest.
constexpr int kMaxColumns = 512;
} // namespace

DeviationPlot::DeviationPlot(QWidget* parent) : PlotPage(tr("Deviation"), parent) {
  setHeading(tr("Each layer against its own band"), tr("Deviation"));
  m_map = new QCPColorMap(m_plot->xAxis, m_plot->yAxis);
  m_scale = new QCPColorScale(m_plot);
  m_plot->plotLayout()->addElement(1, 1, m_scale);
  m_scale->setType(QCPAxis::atRight);
  m_scale->axis()->setLabel(tr("sigmas from its band"));
  m_scale->axis()->setTicker(QSharedPointer<QCPAxisTicker>(new ReadableTicker));
  m_scale->axis()->ticker()->setTickCount(3);
  m_scale->setBarWidth(10);
  m_map->setColorScale(m_scale);
  // Inside the band pale, past explain's 6 sigmas hot; a step not scored (warming up) is empty.
  QCPColorGradient gradient;
  gradient.setColorStopAt(0, QColor(245, 245, 250));
  gradient.setColorStopAt(0.25, QColor(200, 215, 235));
  gradient.setColorStopAt(0.5, QColor(250, 200, 60));
  gradient.setColorStopAt(1, QColor(180, 20, 20));
  gradient.setNanHandling(QCPColorGradient::nhTransparent);
  m_map->setGradient(gradient);
  m_map->setInterpolate(false);
  m_map->data()->clear();
  m_scale->setDataRange(QCPRange(0, kTopSigma));
  auto* margins = new QCPMarginGroup(m_plot);
  m_plot->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  m_scale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  setStepAxis();
  m_plot->yAxis->setRangeReversed(true);  // the model's first layer on top, as in the tree
  m_plot->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTickerText));
  m_selected = new QCPItemRect(m_plot);
  m_selected->setPen(QPen(QColor(30, 30, 30), 1.5));
  m_selected->setBrush(Qt::NoBrush);
  m_selected->setVisible(false);
  m_note = addCentredNote();
  // After each layout (a resize, another row count): which rows are named.
  connect(m_plot, &QCustomPlot::afterLayout, this, &DeviationPlot::labelRows);
  applyPalette();
}

void DeviationPlot::setModuleOrder(std::vector<std::string> order) {
  m_order = std::move(order);
  m_drawnStore = nullptr;  // rows in the new order at the next refresh
  m_follower.forget();
}

void DeviationPlot::resetView() {
  m_map->data()->clear();
  m_rows.clear();
  m_cells.clear();
  m_columnSteps.clear();
  m_columns = 0;
  m_drawnStore = nullptr;
  m_follower.forget();
  PlotPage::resetView();
}

double DeviationPlot::cell(int row, int column) const {
  if (row < 0 || column < 0 || row >= int(m_rows.size()) || column >= m_columns) return std::nan("");
  return m_cells[std::size_t(row) * std::size_t(m_columns) + std::size_t(column)];
}

int DeviationPlot::columnOf(std::int64_t step) const {
  if (m_columnSteps.empty() || step < m_columnSteps.front()) return -1;
  const auto after = std::upper_bound(m_columnSteps.begin(), m_columnSteps.end(), step);
  return int(after - m_columnSteps.begin()) - 1;
}

bool DeviationPlot::isStale(const ViewState& state) const {
  return state.store.get() != m_drawnStore || (state.store && state.store->version() != m_drawnVersion) ||
         state.shownRank() != m_drawnRank;
}

void DeviationPlot::drawNow(const ViewState& state) {
  m_forced = true;
  refresh(state);
  m_forced = false;
}

void DeviationPlot::refresh(const ViewState& state) {
  setStepMarker(double(state.step), state.store && state.step >= 0);
  // Reading the series is the cost: only while shown (or asked for: drawNow), and only when the
  // store changed.
  if (isStale(state) && (isVisible() || m_forced)) redraw(state);
  const QString module = QString::fromStdString(state.hasSelection ? ownerModule(state.selected) : std::string());
  const auto row = std::find(m_rows.begin(), m_rows.end(), module.toStdString());
  m_selected->setVisible(state.hasSelection && row != m_rows.end() && m_columns > 0);
  m_selectedRow = m_selected->visible() ? int(row - m_rows.begin()) : -1;
  if (m_selected->visible()) {
    const double y = double(row - m_rows.begin());
    const QCPRange x = m_map->data()->keyRange();
    const double half = m_columns > 1 ? x.size() / (m_columns - 1) / 2 : 0.5;
    m_selected->topLeft->setCoords(x.lower - half, y - 0.5);
    m_selected->bottomRight->setCoords(x.upper + half, y + 0.5);
  }
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void DeviationPlot::Row::keep(std::int64_t step, float score) {
  if (scores.empty()) base = step;
  if (step < base) {  // a late capture of an earlier step: the row grows at its front
    scores.insert(scores.begin(), std::size_t(base - step), std::nanf(""));
    base = step;
  }
  const std::size_t at = std::size_t(step - base);
  if (at >= scores.size()) scores.resize(at + 1, std::nanf(""));
  if (!std::isnan(score) && (std::isnan(scores[at]) || score > scores[at])) scores[at] = score;
}

// Only what is new since the last read: a live run's history is read once, not at every frame.
void DeviationPlot::readNew(const ViewState& state, bool rankChanged) {
  if (m_follower.mustReload(state.store.get()) || rankChanged) {
    m_read.clear();
    m_scores.clear();
    m_seenOrder.clear();
  }
  for (const auto& key : state.store->seriesKeys()) {
    if (key.rank != state.shownRank()) continue;
    const auto read = m_read.find(key);
    const auto points = state.store->bandPoints(key, read == m_read.end() ? 0 : read->second + 1);
    if (points.empty()) continue;
    m_read[key] = points.back().step;
    const std::string module = ownerModule(key);
    const auto [row, added] = m_scores.try_emplace(module);
    if (added) m_seenOrder.push_back(module);
    for (const auto& p : points) row->second.keep(p.step, float(std::fabs(p.furthest())));
  }
}

void DeviationPlot::redraw(const ViewState& state) {
  m_drawnStore = state.store.get();
  m_drawnVersion = state.store ? state.store->version() : 0;
  const bool rankChanged = state.shownRank() != m_drawnRank;
  m_drawnRank = state.shownRank();
  m_rows.clear();
  m_cells.clear();
  m_columnSteps.clear();
  m_columns = 0;
  m_map->data()->clear();
  if (!state.store) {
    m_note->setText(tr("Open a model,\na capture or\nattach a script."));
    m_note->setVisible(true);
    return;
  }
  readNew(state, rankChanged);
  std::int64_t first = INT64_MAX, last = INT64_MIN;
  for (const auto& [module, row] : m_scores) {
    if (row.scores.empty()) continue;
    first = std::min(first, row.base);
    last = std::max(last, row.base + std::int64_t(row.scores.size()) - 1);
  }
  // Rows in the model's order (a module before its children, as the tree lists them).
  std::vector<std::string> rows;
  for (const auto& path : m_order) {
    if (m_scores.count(path)) rows.push_back(path);
  }
  for (const auto& path : m_seenOrder) {
    if (std::find(rows.begin(), rows.end(), path) == rows.end()) rows.push_back(path);
  }
  if (rows.empty() || first > last) {
    m_note->setText(tr("Nothing captured yet:\ntick layers and run."));
    m_note->setVisible(true);
    return;
  }
  m_note->setVisible(false);
  const std::int64_t span = last - first + 1;
  m_columns = int(std::min<std::int64_t>(span, kMaxColumns));
  m_rows = rows;
  m_cells.assign(rows.size() * std::size_t(m_columns), std::nan(""));
  for (int c = 0; c < m_columns; ++c) m_columnSteps.push_back(first + std::int64_t(c) * span / m_columns);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const Row& row = m_scores.at(rows[r]);
    for (std::size_t i = 0; i < row.scores.size(); ++i) {
      const double score = row.scores[i];
      if (std::isnan(score)) continue;
      const int column = int((row.base + std::int64_t(i) - first) * m_columns / span);
      double& cell = m_cells[r * std::size_t(m_columns) + std::size_t(column)];
      if (std::isnan(cell) || score > cell) cell = score;
    }
  }
  m_map->data()->setSize(m_columns, int(rows.size()));
  const double lastColumn = m_columns == 1 ? double(first) : double(first) + double(span) * (m_columns - 1) / m_columns;
  m_map->data()->setRange(QCPRange(double(first), std::max(lastColumn, double(first))), QCPRange(0, double(rows.size() - 1)));
  if (m_columns == 1) m_map->data()->setKeyRange(QCPRange(double(first) - 0.5, double(first) + 0.5));
  for (int c = 0; c < m_columns; ++c) {
    for (std::size_t r = 0; r < rows.size(); ++r) {
      // Past the bar's top (NaN or Inf after the warmup included) draws at its top.
      const double v = cell(int(r), c);
      m_map->data()->setCell(c, int(r), std::isnan(v) ? v : std::min(v, kTopSigma));
    }
  }
  m_labelled = -1;  // the rows' names again, at the next layout
  autoFit();
}

void DeviationPlot::labelRows() {
  // Layer names on the rows: as many as fit without overlapping at the plot's height now, and
  // always the selected layer's (the names too near it left out), each at most 30% of its width
  // (shortened between its parts: "b.2.m.fc1" still tells the blocks apart; the whole name is in
  // the tree and the CSV).
  const QFontMetrics metrics(m_plot->yAxis->tickLabelFont());
  const int height = std::max(1, m_plot->axisRect()->height());
  const int every = std::max<int>(1, int(std::ceil(double(m_rows.size()) * metrics.height() / height)));
  const int width = std::max(40, int(0.3 * m_plot->width()));
  // Steps: two ticks where the map is narrow (a 1024 px window), so that they never run together.
  const int stepTicks = m_plot->axisRect()->width() < 120 ? 2 : 5;
  if (every == m_labelled && width == m_labelWidth && stepTicks == m_plot->xAxis->ticker()->tickCount() &&
      m_selectedRow == m_labelledSelection) {
    return;
  }
  m_plot->xAxis->ticker()->setTickCount(stepTicks);
  m_labelled = every;
  m_labelWidth = width;
  m_labelledSelection = m_selectedRow;
  auto ticker = qSharedPointerCast<QCPAxisTickerText>(m_plot->yAxis->ticker());
  ticker->clear();
  const auto name = [&](std::size_t r) {
    return m_rows[r].empty() ? tr("(root)") : PathElideDelegate::elidePath(QString::fromStdString(m_rows[r]), metrics, width);
  };
  for (std::size_t r = 0; r < m_rows.size(); r += std::size_t(every)) {
    if (m_selectedRow < 0 || std::abs(int(r) - m_selectedRow) >= every) ticker->addTick(double(r), name(r));
  }
  if (m_selectedRow >= 0 && std::size_t(m_selectedRow) < m_rows.size()) ticker->addTick(double(m_selectedRow), name(std::size_t(m_selectedRow)));
  m_plot->replot(QCustomPlot::rpQueuedReplot);  // this replot's ticks were made before the layout
}

void DeviationPlot::fitAxes() {
  if (m_map->data()->isEmpty() || m_rows.empty()) return;
  const QCPRange x = m_map->data()->keyRange();
  const double half = m_columns > 1 ? x.size() / (m_columns - 1) / 2 : 0.5;
  m_plot->xAxis->setRange(x.lower - half, x.upper + half);
  m_plot->yAxis->setRange(-0.5, double(m_rows.size()) - 0.5);
}

QString DeviationPlot::toCsv() const {
  QString csv = QStringLiteral("module,step_from,sigma\n");
  for (std::size_t r = 0; r < m_rows.size(); ++r) {
    for (int c = 0; c < m_columns; ++c) {
      const double v = cell(int(r), c);
      if (std::isnan(v)) continue;
      csv += QStringLiteral("%1,%2,%3\n")
                 .arg(QString::fromStdString(m_rows[r]))
                 .arg(m_columnSteps[std::size_t(c)])
                 .arg(v, 0, 'g', 6);
    }
  }
  return csv;
}
