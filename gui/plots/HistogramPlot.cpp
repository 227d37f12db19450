#include "plots/HistogramPlot.h"

#include "models/PathElideDelegate.h"
#include "plots/QCustomPlotInclude.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QLayout>
#include <QTextBlock>
#include <QTextDocument>

#include <algorithm>
#include <set>

using namespace hookscope;

namespace {

constexpr int kStatsWidth = 112;  // the statistics beside the plot (they wrap, never cut)

// Bars as one filled step outline: a point at each bin's left edge holding its count, and
// one more at the right edge. One polygon fills far faster than a rectangle per bin.
void fillBars(QCPGraph* bars, const TensorStats& s) {
  const auto edges = s.edges();
  QVector<double> keys, values;
  for (std::size_t i = 0; i < s.histogram.size(); ++i) {
    keys.append(edges[i]);
    values.append(double(s.histogram[i]));
  }
  if (!s.histogram.empty()) {
    keys.append(edges.back());
    values.append(double(s.histogram.back()));
  }
  bars->setData(keys, values, true);
}

QString number(double v) { return std::isnan(v) ? QStringLiteral("nan") : QString::number(v, 'g', 5); }

} // namespace

HistogramPlot::HistogramPlot(QWidget* parent) : PlotPage(tr("Histogram"), parent) {
  m_previous = m_plot->addGraph();
  m_previous->setName(tr("previous step"));
  m_previous->setLineStyle(QCPGraph::lsStepLeft);
  m_previous->setPen(Qt::NoPen);
  m_previous->setBrush(QColor(150, 150, 150, 70));
  m_current = m_plot->addGraph();
  m_current->setName(tr("this step"));
  m_current->setLineStyle(QCPGraph::lsStepLeft);
  m_current->setPen(QPen(QColor(30, 100, 180)));
  m_current->setBrush(QColor(40, 120, 210, 170));
  m_compared = m_plot->addGraph();
  m_compared->setName(tr("compared run"));
  m_compared->setLineStyle(QCPGraph::lsStepLeft);
  m_compared->setPen(QPen(QColor(230, 120, 20), 1.5));
  m_compared->setAntialiased(false);
  // Axis-aligned steps look the same without antialiasing, which costs most of the drawing.
  m_previous->setAntialiasedFill(false);
  m_current->setAntialiasedFill(false);
  m_current->setAntialiased(false);
  m_plot->xAxis->setLabel(tr("value"));
  m_plot->yAxis->setLabel(tr("count"));
  m_stats = new QLabel(this);
  m_stats->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_stats->setMinimumWidth(kStatsWidth);
  m_stats->setMaximumWidth(2 * kStatsWidth);
  m_stats->setWordWrap(true);
  m_stats->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  m_stats->setText(tr("Select a hooked layer\nin the tree."));
  // Statistics beside the plot.
  auto* outer = static_cast<QVBoxLayout*>(layout());
  outer->removeWidget(m_plot);
  auto* row = new QHBoxLayout();
  row->addWidget(m_plot, 1);
  row->addWidget(m_stats);
  outer->addLayout(row);
}

void HistogramPlot::drawOtherRanks(const ViewState& state, std::int64_t step) {
  // Other ranks' same tensor at this step, outlined (at most a few dozen are readable).
  std::size_t outlines = 0;
  if (step >= 0 && state.ranks.size() > 1) {
    for (int rank : state.ranks) {
      if (rank == state.selected.rank || outlines >= 32) continue;
      SeriesKey key = state.selected;
      key.rank = rank;
      SeriesPoint other;
      if (!state.store->pointAt(key, state.step, &other) || other.step != step) continue;
      if (outlines == m_others.size()) {
        QCPGraph* graph = m_plot->addGraph();
        graph->setLineStyle(QCPGraph::lsStepLeft);
        graph->setPen(QPen(QColor(90, 90, 90, 160), 1));
        graph->setAntialiased(false);
        graph->setName(tr("other ranks"));
        m_others.push_back(graph);
      }
      fillBars(m_others[outlines], other.stats);
      m_others[outlines]->setVisible(true);
      ++outlines;
    }
  }
  for (std::size_t i = outlines; i < m_others.size(); ++i) {
    m_others[i]->data()->clear();
    m_others[i]->setVisible(false);
  }
}

void HistogramPlot::drawCompared(const ViewState& state, std::int64_t step) {
  SeriesPoint compared;  // the same series and step in the compared run, on its own bins
  if (step >= 0 && state.compared && state.compared->pointAt(state.selected, step, &compared) && compared.step == step) {
    fillBars(m_compared, compared.stats);
  } else {
    m_compared->data()->clear();
  }
}

void HistogramPlot::refresh(const ViewState& state) {
  SeriesPoint point, previous;
  m_hasData = state.store && state.hasSelection && state.step >= 0 &&
              state.store->pointAt(state.selected, state.step, &point);
  drawOtherRanks(state, m_hasData ? point.step : -1);
  drawCompared(state, m_hasData ? point.step : -1);
  if (!m_hasData) {
    m_current->data()->clear();
    m_previous->data()->clear();
    if (!userView()) resetView();  // neutral axes, not the last layer's
    m_stats->setText(emptyText(state));
    m_plot->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  m_shown = point.stats;
  m_shownStep = point.step;
  fillBars(m_current, point.stats);
  if (state.store->pointAt(state.selected, point.step - 1, &previous)) {
    fillBars(m_previous, previous.stats);
  } else {
    m_previous->data()->clear();
  }
  const auto& s = point.stats;
  // A long path shortened between its parts as everywhere a layer is named, its block's index
  // kept ("transformer.h.7.mlp.c_fc" → "t.h.7.mlp.c_fc"; cut in the middle it read
  // "transform….mlp.c_fc"); the tooltip has it whole.
  const QString path = QString::fromStdString(state.selected.module.empty() ? "(root)" : state.selected.module);
  QFont bold = m_stats->font();
  bold.setBold(true);
  const QString shownPath = PathElideDelegate::elidePath(path, QFontMetrics(bold), std::max(kStatsWidth, m_stats->width()) - 4);
  m_stats->setToolTip(path);
  QString text = tr("<b>%1</b><br>%2 · step %3%12<br>shape %4<br>%5<br><br>"
                    "min %6<br>max %7<br>mean %8<br>std %9<br>L2 %10<br>zeros %11%")
                     .arg(shownPath.toHtmlEscaped(),
                          captureKindName(state.selected.kind), QString::number(point.step),
                          QString::fromStdString(s.shapeString()), QString::fromStdString(s.dtype),
                          number(s.min), number(s.max), number(s.mean), number(s.std))
                     .arg(number(s.l2norm), QString::number(100.0 * s.zeroFraction, 'f', 1),
                          state.selected.rank == kWholeRank ? tr(" · whole tensor")
                          : state.ranks.size() > 1       ? tr(" · rank %1").arg(state.selected.rank)
                                                         : QString());
  if (s.nanCount || s.infCount) {
    text += tr("<br><span style='color:#c81e1e'><b>NaN %1 · Inf %2</b></span>").arg(s.nanCount).arg(s.infCount);
  } else {
    text += tr("<br>NaN 0 · Inf 0");
  }
  if (s.hasPrecision()) {  // what float16 and fp8 would lose (the Precision tab has them over steps)
    const auto percent = [&s](std::int64_t n) {
      return s.numel > 0 && n > 0 ? QString::number(100.0 * double(n) / double(s.numel), 'g', 2) + '%' : QStringLiteral("0");
    };
    const QString over = tr("f16 over %1").arg(percent(s.f16Overflow));
    text += tr("<br>amax %1<br>%2<br>f16 flush %3<br>E4M3 flush %4<br>E5M2 flush %5")
                .arg(number(s.amax),
                     s.f16Overflow > 0 ? QStringLiteral("<span style='color:#c81e1e'><b>%1</b></span>").arg(over) : over,
                     percent(s.f16Underflow), percent(s.e4m3Underflow), percent(s.e5m2Underflow));
  }
  showStats(text);
  autoFit();
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

// The statistics break between items only ("activation · step 94", "E4M3 flush 0.004%" stay
// whole; a long first line may break after a "·"), as wide as their widest item up to twice
// the least width.
void HistogramPlot::showStats(const QString& html) {
  QString text;
  bool inTag = false;
  for (int i = 0; i < html.size(); ++i) {
    const QChar c = html.at(i);
    inTag = c == QLatin1Char('<') ? true : c == QLatin1Char('>') ? false : inTag;
    const bool afterDot = i > 0 && html.at(i - 1) == QChar(0x00B7);
    text += c == QLatin1Char(' ') && !inTag && !afterDot ? QStringLiteral("&nbsp;") : QString(c);
  }
  QFont bold = m_stats->font();
  bold.setBold(true);
  QTextDocument plain;  // one a redraw: the lines as read, without markup
  plain.setHtml(html);
  int widest = 0;
  for (QTextBlock line = plain.begin(); line.isValid(); line = line.next()) {
    for (const QString& item : line.text().split(QChar::LineSeparator)) {
      widest = std::max(widest, QFontMetrics(bold).horizontalAdvance(item));
    }
  }
  m_stats->setMinimumWidth(std::clamp(widest + 8, kStatsWidth, 2 * kStatsWidth));
  m_stats->setText(text);
  if (m_stats->isHidden()) m_plot->setToolTip(statsText());
}

void HistogramPlot::fitAxes() {
  m_plot->rescaleAxes();
  const QCPRange counts = m_plot->yAxis->range();
  m_plot->yAxis->setRange(0, counts.upper > 0 ? counts.upper * 1.05 : 1);
}

QString HistogramPlot::emptyText(const ViewState& state) const {
  const QString name = QString::fromStdString(state.selected.module.empty() ? "(root)" : state.selected.module).toHtmlEscaped();
  if (!state.store) return tr("Open a model, a capture\nor attach a script.");
  if (!state.hasSelection) {
    if (!state.selectedHooks) return tr("Select a hooked layer\nin the tree.");
    if (state.latestStep < 0) return tr("<b>%1</b> is hooked:<br>run a step.").arg(name);
    // A checkpoint (or any store of parameters alone): no module ran; this one has no weights.
    const auto keys = state.store->seriesKeys();
    if (!keys.empty() && std::all_of(keys.begin(), keys.end(), [](const SeriesKey& k) { return isParameterKind(k.kind); })) {
      return tr("<b>%1</b> has no parameters of its own, and a checkpoint holds parameters only: select a layer "
                "with weights.").arg(name);
    }
    // Hooks fire only when a module's own forward runs; a container has none.
    static const std::set<std::string> containers{"ModuleList", "ModuleDict", "ParameterList", "ParameterDict"};
    if (containers.count(state.selectedType)) {
      return tr("<b>%1</b> is a %2: it holds<br>layers but is never<br>called itself, so no<br>hook fires on it.<br><br>"
                "Hook the layers<br>inside it (its tick<br>box ticks them all).")
          .arg(name, QString::fromStdString(state.selectedType));
    }
    return tr("<b>%1</b> is hooked, but its<br>module was not called in<br>any step, so no hook fired."
              "<br><br>Its parent may use its<br>weights directly (as<br>MultiheadAttention does<br>with out_proj): hook the<br>parent instead. A traced<br>model drops modules<br>whose result it did not<br>use: the scripted file<br>keeps them.")
        .arg(name);
  }
  const QString kind = QString::fromLatin1(captureKindName(state.selected.kind));
  const auto points = state.store->values(state.selected, &TensorStats::l2norm);
  if (!points.empty() && state.step >= 0 && state.step < points.front().step) {
    return tr("No %1 of <b>%2</b><br>at step %3: captures<br>start at step %4.").arg(kind, name).arg(state.step).arg(points.front().step);
  }
  return tr("No %1 captured for<br><b>%2</b> yet: tick it in<br>the tree and run a step.").arg(kind, name);
}

bool HistogramPlot::comparedShown() const { return !m_compared->data()->isEmpty(); }

int HistogramPlot::outlineCount() const {
  return int(std::count_if(m_others.begin(), m_others.end(), [](QCPGraph* g) { return g->visible(); }));
}

int HistogramPlot::barCount() const { return m_hasData ? int(m_shown.histogram.size()) : 0; }
void HistogramPlot::setStatisticsShown(bool shown) {
  if (shown == statisticsShown()) return;
  m_stats->setVisible(shown);
  m_plot->setToolTip(shown ? QString() : statsText());
  layout()->activate();  // the page's minimum width now, for the splitter that places it next
}

bool HistogramPlot::statisticsShown() const { return !m_stats->isHidden(); }

QString HistogramPlot::statsText() const {
  QTextDocument shown;  // as read: no markup, items whole
  shown.setHtml(m_stats->text());
  return shown.toPlainText().replace(QChar::Nbsp, QLatin1Char(' '));
}

QString HistogramPlot::toCsv() const {
  QString csv = QStringLiteral("step,bin_low,bin_high,count\n");
  if (!m_hasData) return csv;
  const auto edges = m_shown.edges();
  for (std::size_t i = 0; i < m_shown.histogram.size(); ++i) {
    csv += QStringLiteral("%1,%2,%3,%4\n")
               .arg(m_shownStep)
               .arg(edges[i], 0, 'g', 17)
               .arg(edges[i + 1], 0, 'g', 17)
               .arg(m_shown.histogram[i]);
  }
  return csv;
}
