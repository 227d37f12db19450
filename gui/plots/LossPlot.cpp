#include "plots/LossPlot.h"

#include "plots/QCustomPlotInclude.h"
#include "store/RankSpread.h"

#include <QComboBox>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

using namespace hookscope;

namespace {

QColor rankColor(int i) {
  static const QColor colors[] = {QColor(200, 60, 40), QColor(31, 119, 180), QColor(44, 160, 44), QColor(148, 103, 189)};
  return colors[i % 4];
}

} // namespace

LossPlot::LossPlot(QWidget* parent) : PlotPage(tr("Loss"), parent) {
  QCPGraph* graph = m_plot->addGraph();
  graph->setName(tr("loss"));
  graph->setPen(QPen(rankColor(0), 1.5));  // few lines: width is cheap
  m_lines.push_back(graph);
  m_compared = m_plot->addGraph();
  m_compared->setName(tr("compared run"));
  m_compared->setPen(QPen(QColor(230, 120, 20), 1.5, Qt::DashLine));
  m_bandLow = m_plot->addGraph();
  m_bandHigh = m_plot->addGraph();
  for (QCPGraph* edge : {m_bandLow, m_bandHigh}) {
    edge->removeFromLegend();
    edge->setVisible(false);
    edge->setPen(QPen(QColor(200, 60, 40, 120), 0.8, Qt::DotLine));
  }
  m_bandHigh->setChannelFillGraph(m_bandLow);
  m_bandHigh->setBrush(QColor(200, 60, 40, 50));
  m_bandHigh->setName(tr("min–max over ranks"));
  m_plot->legend->setVisible(false);
  m_plot->legend->setFont(QFont(font().family(), font().pointSize() - 1));
  m_plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
  setStepAxis();
  m_plot->yAxis->setLabel(tr("loss"));
  m_offersLogScale = true;
  // Shown once the store holds scalars besides the loss (an attached script's lr, accuracy...).
  m_chooser = new QComboBox(this);
  m_chooser->setToolTip(tr("Per-step scalar to plot"));
  m_chooser->setVisible(false);
  static_cast<QVBoxLayout*>(layout())->insertWidget(0, m_chooser);
  connect(m_chooser, &QComboBox::activated, this, [this](int index) { setScalar(m_chooser->itemText(index)); });
}

void LossPlot::nameScalar(const QString& name) {
  m_name = name;
  m_plot->yAxis->setLabel(name);
  setHeading(name == QLatin1String("loss") ? tr("Loss") : name);
  m_version = 0;  // drawn again from the store
}

void LossPlot::setScalar(const QString& name) {
  if (name == m_name) return;
  nameScalar(name);
  fitToData();  // the new scalar's own range
  refresh(m_state);
}

QString LossPlot::fileName() const {
  QString name = m_name;
  for (QChar& c : name) {
    if (!c.isLetterOrNumber() && c != QLatin1Char('-')) c = QLatin1Char('_');  // a scalar named "val/loss"
  }
  return name.isEmpty() ? PlotPage::fileName() : name;
}

void LossPlot::resetView() {
  nameScalar(QStringLiteral("loss"));
  PlotPage::resetView();
}

void LossPlot::logScaleChanged() {
  m_version = 0;
  fitToData();
  refresh(m_state);
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

void LossPlot::ensureLines(int count) {
  while (int(m_lines.size()) < count) {
    QCPGraph* graph = m_plot->addGraph();
    graph->setPen(QPen(rankColor(int(m_lines.size())), 1.5));
    m_lines.push_back(graph);
  }
  while (int(m_lines.size()) > count && m_lines.size() > 1) {
    m_plot->removeGraph(m_lines.back());
    m_lines.pop_back();
  }
}

void LossPlot::refresh(const ViewState& state) {
  m_state = state;
  setStepMarker(double(state.step), state.step >= 0);
  const bool sameRanks = state.allRanks() == m_allRanks && state.shownRank() == m_shownRank;
  if (!state.store) {
    ensureLines(1);
    m_lines[0]->data()->clear();
    m_compared->data()->clear();
    m_comparedDrawn = nullptr;
    m_bandLow->setVisible(false);
    m_bandHigh->setVisible(false);
    m_plot->legend->setVisible(false);
    m_version = 0;
  } else if (state.store->version() == m_version && sameRanks && state.compared.get() == m_comparedDrawn) {
    replotMarker();  // scrubbing: nothing but the marker moved
    return;
  } else {
    m_version = state.store->version();
    m_allRanks = state.allRanks();
    m_shownRank = state.shownRank();
    updateChoices(state.store->scalarNames());
    const std::string name = m_name.toStdString();
    const bool median = state.drawsMedian();
    m_ranks = !m_allRanks ? std::vector<int>{m_shownRank} : median ? std::vector<int>{-1} : state.ranks;
    ensureLines(int(m_ranks.size()));
    m_bandLow->setVisible(median);
    m_bandHigh->setVisible(median);
    if (median) {
      // Steps every live rank has ended (latestStep) only: see GradNormPlot.
      std::vector<std::vector<ScalarPoint>> perRank;
      for (int rank : state.ranks) perRank.push_back(state.store->scalars(name, rank));
      QVector<double> steps, medians, lows, highs;
      for (const auto& p : rankSpread(perRank, state.latestStep)) {
        steps.append(double(p.step));
        medians.append(p.median);
        lows.append(p.low);
        highs.append(p.high);
      }
      m_lines[0]->setData(steps, medians, true);
      m_lines[0]->setName(tr("median of %1 ranks").arg(state.ranks.size()));
      m_bandLow->setData(steps, lows, true);
      m_bandHigh->setData(steps, highs, true);
    } else {
      for (std::size_t i = 0; i < m_ranks.size(); ++i) {
        QVector<double> steps, values;
        for (const auto& p : state.store->scalars(name, m_ranks[i])) {
          steps.append(double(p.step));
          values.append(p.value);
        }
        m_lines[i]->setData(steps, values, true);
        m_lines[i]->setName(m_allRanks ? tr("rank %1").arg(m_ranks[i]) : m_name);
      }
    }
    // One step alone is a point, not a line: drawn as a dot until a second step joins it.
    for (QCPGraph* line : m_lines) {
      line->setScatterStyle(line->data()->size() == 1 ? QCPScatterStyle(QCPScatterStyle::ssDisc, 6)
                                                       : QCPScatterStyle(QCPScatterStyle::ssNone));
    }
    // The compared run's same scalar (of the rank shown), dashed.
    QVector<double> steps, values;
    for (const auto& p : state.compared ? state.compared->scalars(name, m_shownRank) : std::vector<ScalarPoint>()) {
      steps.append(double(p.step));
      values.append(p.value);
    }
    m_compared->setData(steps, values, true);
    m_comparedDrawn = state.compared.get();
    // Named in the legend only while a run is compared (a job's legend otherwise lists a line
    // that is not there).
    if (state.compared) {
      m_compared->addToLegend();
    } else {
      m_compared->removeFromLegend();
    }
    m_plot->legend->setVisible(m_allRanks);
    autoFit();
  }
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void LossPlot::fitAxes() {
  // Keys span every step, also one whose loss is NaN; values only the finite ones (and on a log
  // axis only the positive ones: it cannot show the others).
  double first = INFINITY, last = -INFINITY, lo = INFINITY, hi = -INFINITY;
  std::vector<QCPGraph*> drawn = m_lines;
  drawn.push_back(m_compared);
  if (m_bandLow->visible()) {
    drawn.push_back(m_bandLow);
    drawn.push_back(m_bandHigh);
  }
  for (const QCPGraph* graph : drawn) {
    const auto* data = graph->data().data();
    if (data->isEmpty()) continue;
    first = std::min(first, data->constBegin()->key);
    last = std::max(last, (data->constEnd() - 1)->key);
    for (auto it = data->constBegin(); it != data->constEnd(); ++it) {
      if (!std::isfinite(it->value) || (m_log && it->value <= 0)) continue;
      lo = std::min(lo, it->value);
      hi = std::max(hi, it->value);
    }
  }
  if (first > last) return;
  m_plot->xAxis->setRange(stepRange(first, last));
  if (lo <= hi) m_plot->yAxis->setRange(paddedRange(lo, hi, m_log));
}

int LossPlot::pointCount() const { return m_lines[0]->data()->size(); }
int LossPlot::comparedPointCount() const { return m_compared->data()->size(); }
int LossPlot::lineCount() const { return int(m_lines.size()); }
bool LossPlot::bandShown() const { return m_bandLow->visible(); }

QString LossPlot::toCsv() const {
  if (m_bandLow->visible()) {
    QString csv = QStringLiteral("step,%1_median,%1_min,%1_max\n").arg(m_name);
    const auto* median = m_lines[0]->data().data();
    auto low = m_bandLow->data()->constBegin();
    auto high = m_bandHigh->data()->constBegin();
    for (auto it = median->constBegin(); it != median->constEnd(); ++it, ++low, ++high) {
      csv += QStringLiteral("%1,%2,%3,%4\n").arg(it->key).arg(it->value, 0, 'g', 17).arg(low->value, 0, 'g', 17).arg(high->value, 0, 'g', 17);
    }
    return csv;
  }
  const bool ranks = m_lines.size() > 1;
  QString csv = ranks ? QStringLiteral("rank,step,%1\n").arg(m_name) : QStringLiteral("step,%1\n").arg(m_name);
  for (std::size_t i = 0; i < m_lines.size(); ++i) {
    const QCPGraph* graph = m_lines[i];
    for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it) {
      if (ranks) csv += QStringLiteral("%1,").arg(m_ranks[i]);
      csv += QStringLiteral("%1,%2\n").arg(it->key).arg(it->value, 0, 'g', 17);
    }
  }
  return csv;
}
