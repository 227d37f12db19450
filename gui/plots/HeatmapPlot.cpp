#include "plots/HeatmapPlot.h"

#include "plots/QCustomPlotInclude.h"
#include "plots/ReadableTicker.h"

#include <QMenu>

#include <algorithm>
#include <cmath>

using namespace hookscope;

namespace {
constexpr int kRows = 96;
// More columns than this are wider than the plot: neighbouring steps are summed.
constexpr int kMaxColumns = 512;
} // namespace

void HeatmapPlot::addResampled(const TensorStats& s, double lo, double hi, double* rows, int rowCount) {
  if (s.histogram.empty() || !(s.histHigh > s.histLow) || !(hi > lo)) return;
  // Each bin's count is shared among the rows it overlaps, in proportion to the overlap: a
  // smooth distribution fills every row it spans, whatever the two grids' sizes.
  const double rowHeight = (hi - lo) / rowCount;
  const double binWidth = (s.histHigh - s.histLow) / double(s.histogram.size());
  for (std::size_t b = 0; b < s.histogram.size(); ++b) {
    const double count = double(s.histogram[b]);
    if (count == 0) continue;
    const double from = s.histLow + double(b) * binWidth, to = from + binWidth;
    const int first = std::clamp(int(std::floor((from - lo) / rowHeight)), 0, rowCount - 1);
    const int last = std::clamp(int(std::ceil((to - lo) / rowHeight)) - 1, first, rowCount - 1);
    for (int row = first; row <= last; ++row) {
      const double rowLow = lo + row * rowHeight;
      const double overlap = std::min(to, rowLow + rowHeight) - std::max(from, rowLow);
      if (overlap > 0) rows[row] += count * overlap / binWidth;
    }
  }
}

HeatmapPlot::HeatmapPlot(QWidget* parent) : PlotPage(tr("Distribution over steps"), parent) {
  setHeading(tr("Distribution over steps"), tr("Over steps"));
  m_map = new QCPColorMap(m_plot->xAxis, m_plot->yAxis);
  m_scale = new QCPColorScale(m_plot);
  m_plot->plotLayout()->addElement(1, 1, m_scale);
  m_scale->setType(QCPAxis::atRight);
  m_scale->axis()->setLabel(tr("log10(1 + count)"));
  m_scale->axis()->setTicker(QSharedPointer<QCPAxisTicker>(new ReadableTicker));
  m_scale->axis()->ticker()->setTickCount(3);
  m_scale->setBarWidth(10);  // narrower than QCustomPlot's 20: the map itself gets the room
  m_map->setColorScale(m_scale);
  m_map->setGradient(QCPColorGradient::gpThermal);
  m_map->setInterpolate(false);
  m_map->data()->clear();  // QCPColorMap starts with 10x10 cells of zeros, drawn dark before any data
  auto* margins = new QCPMarginGroup(m_plot);
  m_plot->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  m_scale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  setStepAxis();
  m_plot->yAxis->setLabel(tr("value"));
  applyPalette();
}

void HeatmapPlot::resetView() {
  clearMap();
  m_series.clear();
  m_source = Source::Shown;  // something new is open: a compared run is chosen again for it
  labelScale(m_source);
  PlotPage::resetView();
}

void HeatmapPlot::clearMap() {
  m_map->data()->clear();
  m_plot->xAxis->setLabel(tr("step"));  // a checkpoint's "step (only one)" is not the next model's
  m_scale->setDataRange(QCPRange(0, 1));  // nothing of the last map's counts
}

QCPRange HeatmapPlot::colourRange() const { return m_scale->dataRange(); }

QString HeatmapPlot::scaleLabel() const { return m_scale->axis()->label(); }

namespace {

/// The value range and steps a map spans: every finite histogram of the points it draws.
struct Grid {
  double lo = INFINITY, hi = -INFINITY, first = INFINITY, last = -INFINITY;
  std::size_t points = 0;
  void add(const std::vector<SeriesPoint>& series) {
    for (const auto& p : series) {
      if (p.stats.histogram.empty() || !std::isfinite(p.stats.histLow)) continue;
      lo = std::min(lo, p.stats.histLow);
      hi = std::max(hi, p.stats.histHigh);
      first = std::min(first, double(p.step));
      last = std::max(last, double(p.step));
    }
    points = std::max(points, series.size());
  }
  bool empty() const { return points == 0 || !(hi > lo); }
  double span() const { return std::max(last, first + 1) - first; }
  int columns() const { return std::min<int>(int(points), kMaxColumns); }
};

/// log10(1 + count) per cell of `grid`: each point in the column whose centre is nearest its step
/// (the map's range runs from the first column's centre to the last's), so a thinned run, whose
/// newest step is off the grid of the others (0, 4, ..., 196, 199), leaves no empty column; each
/// histogram resampled onto its rows.
std::vector<double> cellsOf(const std::vector<SeriesPoint>& points, const Grid& grid) {
  const int columns = grid.columns();
  std::vector<double> cells(std::size_t(columns) * kRows, 0.0);
  for (const auto& p : points) {
    if (double(p.step) < grid.first) continue;
    const double at = (double(p.step) - grid.first) / grid.span() * double(columns - 1);
    const int column = std::clamp(int(std::lround(at)), 0, columns - 1);
    HeatmapPlot::addResampled(p.stats, grid.lo, grid.hi, cells.data() + std::size_t(column) * kRows, kRows);
  }
  for (double& cell : cells) cell = cell > 0 ? std::log10(1.0 + cell) : 0.0;
  return cells;
}

} // namespace

void HeatmapPlot::refresh(const ViewState& state) {
  m_state = state;
  const bool ok = state.store && state.hasSelection;
  setStepMarker(double(state.step), ok && state.step >= 0);
  if (!ok) {
    clearMap();
    m_series.clear();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  // The history only changes with the store (or the compared run); the marker moves with scrubbing.
  const bool changed = m_series.update(*state.store, state.selected) || state.compared.get() != m_comparedDrawn || m_redraw;
  if (!changed) {
    replotMarker();
    return;
  }
  m_redraw = false;
  m_comparedDrawn = state.compared.get();
  const Source source = state.compared ? m_source : Source::Shown;
  labelScale(source);  // what is drawn, not what was chosen while a compared run was open
  std::vector<SeriesPoint> compared;
  if (source != Source::Shown) compared = state.compared->series(state.selected);
  const auto& drawn = source == Source::Compared ? compared : m_series.points();
  Grid grid;
  grid.add(drawn);
  if (source == Source::Difference) grid.add(compared);
  if (grid.empty()) {
    clearMap();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  std::vector<double> cells = cellsOf(drawn, grid);
  if (source == Source::Difference) {
    const std::vector<double> other = cellsOf(compared, grid);
    for (std::size_t i = 0; i < cells.size(); ++i) cells[i] = std::abs(cells[i] - other[i]);
  }
  const int columns = grid.columns();
  m_map->data()->setSize(columns, kRows);
  // One column (a checkpoint's weights, a run of one step) has one step to name: the axis says
  // so, rather than one lone tick reading like an axis cut short.
  m_plot->xAxis->setLabel(columns == 1 ? tr("step (only one)") : tr("step"));
  // The range holds the first and last columns' centres; a single column spans its range, so
  // one step's column is centred on it.
  m_map->data()->setRange(columns == 1 ? QCPRange(grid.first - 0.5, grid.first + 0.5) : QCPRange(grid.first, grid.first + grid.span()),
                          QCPRange(grid.lo, grid.hi));
  for (int column = 0; column < columns; ++column) {
    for (int row = 0; row < kRows; ++row) m_map->data()->setCell(column, row, cells[std::size_t(column) * kRows + std::size_t(row)]);
  }
  // A map of zeros (two equal runs' difference) gets 0..1, not the last map's range kept.
  if (*std::max_element(cells.begin(), cells.end()) > 0) {
    m_map->rescaleDataRange(true);
  } else {
    m_scale->setDataRange(QCPRange(0, 1));
  }
  autoFit();
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void HeatmapPlot::setSource(Source source) {
  m_source = source;
  labelScale(source);
  m_redraw = true;
  refresh(m_state);
}

void HeatmapPlot::labelScale(Source source) {
  static const char* labels[] = {"log10(1 + count)", "log10(1 + count), compared run", "|Δ log10(1 + count)|"};
  m_scale->axis()->setLabel(tr(labels[int(source)]));
}

void HeatmapPlot::addMenuActions(QMenu* menu) {
  menu->addSeparator();
  const char* names[] = {"Shown run", "Compared run", "|Shown − compared|"};
  for (int i = 0; i < 3; ++i) {
    QAction* action = menu->addAction(tr(names[i]), this, [this, i] { setSource(Source(i)); });
    action->setCheckable(true);
    action->setChecked(int(m_source) == i);
    action->setEnabled(m_state.compared != nullptr);  // File > Compare with run… first
  }
  menu->addSeparator();
  menu->addAction(tr("Deviation from its band (every layer)"), this, &HeatmapPlot::deviationRequested);
}

void HeatmapPlot::fitAxes() {
  m_plot->rescaleAxes();
  auto* data = m_map->data();
  if (data->isEmpty()) return;
  const auto whole = [](const QCPRange& centres, int cells) {
    if (cells < 2) return centres;
    const double half = centres.size() / (cells - 1) / 2;
    return QCPRange(centres.lower - half, centres.upper + half);
  };
  m_plot->xAxis->setRange(whole(data->keyRange(), data->keySize()));
  m_plot->yAxis->setRange(whole(data->valueRange(), data->valueSize()));
}

QString HeatmapPlot::toCsv() const {
  QString csv = QStringLiteral("step_from,step_to,value_low,value_high,log10_1_plus_count\n");
  auto* data = m_map->data();  // QCPColorMapData::cell is not const
  if (m_series.points().empty() || data->isEmpty()) return csv;
  // Cell i of n spans its centre (the map's range holds the first and last centres) +- half a cell.
  const auto edges = [](const QCPRange& centres, int n, int i) {
    const double width = n > 1 ? centres.size() / (n - 1) : centres.size();
    const double centre = n > 1 ? centres.lower + width * i : centres.center();
    return std::pair<double, double>(centre - width / 2, centre + width / 2);
  };
  const int nx = data->keySize(), ny = data->valueSize();
  for (int x = 0; x < nx; ++x) {
    const auto [from, to] = edges(data->keyRange(), nx, x);
    for (int y = 0; y < ny; ++y) {
      const auto [low, high] = edges(data->valueRange(), ny, y);
      csv += QStringLiteral("%1,%2,%3,%4,%5\n")
                 .arg(from, 0, 'g', 10)
                 .arg(to, 0, 'g', 10)
                 .arg(low, 0, 'g', 10)
                 .arg(high, 0, 'g', 10)
                 .arg(data->cell(x, y), 0, 'g', 10);
    }
  }
  return csv;
}

int HeatmapPlot::emptyRows(int column) const {
  auto* data = m_map->data();
  if (data->isEmpty() || column < 0 || column >= data->keySize()) return -1;
  int empty = 0;
  for (int row = 0; row < data->valueSize(); ++row) {
    if (data->cell(column, row) <= 0) ++empty;
  }
  return empty;
}
