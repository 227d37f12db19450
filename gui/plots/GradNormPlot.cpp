#include "plots/GradNormPlot.h"

#include "models/PathElideDelegate.h"
#include "plots/LineBundle.h"
#include "plots/LayerColours.h"
#include "plots/QCustomPlotInclude.h"
#include "plots/ReadableTicker.h"
#include "store/RankSpread.h"

#include <QLocale>
#include <QMenu>
#include <QToolTip>

#include <cmath>
#include <limits>

using namespace hookscope;

namespace {

constexpr std::size_t kMaxLegendEntries = 8;

QString layerLabel(const SeriesKey& key) {
  QString label = key.module.empty() ? QStringLiteral("(root)") : QString::fromStdString(key.module);
  // Worded as the series chooser words them.
  if (key.call > 0) label += QStringLiteral(" · call %1").arg(key.call);
  if (key.index > 0) label += QStringLiteral(" · tensor %1").arg(key.index);
  return label;
}

/// The layer, and in a job its rank (rank -1: the median over `ranks` ranks).
QString seriesLabel(const SeriesKey& key, int ranks) {
  QString label = layerLabel(key);
  if (key.rank < 0) return label + QStringLiteral(" (median of %1 ranks)").arg(ranks);
  if (ranks > 1) label += QStringLiteral(" (rank %1)").arg(key.rank);
  return label;
}

GradNormPlot::RankMode rankModeOf(const ViewState& state) {
  if (!state.allRanks()) return GradNormPlot::RankMode::OneRank;
  return state.drawsMedian() ? GradNormPlot::RankMode::Median : GradNormPlot::RankMode::LinePerRank;
}

} // namespace

GradNormPlot::GradNormPlot(QWidget* parent) : PlotPage(tr("Gradient norm per layer"), parent) {
  setStepAxis();
  m_plot->yAxis->setLabel(tr("L2 norm of output gradient"));
  m_plot->legend->setVisible(false);  // until there are lines to name
  m_plot->legend->setFont(QFont(font().family(), font().pointSize() - 1));
  m_plot->legend->setSelectableParts(QCPLegend::spItems);
  m_plot->legend->setIconSize(18, 8);
  m_plot->legend->setRowSpacing(0);
  m_plot->legend->setMargins(QMargins(4, 2, 4, 2));
  m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom | QCP::iSelectPlottables | QCP::iSelectLegend);
  m_plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
  // Every line is drawn by one LineBundle; QCPGraphs (empty, hidden) only carry legend entries.
  m_lines = new LineBundle(m_plot->xAxis, m_plot->yAxis);
  m_lines->removeFromLegend();
  m_compared = new LineBundle(m_plot->xAxis, m_plot->yAxis);
  m_compared->removeFromLegend();
  m_compared->setDashed(true);
  m_compared->setSelectable(QCP::stNone);
  m_offersLogScale = true;
  setLogScale(true);  // the heading with it (sayZeroLayers)
  connect(m_plot, &QCustomPlot::plottableClick, this, [this](QCPAbstractPlottable* plottable, int, QMouseEvent* event) {
    if (plottable == m_lines) emitClicked(m_lines->seriesAt(event->position(), m_plot->selectionTolerance()));
  });
  connect(m_plot, &QCustomPlot::legendClick, this, [this](QCPLegend*, QCPAbstractLegendItem* item, QMouseEvent*) {
    if (auto* plItem = qobject_cast<QCPPlottableLegendItem*>(item)) {
      for (int i = 0; i < m_plot->graphCount() && std::size_t(i) < m_legendModules.size(); ++i) {
        if (m_plot->graph(i) == plItem->plottable()) {
          Q_EMIT moduleClicked(QString::fromStdString(m_legendModules[std::size_t(i)]));
        }
      }
    }
  });
  connect(m_plot, &QCustomPlot::mouseMove, this, &GradNormPlot::onMouseMove);
  connect(m_plot, &QCustomPlot::beforeReplot, this, &GradNormPlot::placeLegend);
}

void GradNormPlot::emitClicked(int series) {
  if (series >= 0 && std::size_t(series) < m_keys.size()) {
    Q_EMIT moduleClicked(QString::fromStdString(m_keys[std::size_t(series)].module));
  }
}

void GradNormPlot::logScaleChanged() {
  // "g" keeps labels distinct when a log axis spans less than a decade.
  m_plot->yAxis->setNumberFormat("gb");
  m_plot->yAxis->setNumberPrecision(m_log ? 2 : 3);
  sayZeroLayers();
  fitToData();
}

void GradNormPlot::sayZeroLayers() {
  int zero = 0, layers = 0;
  bool layerZero = false;
  for (std::size_t i = 0; i < m_keys.size(); ++i) {
    if (i == 0 || !sameTensor(m_keys[i - 1], m_keys[i])) {  // a layer's ranks are adjacent
      zero += layerZero;
      ++layers;
      layerZero = true;
    }
    const bool nonZero = i < m_lineNonZero.size() && m_lineNonZero[i];
    layerZero = layerZero && !nonZero && !m_lines->values(int(i)).isEmpty();
  }
  zero += layerZero;
  m_zeroLayers = zero;
  if (!m_log || zero == 0) {
    setHeading(tr("Gradient norm per layer"), tr("Gradient norms"));
    return;
  }
  const QLocale locale;
  setHeading(tr("Gradient norm per layer: %1 of %2 at 0, off the log axis").arg(locale.toString(zero), locale.toString(layers)),
             tr("Gradient norms (%1 at 0)").arg(locale.toString(zero)));
}

void GradNormPlot::fitAxes() {
  bool found = false;
  const QCPRange keys = m_lines->getKeyRange(found);
  if (found) m_plot->xAxis->setRange(stepRange(keys.lower, keys.upper));
  const QCP::SignDomain domain = m_log ? QCP::sdPositive : QCP::sdBoth;
  QCPRange values = m_lines->getValueRange(found, domain);
  bool compared = false;  // the compared run's lines stay on the chart too
  const QCPRange others = m_compared->getValueRange(compared, domain);
  if (compared) values = found ? QCPRange(std::min(values.lower, others.lower), std::max(values.upper, others.upper)) : others;
  found = found || compared;
  // The band reaches beyond the median lines: it must stay on the chart too.
  if (m_bandLow && m_bandLow->visible()) {
    bool low = false, high = false;
    const QCPRange lows = m_bandLow->getValueRange(low, domain), highs = m_bandHigh->getValueRange(high, domain);
    if (low) values = found ? QCPRange(std::min(values.lower, lows.lower), std::max(values.upper, lows.upper)) : lows;
    found = found || low;
    if (high) values = found ? QCPRange(std::min(values.lower, highs.lower), std::max(values.upper, highs.upper)) : highs;
    found = found || high;
  }
  if (found) m_plot->yAxis->setRange(paddedRange(values.lower, values.upper, m_log));
}

void GradNormPlot::addMenuActions(QMenu* menu) {
  QAction* legend = menu->addAction(tr("Show legend"));
  legend->setCheckable(true);
  legend->setChecked(m_legendWanted);
  if (m_layerCount > kMaxLegendEntries) {  // said, not ticked with nothing drawn
    legend->setEnabled(false);
    legend->setText(tr("Show legend (%1 lines, over %2: hover a line for its name)").arg(m_layerCount).arg(kMaxLegendEntries));
  } else if (!m_plot->legend->visible() && m_legendWanted && m_layerCount > 0) {
    legend->setText(tr("Show legend (too large for the plot now: widen it, or hover a line)"));
  }
  connect(legend, &QAction::toggled, this, [this](bool on) {
    m_legendWanted = on;
    m_plot->replot(QCustomPlot::rpQueuedReplot);
  });
}

void GradNormPlot::placeLegend() {
  // A legend names the lines only while it stays in a corner: at most 45% of the plot's
  // width and half its height. Otherwise hovering a line names it.
  bool show = m_legendWanted && !m_legendModules.empty();
  if (show) {
    const QSize need = m_plot->legend->minimumOuterSizeHint();
    // The axes take about 80 px across and 70 down (labels, ticks, title).
    const QRect area = m_plot->viewport().adjusted(80, 70, 0, 0);
    show = need.width() <= area.width() * 45 / 100 && need.height() <= area.height() / 2;
    if (show) m_plot->axisRect()->insetLayout()->setInsetAlignment(0, clearestCorner(need));
  }
  m_plot->legend->setVisible(show);
}

Qt::Alignment GradNormPlot::clearestCorner(const QSize& size) const {
  // The corner whose box the fewest points of the lines fall in (and the midpoints between
  // them); top right on a tie. The legend covered the lines at the top right, where gradient
  // norms that shrink as training goes start.
  const QRect inner = m_plot->axisRect()->rect().adjusted(12, 12, -12, -12);  // the inset's margins
  Qt::Alignment best = Qt::AlignTop | Qt::AlignRight;
  int fewest = std::numeric_limits<int>::max();
  for (const Qt::Alignment corner : {Qt::AlignTop | Qt::AlignRight, Qt::AlignTop | Qt::AlignLeft,
                                     Qt::AlignBottom | Qt::AlignRight, Qt::AlignBottom | Qt::AlignLeft}) {
    QRect box(QPoint(), size);
    box.moveTopLeft(QPoint(corner & Qt::AlignLeft ? inner.left() : inner.right() - size.width(),
                           corner & Qt::AlignTop ? inner.top() : inner.bottom() - size.height()));
    int covered = 0;
    for (int line = 0; line < m_lines->seriesCount(); ++line) {
      const QVector<double>& keys = m_lines->keys(line);
      const QVector<double>& values = m_lines->values(line);
      // At most ~512 points a line: this runs before every replot, and a long run has many.
      const int stride = std::max(1, int(keys.size()) / 512);
      for (int i = 0; i < keys.size(); i += stride) {
        const QPointF at(m_plot->xAxis->coordToPixel(keys[i]), m_plot->yAxis->coordToPixel(values[i]));
        if (box.contains(at.toPoint())) ++covered;
        if (i == 0) continue;
        const QPointF before(m_plot->xAxis->coordToPixel(keys[i - stride]), m_plot->yAxis->coordToPixel(values[i - stride]));
        if (box.contains(((at + before) / 2).toPoint())) ++covered;
      }
    }
    if (covered < fewest) {
      fewest = covered;
      best = corner;
    }
  }
  return best;
}

std::vector<SeriesKey> GradNormPlot::linesOf(const ViewState& state, RankMode mode) {
  std::vector<SeriesKey> keys;
  for (const auto& key : state.store->seriesKeys()) {
    if (key.kind != CaptureKind::Gradient) continue;
    if (mode == RankMode::OneRank && key.rank != state.shownRank()) continue;
    if (mode == RankMode::Median) {
      if (!keys.empty() && sameTensor(keys.back(), key)) continue;  // keys are sorted: a layer's ranks are adjacent
      SeriesKey layer = key;
      layer.rank = -1;
      keys.push_back(layer);
      continue;
    }
    keys.push_back(key);
  }
  return keys;
}

QColor GradNormPlot::layerColor(const SeriesKey& key) const { return m_colours.colour(key); }

void GradNormPlot::setModuleOrder(std::vector<std::string> order) {
  m_colours.setModuleOrder(std::move(order));
  m_keys.clear();  // coloured in the new order at the next refresh
  m_follower.forget();
  m_version = 0;
}

void GradNormPlot::colourByPlace(const std::vector<SeriesKey>& layers) {
  if (!m_colours.assign(layers)) {
    if (m_placeScale) {
      m_plot->plotLayout()->remove(m_placeScale);
      m_plot->plotLayout()->simplify();
      m_placeScale = nullptr;
    }
    return;
  }
  if (!m_placeScale) {
    m_placeScale = new QCPColorScale(m_plot);
    m_plot->plotLayout()->addElement(1, 1, m_placeScale);
    m_placeScale->setType(QCPAxis::atRight);
    m_placeScale->setBarWidth(10);
    m_placeScale->setGradient(LayerColours::placeGradient());
    m_placeScale->axis()->setTicker(QSharedPointer<QCPAxisTicker>(new ReadableTicker));
    m_placeScale->axis()->ticker()->setTickCount(3);
    m_placeScale->axis()->setLabel(tr("layer, first to last"));
    // The bar as tall as the plot's axis rect (one group, kept while the scale comes and goes).
    QCPMarginGroup* margins = m_plot->axisRect()->marginGroup(QCP::msTop);
    if (!margins) {
      margins = new QCPMarginGroup(m_plot);
      m_plot->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    }
    m_placeScale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  }
  m_placeScale->setDataRange(QCPRange(1, double(layers.size())));
}

std::vector<std::pair<QString, QColor>> GradNormPlot::legendEntries() const {
  std::vector<std::pair<QString, QColor>> entries;
  for (std::size_t i = 0; i < m_keys.size(); ++i) {
    if (i > 0 && sameTensor(m_keys[i - 1], m_keys[i])) continue;  // a layer's ranks share its colour
    entries.emplace_back(layerLabel(m_keys[i]), layerColor(m_keys[i]));
  }
  return entries;
}

bool GradNormPlot::savePng(const QString& path) const {
  const auto entries = legendEntries();
  return entries.size() <= kMaxLegendEntries ? PlotPage::savePng(path) : savePngWithLegend(path, entries);
}

void GradNormPlot::resetView() {
  m_colours.forgetPalette();
  // Another store is shown: read it whole, even one that took the last one's address and
  // holds as many captures (its export opened over a run kept the empty plot's axes).
  m_follower.forget();
  m_version = 0;
  PlotPage::resetView();
}

void GradNormPlot::rebuildGraphs() {
  m_plot->clearGraphs();
  m_legendModules.clear();
  // Line colors follow the layer: a layer's ranks share its color, a shade apart.
  std::vector<SeriesKey> layers;
  for (const auto& key : m_keys) {
    if (layers.empty() || !sameTensor(layers.back(), key)) layers.push_back(key);
  }
  colourByPlace(layers);
  // With many layers a legend would cover the plot (and its layout alone costs more than
  // drawing): show it only while it stays readable.
  m_layerCount = layers.size();
  for (std::size_t i = 0; i < layers.size() && layers.size() <= kMaxLegendEntries; ++i) {
    QCPGraph* entry = m_plot->addGraph();
    // A long path shortened between its parts as everywhere a layer is named (its block's index
    // kept: "…ormer.h.10.attn.c_proj" was cut mid-word); hovering its line gives the whole path.
    const QFontMetrics metrics(m_plot->legend->font());
    entry->setName(PathElideDelegate::elidePath(layerLabel(layers[i]), metrics, 24 * metrics.averageCharWidth()));
    entry->setPen(QPen(layerColor(layers[i]), 1.5));
    entry->setVisible(false);
    m_legendModules.push_back(layers[i].module);
  }
  // The compared run's dashed lines, each in its layer's colour: one entry says what dashes are
  // (they had none, so which run was which was not said).
  m_comparedEntry = m_plot->addGraph();
  m_comparedEntry->setName(tr("compared run (dashed)"));
  m_comparedEntry->setPen(QPen(QColor(110, 110, 110), 1.5, Qt::DashLine));
  m_comparedEntry->setVisible(false);
  m_comparedEntry->setSelectable(QCP::stNone);
  if (m_compared->seriesCount() == 0 || m_legendModules.empty()) m_comparedEntry->removeFromLegend();
  // The band: the highlighted layer's lowest and highest rank, filled between.
  m_bandLow = m_plot->addGraph();
  m_bandHigh = m_plot->addGraph();
  for (QCPGraph* edge : {m_bandLow, m_bandHigh}) {
    edge->removeFromLegend();
    edge->setVisible(false);
    edge->setSelectable(QCP::stNone);
  }
  m_bandHigh->setChannelFillGraph(m_bandLow);
}

void GradNormPlot::reloadLines() {
  m_lines->reset(int(m_keys.size()));
  m_lineNonZero.assign(m_keys.size(), 0);
  m_bands.assign(m_mode == RankMode::Median ? m_keys.size() : 0, Band());
  int shade = 0;
  for (std::size_t i = 0; i < m_keys.size(); ++i) {
    if (i == 0 || !sameTensor(m_keys[i - 1], m_keys[i])) shade = 0;
    m_lines->setColor(int(i), layerColor(m_keys[i]).darker(100 + 30 * shade++));
  }
}

void GradNormPlot::updateLines(const ViewState& state) {
  const RankMode mode = rankModeOf(state);
  const std::vector<SeriesKey> keys = linesOf(state, mode);
  const int rankCount = int(std::max<std::size_t>(1, state.ranks.size()));
  const bool changed = keys != m_keys || mode != m_mode || rankCount != m_rankCount;
  const bool reload = m_follower.mustReload(state.store.get()) || changed;
  if (changed) {
    m_keys = keys;
    m_mode = mode;
    m_rankCount = rankCount;
    rebuildGraphs();
  }
  if (reload) reloadLines();
  if (m_mode == RankMode::Median) {
    updateSpread(state);
    return;
  }
  for (std::size_t i = 0; i < m_keys.size(); ++i) {
    const int line = int(i);
    const QVector<double>& have = m_lines->keys(line);
    const std::int64_t from = have.isEmpty() ? 0 : std::int64_t(have.back());
    const auto points = state.store->values(m_keys[i], &TensorStats::l2norm, from);
    std::size_t next = 0;
    if (!have.isEmpty()) {
      bool dropShown = false;
      next = StoreFollower::firstNew(points, from, &dropShown);
      if (dropShown) m_lines->removeLast(line);
    }
    QVector<double> steps, norms;
    steps.reserve(qsizetype(points.size() - next));
    norms.reserve(qsizetype(points.size() - next));
    for (; next < points.size(); ++next) {
      steps.append(double(points[next].step));
      norms.append(points[next].value);
      if (points[next].value != 0) m_lineNonZero[i] = 1;
    }
    m_lines->append(line, steps, norms);
  }
}

void GradNormPlot::updateSpread(const ViewState& state) {
  // Only steps every live rank has ended are drawn (latestStep): a median of the ranks that
  // happen to be ahead would be redrawn later. The last step held is read again, as above.
  for (std::size_t i = 0; i < m_keys.size(); ++i) {
    const int line = int(i);
    const QVector<double>& have = m_lines->keys(line);
    const std::int64_t from = have.isEmpty() ? 0 : std::int64_t(have.back());
    if (!have.isEmpty()) m_lines->removeLast(line);
    Band& band = m_bands[i];
    while (!band.steps.isEmpty() && band.steps.back() >= double(from)) {
      band.steps.removeLast();
      band.low.removeLast();
      band.high.removeLast();
    }
    std::vector<std::vector<ScalarPoint>> perRank;
    for (int rank : state.ranks) {
      SeriesKey key = m_keys[i];
      key.rank = rank;
      perRank.push_back(state.store->values(key, &TensorStats::l2norm, from));
    }
    QVector<double> steps, medians;
    for (const auto& p : rankSpread(perRank, state.latestStep)) {
      steps.append(double(p.step));
      medians.append(p.median);
      if (p.median != 0 || p.high != 0) m_lineNonZero[i] = 1;
      band.steps.append(double(p.step));
      band.low.append(p.low);
      band.high.append(p.high);
    }
    m_lines->append(line, steps, medians);
  }
}

void GradNormPlot::updateBand() {
  int chosen = -1;
  for (std::size_t i = 0; i < m_keys.size() && m_mode == RankMode::Median; ++i) {
    if (m_keys[i].module == m_highlighted) {
      chosen = int(i);
      break;
    }
  }
  if (!m_bandLow) return;
  const bool show = chosen >= 0 && std::size_t(chosen) < m_bands.size();
  m_bandLow->setVisible(show);
  m_bandHigh->setVisible(show);
  if (!show) return;
  const Band& band = m_bands[std::size_t(chosen)];
  m_bandLow->setData(band.steps, band.low, true);
  m_bandHigh->setData(band.steps, band.high, true);
  QColor color = layerColor(m_keys[std::size_t(chosen)]);  // the median line's: one line per layer in this mode
  m_bandLow->setPen(QPen(color, 0.8, Qt::DotLine));
  m_bandHigh->setPen(QPen(color, 0.8, Qt::DotLine));
  color.setAlpha(60);
  m_bandHigh->setBrush(color);
}

void GradNormPlot::refresh(const ViewState& state) {
  setStepMarker(double(state.step), state.step >= 0);
  if (!state.store) {
    m_plot->clearGraphs();
    m_bandLow = m_bandHigh = nullptr;
    m_legendModules.clear();
    m_bands.clear();
    m_lines->reset(0);
    m_compared->reset(0);
    m_comparedDrawn = nullptr;
    m_keys.clear();
    m_lineNonZero.clear();
    sayZeroLayers();
    colourByPlace(m_keys);  // no lines: no scale
    m_follower.forget();
    m_version = 0;
    m_plot->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  const std::string highlighted = state.hasSelection ? state.selected.module : std::string();
  const bool sameStore = state.store.get() == m_follower.store();
  const RankMode mode = rankModeOf(state);
  const bool sameRanks = mode == m_mode && (mode != RankMode::OneRank || m_keys.empty() || m_keys.front().rank == state.shownRank());
  const bool comparedChanged = state.compared.get() != m_comparedDrawn;
  if (state.store->version() == m_version && sameStore && highlighted == m_highlighted && sameRanks && !comparedChanged) {
    replotMarker();  // scrubbing: nothing but the marker moved
    return;
  }
  // New lines (more captures, another store, another rank) are fitted anew.
  const bool linesChanged = state.store->version() != m_version || !sameStore || !sameRanks;
  if (linesChanged) {
    m_version = state.store->version();
    updateLines(state);
    sayZeroLayers();
    // Steps further apart than the store keeps them are a gap in the captures (hooks off,
    // steps dropped by an attached script): the lines break there.
    m_lines->setMaxKeyGap(double(state.store->stride()));
  }
  if (linesChanged || comparedChanged || m_version != m_comparedVersion) {
    updateCompared(state);
    autoFit();
  }
  highlight(highlighted);
  updateBand();
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void GradNormPlot::highlight(const std::string& module) {
  m_highlighted = module;
  int chosen = -1;
  for (std::size_t i = 0; i < m_keys.size(); ++i) {
    if (m_keys[i].module == module) {  // the lowest rank's line of a job's (keys ascend)
      chosen = int(i);
      break;
    }
  }
  m_lines->setHighlighted(chosen);
}

void GradNormPlot::onMouseMove(QMouseEvent* event) {
  int series = -1, index = -1;
  if (!m_lines->pointAt(event->position(), 12, &series, &index)) {
    QToolTip::hideText();
    return;
  }
  const QString text = tr("%1\nstep %2: %3")
                           .arg(seriesLabel(m_keys[std::size_t(series)], m_rankCount))
                           .arg(m_lines->keys(series)[index])
                           .arg(m_lines->values(series)[index], 0, 'g', 5);
  QToolTip::showText(event->globalPosition().toPoint(), text, m_plot);
}

int GradNormPlot::lineCount() const { return m_lines->seriesCount(); }

int GradNormPlot::comparedLineCount() const { return m_compared->seriesCount(); }

int GradNormPlot::comparedPointCount(const std::string& module) const {
  for (std::size_t i = 0; i < m_keys.size() && int(i) < m_compared->seriesCount(); ++i) {
    if (m_keys[i].module == module && m_keys[i].call == 0 && m_keys[i].index == 0) return int(m_compared->keys(int(i)).size());
  }
  return 0;
}

void GradNormPlot::updateCompared(const ViewState& state) {
  m_comparedDrawn = state.compared.get();
  m_comparedVersion = m_version;
  const bool draw = state.compared && m_mode == RankMode::OneRank;  // a job's many lines: the shown run's alone
  m_compared->reset(draw ? int(m_keys.size()) : 0);
  if (m_comparedEntry) {
    if (draw && !m_legendModules.empty()) m_comparedEntry->addToLegend();
    else m_comparedEntry->removeFromLegend();
  }
  if (!draw) return;
  for (std::size_t i = 0; i < m_keys.size(); ++i) {
    m_compared->setColor(int(i), layerColor(m_keys[i]));
    QVector<double> steps, norms;
    for (const auto& p : state.compared->values(m_keys[i], &TensorStats::l2norm)) {
      steps.append(double(p.step));
      norms.append(p.value);
    }
    m_compared->append(int(i), steps, norms);
  }
  m_compared->setMaxKeyGap(double(state.compared->stride()));
}

QColor GradNormPlot::drawnColor(int line) const { return m_lines->color(line); }

int GradNormPlot::pointCount(const std::string& module) const {
  for (std::size_t i = 0; i < m_keys.size(); ++i) {
    if (m_keys[i].module == module && m_keys[i].call == 0 && m_keys[i].index == 0) {
      return int(m_lines->keys(int(i)).size());
    }
  }
  return 0;
}

QString GradNormPlot::toCsv() const {
  QString csv = QStringLiteral("series,step,l2norm\n");
  for (int i = 0; i < m_lines->seriesCount(); ++i) {
    const QString name = seriesLabel(m_keys[std::size_t(i)], m_rankCount);
    const auto& steps = m_lines->keys(i);
    const auto& norms = m_lines->values(i);
    for (int p = 0; p < steps.size(); ++p) {
      csv += QStringLiteral("\"%1\",%2,%3\n").arg(name).arg(steps[p]).arg(norms[p], 0, 'g', 17);
    }
  }
  return csv;
}

bool GradNormPlot::legendShown() const { return m_plot->legend->visible(); }

QVector<double> GradNormPlot::bandLow() const {
  QVector<double> out;
  if (!m_bandLow || !m_bandLow->visible()) return out;
  for (auto it = m_bandLow->data()->constBegin(); it != m_bandLow->data()->constEnd(); ++it) out.append(it->value);
  return out;
}

QVector<double> GradNormPlot::bandHigh() const {
  QVector<double> out;
  if (!m_bandHigh || !m_bandHigh->visible()) return out;
  for (auto it = m_bandHigh->data()->constBegin(); it != m_bandHigh->data()->constEnd(); ++it) out.append(it->value);
  return out;
}

QVector<double> GradNormPlot::lineValues(int line) const { return m_lines->values(line); }
