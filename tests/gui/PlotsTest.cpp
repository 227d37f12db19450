// The plot pages on stores filled by hand: axes that hold every drawn point, gaps that stay
// gaps, a heatmap without holes, a legend that keeps to a corner, and the step slider's keys.
#include "panels/PlotsPanel.h"
#include "panels/AlertsPanel.h"
#include "models/ModuleTreeModel.h"
#include "plots/GradNormPlot.h"
#include "plots/HeatmapPlot.h"
#include "plots/HistogramPlot.h"
#include "plots/LineBundle.h"
#include "plots/LossPlot.h"
#include "plots/QCustomPlotInclude.h"
#include "plots/ReadableTicker.h"
#include "AxisLabels.h"

#include <QComboBox>
#include <QSlider>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QFile>
#include <QTest>

#include <algorithm>
#include <cmath>

using hookscope::CaptureKind;
using hookscope::CaptureStore;
using hookscope::SeriesKey;
using hookscope::TensorStats;

namespace {

TensorStats gaussianStats(double scale, double l2norm) {
  TensorStats s;
  s.shape = {64, 64};
  s.dtype = "float32";
  s.numel = 4096;
  s.histLow = -3 * scale;
  s.histHigh = 3 * scale;
  s.histogram.resize(64);
  for (int b = 0; b < 64; ++b) {
    const double x = -3 + 6 * (b + 0.5) / 64;
    s.histogram[std::size_t(b)] = std::uint64_t(std::lround(4096 * 6.0 / 64 * std::exp(-x * x / 2) / std::sqrt(2 * M_PI))) + 1;
  }
  s.min = s.histLow;
  s.max = s.histHigh;
  s.l2norm = l2norm;
  return s;
}

struct CsvPoint {
  QString series;
  double step;
  double value;
};

// What the gradient-norm plot draws, read back from its CSV export.
std::vector<CsvPoint> drawnNorms(const GradNormPlot& plot) {
  std::vector<CsvPoint> points;
  const QStringList lines = plot.toCsv().split('\n', Qt::SkipEmptyParts);
  for (int i = 1; i < lines.size(); ++i) {
    const QStringList cells = lines[i].split(',');
    points.push_back({cells[0], cells[1].toDouble(), cells[2].toDouble()});
  }
  return points;
}

// Every finite (and, on a log axis, positive) point lies inside both axes' ranges.
int pointsOffTheChart(GradNormPlot& plot) {
  const QCPRange x = plot.plot()->xAxis->range(), y = plot.plot()->yAxis->range();
  int off = 0;
  for (const auto& p : drawnNorms(plot)) {
    if (!std::isfinite(p.value) || (plot.logScale() && p.value <= 0)) continue;
    if (!x.contains(p.step) || !y.contains(p.value)) {
      qWarning("off the chart: %s step %g value %g; x %g..%g, y %g..%g", qPrintable(p.series), p.step, p.value, x.lower,
               x.upper, y.lower, y.upper);
      ++off;
    }
  }
  return off;
}

// The panel at a desktop size, drawing from `store`.
void showOn(PlotsPanel& panel, const std::shared_ptr<CaptureStore>& store) {
  panel.resize(1000, 700);
  panel.show();
  panel.setStore(store);
}

// The heatmap of fc's activations at `steps` (each step's statistics from `statsAt`), in a panel of
// a desktop size, fc selected: the heatmap tests' start.
template <typename StatsAt>
HeatmapPlot* heatmapOfFc(PlotsPanel& panel, const std::vector<std::int64_t>& steps, StatsAt&& statsAt) {
  auto store = std::make_shared<CaptureStore>();
  panel.resize(1000, 700);
  panel.setStore(store);
  const SeriesKey key{"fc", 0, CaptureKind::Activation, 0};
  for (const std::int64_t step : steps) store->add(step, key, statsAt(step));
  panel.setSelectedModule("fc");
  panel.refresh();
  return panel.heatmap();
}

} // namespace

class PlotsTest : public QObject {
  Q_OBJECT

private Q_SLOTS:
  void gradientNormAxesHoldEveryPointFromOneMillionthToAThousand_data() {
    QTest::addColumn<bool>("log");
    QTest::newRow("log") << true;
    QTest::newRow("linear") << false;
  }

  void gradientNormAxesHoldEveryPointFromOneMillionthToAThousand() {
    QFETCH(bool, log);
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    panel.gradNorms()->setLogScale(log);
    const char* layers[] = {"layer1", "layer2", "layer3", "fc"};
    for (int step = 0; step < 40; ++step) {
      for (int l = 0; l < 4; ++l) {
        // From 1e-6 at step 0 to 1e3 at step 39, each layer a decade apart.
        const double norm = std::pow(10.0, -6 + 9.0 * step / 39.0 - l);
        store->add(step, SeriesKey{layers[l], 0, CaptureKind::Gradient, 0}, gaussianStats(1, norm));
      }
      panel.refresh();
      QCOMPARE(pointsOffTheChart(*panel.gradNorms()), 0);
    }
    QCOMPARE(int(drawnNorms(*panel.gradNorms()).size()), 160);
    // The other scale fits again at once.
    panel.gradNorms()->setLogScale(!log);
    QCOMPARE(pointsOffTheChart(*panel.gradNorms()), 0);
  }

  void theRanksOfAJobAreDrawnPerRankOrAsAMedianWithItsBand_data() {
    QTest::addColumn<int>("ranks");
    QTest::newRow("2 ranks: a line each") << 2;
    QTest::newRow("8 ranks: median and band") << 8;
  }

  void theRanksOfAJobAreDrawnPerRankOrAsAMedianWithItsBand() {
    QFETCH(int, ranks);
    auto store = std::make_shared<CaptureStore>();
    const std::vector<std::string> layers = {"enc", "dec", "head"};
    // Rank r's norm of layer l at step s: (1 + s) * 10^-l * (1 + r / 10); loss 5 - s / 10 + r.
    auto norm = [](int l, int s, int r) { return (1.0 + s) * std::pow(10.0, -l) * (1.0 + r / 10.0); };
    for (int step = 0; step < 30; ++step) {
      for (int r = 0; r < ranks; ++r) {
        for (int l = 0; l < 3; ++l) {
          store->add(step, SeriesKey{layers[std::size_t(l)], 0, CaptureKind::Gradient, 0, r}, gaussianStats(1 + r, norm(l, step, r)));
          store->add(step, SeriesKey{layers[std::size_t(l)], 0, CaptureKind::Activation, 0, r}, gaussianStats(1 + r, 1));
        }
        store->addScalar(step, "loss", 5 - step / 10.0 + r, r);
      }
    }
    PlotsPanel panel;
    showOn(panel, store);
    panel.setSelectedModule("dec");
    QVERIFY(panel.rankChooser()->isVisibleTo(&panel));
    QCOMPARE(panel.rankChooser()->count(), ranks + 1);
    QCOMPARE(panel.rank(), -1);  // all ranks at first
    GradNormPlot* norms = panel.gradNorms();
    LossPlot* loss = panel.loss();
    if (ranks <= 4) {
      QCOMPARE(norms->rankMode(), GradNormPlot::RankMode::LinePerRank);
      QCOMPARE(norms->lineCount(), 3 * ranks);
      QCOMPARE(loss->lineCount(), ranks);
      QVERIFY(!loss->bandShown());
      QVERIFY(loss->toCsv().contains(QStringLiteral("\n1,29,%1\n").arg(5 - 2.9 + 1, 0, 'g', 17)));
    } else {
      QCOMPARE(norms->rankMode(), GradNormPlot::RankMode::Median);
      QCOMPARE(norms->lineCount(), 3);
      // "dec" (layer 1) sorts first: its median over ranks 0..7 is the mean of ranks 3 and 4.
      QCOMPARE(norms->lineKey(0).module, std::string("dec"));
      const QVector<double> median = norms->lineValues(0);
      QCOMPARE(median.size(), 30);
      QVERIFY(std::abs(median[10] - norm(1, 10, 0) * (1 + 0.35)) < 1e-12);
      // The selected layer's band runs from rank 0 to rank 7.
      const QVector<double> low = norms->bandLow(), high = norms->bandHigh();
      QCOMPARE(low.size(), 30);
      QVERIFY(std::abs(low[10] - norm(1, 10, 0)) < 1e-12);
      QVERIFY(std::abs(high[10] - norm(1, 10, 7)) < 1e-12);
      // Drawn on the chart: the band's extremes lie inside the value axis.
      QVERIFY(norms->plot()->yAxis->range().contains(high[29]));
      QVERIFY(norms->plot()->yAxis->range().contains(low[0]));
      QCOMPARE(loss->lineCount(), 1);
      QVERIFY(loss->bandShown());
      QVERIFY(loss->plot()->yAxis->range().contains(5 + 7));  // rank 7's loss at step 0
    }
    QCOMPARE(pointsOffTheChart(*norms), 0);
    // The histogram: rank 0's bars, the other ranks' outlines.
    QCOMPARE(panel.histogram()->outlineCount(), ranks - 1);
    QVERIFY(panel.histogram()->statsText().contains(QStringLiteral("rank 0")));

    // One rank: its lines only, its loss, its histogram with the others outlined.
    panel.setRank(1);
    QCOMPARE(norms->rankMode(), GradNormPlot::RankMode::OneRank);
    QCOMPARE(norms->lineCount(), 3);
    for (int line = 0; line < 3; ++line) QCOMPARE(norms->lineKey(line).rank, 1);
    QCOMPARE(norms->lineValues(0)[5], norm(1, 5, 1));
    QCOMPARE(loss->lineCount(), 1);
    QVERIFY(loss->toCsv().startsWith(QStringLiteral("step,loss\n0,6\n")));
    QVERIFY(panel.histogram()->statsText().contains(QStringLiteral("rank 1")));
    QCOMPARE(panel.histogram()->outlineCount(), ranks - 1);
    QCOMPARE(pointsOffTheChart(*norms), 0);
  }

  void aZoomedViewStaysUntilFitToData() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    const SeriesKey key{"fc", 0, CaptureKind::Gradient, 0};
    for (int step = 0; step < 10; ++step) store->add(step, key, gaussianStats(1, 1.0 + step));
    panel.refresh();
    GradNormPlot* plot = panel.gradNorms();
    QVERIFY(!plot->userView());
    plot->plot()->xAxis->setRange(2, 4);  // what a wheel zoom does
    QVERIFY(plot->userView());
    for (int step = 10; step < 20; ++step) store->add(step, key, gaussianStats(1, 100.0 * step));
    panel.refresh();
    QCOMPARE(plot->plot()->xAxis->range().lower, 2.0);
    QCOMPARE(plot->plot()->xAxis->range().upper, 4.0);
    plot->fitToData();
    QVERIFY(!plot->userView());
    QCOMPARE(pointsOffTheChart(*plot), 0);
    QCOMPARE(plot->plot()->xAxis->range().upper, 19.0);
  }

  // A deep model's gradients that vanish (float32 underflows to 0 a few hundred layers down) have
  // norms of 0 a log axis cannot draw: the heading says how many layers are not there.
  void layersWhoseGradientNormIsZeroAreSaidInTheHeading() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    const SeriesKey first{"0", 0, CaptureKind::Gradient, 0}, second{"1", 0, CaptureKind::Gradient, 0},
        last{"2", 0, CaptureKind::Gradient, 0};
    for (int step = 0; step < 9; ++step) {
      store->add(step, first, gaussianStats(1, 0.0));
      store->add(step, second, gaussianStats(1, 0.0));
      store->add(step, last, gaussianStats(1, 0.5));
    }
    GradNormPlot* plot = panel.gradNorms();
    // The full heading, or the short one where the plot is too narrow for it.
    const auto says = [&](int zero) {
      const QString heading = plot->heading();
      return heading == QStringLiteral("Gradient norm per layer: %1 of 3 at 0, off the log axis").arg(zero) ||
             heading == QStringLiteral("Gradient norms (%1 at 0)").arg(zero);
    };
    panel.refresh();
    QCOMPARE(plot->zeroLayerCount(), 2);
    QVERIFY2(says(2), qPrintable(plot->heading()));
    // A norm above 0 at a later step: that layer is drawn.
    store->add(9, first, gaussianStats(1, 0.0));
    store->add(9, second, gaussianStats(1, 1e-30));
    store->add(9, last, gaussianStats(1, 0.5));
    panel.refresh();
    QCOMPARE(plot->zeroLayerCount(), 1);
    QVERIFY2(says(1), qPrintable(plot->heading()));
    // A linear axis draws them at 0: nothing to say.
    plot->setLogScale(false);
    QVERIFY2(plot->heading() == QStringLiteral("Gradient norm per layer") || plot->heading() == QStringLiteral("Gradient norms"),
             qPrintable(plot->heading()));
    plot->setLogScale(true);
    QVERIFY2(says(1), qPrintable(plot->heading()));
    // Whole at both widths: the panel's at 1600x1000, and the plots' 520 px of a 1024x700 window
    // with thousands of layers at 0.
    for (int step = 10; step < 12; ++step) {
      for (int layer = 3; layer < 3000; ++layer) store->add(step, SeriesKey{std::to_string(layer), 0, CaptureKind::Gradient, 0}, gaussianStats(1, 0.0));
    }
    for (const QSize size : {QSize(1000, 700), QSize(520, 560)}) {
      panel.resize(size);
      panel.refresh();
      plot->plot()->replot();
      QCOMPARE(plot->zeroLayerCount(), 2998);
      QVERIFY2(plot->headingFits(), qPrintable(QStringLiteral("%1 at %2 px").arg(plot->heading()).arg(plot->width())));
    }
  }

  // A store shown after another of as many captures (the same version) is drawn and fitted
  // anew. (The walkthrough's case, an export opened over its run in the window, also had the new
  // store at the freed one's address: gui_attach's one-window sequence covers it.)
  void aStoreOpenedOverAnotherOfTheSameSizeIsFittedAnew() {
    const SeriesKey key{"fc", 0, CaptureKind::Gradient, 0};
    auto run = std::make_shared<CaptureStore>();
    for (int step = 0; step < 20; ++step) run->add(step < 6 ? step : 5, key, gaussianStats(1, 1.0));
    auto exported = std::make_shared<CaptureStore>();
    for (int step = 0; step < 20; ++step) exported->add(step, key, gaussianStats(1, 50.0 + 40 * step));
    for (int step = 0; step < 20; ++step) exported->addScalar(step, "loss", 3.0 - 0.1 * step);
    for (int step = 0; step < 20; ++step) run->addScalar(step < 6 ? step : 5, "loss", 1.0);
    QCOMPARE(run->version(), exported->version());
    PlotsPanel panel;
    showOn(panel, run);
    panel.setStore(exported);  // what opening the export does
    GradNormPlot* norms = panel.gradNorms();
    QCOMPARE(drawnNorms(*norms).size(), std::size_t(20));
    QCOMPARE(pointsOffTheChart(*norms), 0);
    QCOMPARE(norms->plot()->xAxis->range().upper, 19.0);

    // The heatmap's colour bar says what it draws: the compared run while one is, the shown run
    // once something else is open (it said "compared run" through a later session).
    const SeriesKey act{"fc", 0, CaptureKind::Activation, 0};
    for (int step = 0; step < 3; ++step) exported->add(step, act, gaussianStats(1.0, 1));
    panel.setSelectedModule("fc");
    panel.showKind(CaptureKind::Activation);
    panel.setComparedStore(exported);
    panel.heatmap()->setSource(HeatmapPlot::Source::Compared);
    QCOMPARE(panel.heatmap()->scaleLabel(), QStringLiteral("log10(1 + count), compared run"));
    panel.setComparedStore(nullptr);
    panel.refresh();
    QCOMPARE(panel.heatmap()->scaleLabel(), QStringLiteral("log10(1 + count)"));
    panel.setComparedStore(exported);
    panel.setStore(run);  // a new session: the compared run is chosen again
    QCOMPARE(panel.heatmap()->source(), HeatmapPlot::Source::Shown);
    QCOMPARE(panel.heatmap()->scaleLabel(), QStringLiteral("log10(1 + count)"));
  }

  void theLossAxesHoldEveryFiniteLoss() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    for (int step = 0; step < 30; ++step) {
      store->addScalar(step, "loss", step == 12 ? NAN : 5.0 * std::exp(-0.2 * step));
      panel.refresh();
      const QCPRange x = panel.loss()->plot()->xAxis->range(), y = panel.loss()->plot()->yAxis->range();
      for (const auto& p : store->scalars("loss")) {
        QVERIFY2(x.contains(double(p.step)), qPrintable(QStringLiteral("step %1 outside %2..%3").arg(p.step).arg(x.lower).arg(x.upper)));
        if (std::isfinite(p.value)) {
          QVERIFY2(y.contains(p.value) && p.value > y.lower && p.value < y.upper, "a loss drawn on or off the axis");
        }
      }
    }
  }

  // A scalar chosen while nothing else changes (a paused run) is drawn at once and named in
  // the heading; a loss that spiked by orders of magnitude stays readable on a log axis.
  void theLossPageDrawsTheChosenScalarAtOnceAndTakesALogAxis() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    for (int step = 0; step < 20; ++step) {
      store->addScalar(step, "loss", step == 10 ? 6e9 : 15.0 - step * 0.7);
      store->addScalar(step, "lr", 1e-3 * (step + 1));
    }
    panel.refresh();
    LossPlot* loss = panel.loss();
    QCOMPARE(loss->heading(), QStringLiteral("Loss"));
    loss->setScalar(QStringLiteral("lr"));  // no refresh from the panel: nothing else changed
    QCOMPARE(loss->heading(), QStringLiteral("lr"));
    QVERIFY(loss->toCsv().startsWith(QStringLiteral("step,lr\n")));
    QCOMPARE(loss->pointCount(), 20);
    QVERIFY(loss->plot()->yAxis->range().upper < 1);  // lr's range, not the loss's
    loss->setScalar(QStringLiteral("loss"));
    loss->setLogScale(true);
    const QCPRange y = loss->plot()->yAxis->range();
    QCOMPARE(loss->plot()->yAxis->scaleType(), QCPAxis::stLogarithmic);
    QVERIFY(y.contains(1.7) && y.contains(6e9));
    // The losses of 1.7..15 take up more than a sliver of the axis: a decade of the ten shown.
    QVERIFY(std::log10(15.0 / 1.7) / std::log10(y.upper / y.lower) > 0.05);
  }

  // A sharded tensor: its whole (made of every rank's shard) first under the tensor's plain
  // name and chosen by default, then the shown rank's shard; the statistics say "whole tensor".
  // A job's loss legend names its ranks, and no compared run until one is compared.
  void aShardedTensorShowsItsWholeFirstThenTheShard() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    for (int step = 0; step < 3; ++step) {
      for (int rank = 0; rank < 2; ++rank) {
        const TensorStats shard = gaussianStats(1, 1);
        store->addShard(step, SeriesKey{"fc.weight", 0, CaptureKind::Param, 0, rank}, shard,
                        hookscope::ShardPart{rank, 2, {128, 64}});
        store->addScalar(step, "loss", 1.0 - 0.1 * step, rank);
      }
    }
    panel.setSelectedModule("fc");
    panel.refresh();
    QStringList labels;
    for (QComboBox* box : panel.findChildren<QComboBox*>()) {
      if (box->count() && box->itemText(0).contains(QStringLiteral("param"))) {
        for (int i = 0; i < box->count(); ++i) labels << box->itemText(i);
      }
    }
    QCOMPARE(labels, QStringList({QStringLiteral("whole · param weight"), QStringLiteral("shard · param weight")}));
    QCOMPARE(panel.selectedSeries().rank, hookscope::kWholeRank);
    QVERIFY2(panel.histogram()->statsText().contains(QStringLiteral("whole tensor")), qPrintable(panel.histogram()->statsText()));
    QVERIFY(panel.histogram()->statsText().contains(QStringLiteral("128x64")));
    QCOMPARE(store->ranks(), (std::vector<int>{0, 1}));
    QCPLegend* legend = panel.loss()->plot()->legend;
    QCOMPARE(legend->itemCount(), 2);
    for (int i = 0; i < legend->itemCount(); ++i) {
      auto* item = qobject_cast<QCPPlottableLegendItem*>(legend->item(i));
      QVERIFY(item && item->plottable()->name().startsWith(QStringLiteral("rank ")));
    }
  }

  // Nothing of the previous file stays on the next: the scalar chosen for it ("lr") and the
  // colour bar's range of its counts.
  void anotherStoreShowsItsLossAndItsOwnColours() {
    auto first = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, first);
    const SeriesKey key{"fc", 0, CaptureKind::Activation, 0};
    for (int step = 0; step < 5; ++step) {
      first->addScalar(step, "loss", 2.0 - step * 0.1);
      first->addScalar(step, "lr", 1e-3);
      first->add(step, key, gaussianStats(1.0, 1));
    }
    panel.setSelectedModule("fc");
    panel.refresh();
    panel.loss()->setScalar(QStringLiteral("lr"));
    QVERIFY(panel.heatmap()->colourRange().upper > 1.5);  // log10(1 + hundreds of values)
    auto second = std::make_shared<CaptureStore>();
    panel.setStore(second);
    QCOMPARE(panel.loss()->scalar(), QStringLiteral("loss"));
    QCOMPARE(panel.loss()->heading(), QStringLiteral("Loss"));
    QCOMPARE(panel.heatmap()->colourRange(), QCPRange(0, 1));
    second->addScalar(0, "loss", 0.5);
    panel.refresh();
    QCOMPARE(panel.loss()->pointCount(), 1);
  }

  // Two ticks inside any range, and no more than the plot asked for: a checkpoint's weights of
  // -0.244..0.248 on a histogram with room for two get "-0.2 0 0.2" (QCustomPlot's 0.25 leaves
  // only 0 inside; 0.1 gave five labels that ran together in 100 px).
  void theTickerKeepsTwoTicksInsideAndNoMore() {
    const auto ticks = [](double lower, double upper, int count, int most = 100) {
      ReadableTicker ticker;
      ticker.setTickCount(count);
      ticker.setMaxTicks(most);
      QVector<double> all, inside;
      QVector<QString> labels;
      ticker.generate(QCPRange(lower, upper), QLocale::c(), QLatin1Char('g'), 6, all, nullptr, &labels);
      for (double t : all) {
        if (t >= lower && t <= upper) inside.append(std::round(t * 1e9) / 1e9 + 0.0);  // 3 x 0.2 is 0.6000000000000001
      }
      return inside;
    };
    QCOMPARE(ticks(-0.244, 0.248, 2), (QVector<double>{-0.2, 0.0, 0.2}));
    QCOMPARE(ticks(0, 99, 2), (QVector<double>{0, 50}));
    QCOMPARE(ticks(0.3, 0.7, 2), (QVector<double>{0.4, 0.6}));
    // A 40 px heatmap over 30 steps has room for two labels: 0 and 20, not 0, 10, 20 run together.
    QCOMPARE(ticks(0, 29, 2), (QVector<double>{0, 10, 20}));
    QCOMPARE(ticks(0, 29, 2, 2), (QVector<double>{0, 20}));
    QCOMPARE(ticks(-0.244, 0.248, 2, 1), (QVector<double>{-0.2, 0.0, 0.2}));  // never fewer than two
    QCOMPARE(ReadableTicker::largerStep(1.0), 2.0);
    QCOMPARE(ReadableTicker::largerStep(2.0), 5.0);
    QCOMPARE(ReadableTicker::largerStep(5.0), 10.0);
    QCOMPARE(ReadableTicker::smallerStep(0.25), 0.2);
    QCOMPARE(ReadableTicker::smallerStep(5.0), 2.0);
    QCOMPARE(ReadableTicker::smallerStep(2.0), 1.0);
    QCOMPARE(ReadableTicker::smallerStep(1.0), 0.5);
  }

  // A static plot made narrower (the window shrunk after a run, a checkpoint's one step) takes
  // ticks for its new width, not its old: values of +-0.24 read "-0.2 0 0.2", not "-0.2-0.1...".
  // Values of +-1e5 (weights scaled by 1e4) read "-100000 0 100000" run together at 1024x700:
  // the ticker measures labels as the axis writes them, not in a shorter form.
  void aPlotMadeNarrowerKeepsReadableTicks_data() {
    QTest::addColumn<double>("scale");
    QTest::newRow("+-0.24") << 0.08;
    QTest::newRow("+-1e5") << 1e5 / 3;
  }

  void aPlotMadeNarrowerKeepsReadableTicks() {
    QFETCH(double, scale);
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    panel.resize(1600, 900);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    panel.setStore(store);
    store->add(0, SeriesKey{"fc", 0, CaptureKind::Param, 0}, gaussianStats(scale, 1));
    panel.setSelectedModule("fc");
    panel.refresh();
    QTRY_VERIFY_WITH_TIMEOUT(panel.histogram()->plot()->width() > 440, 30000);  // laid out large first
    panel.resize(440, 360);
    // The layout after the resize is the event waited for, then the replots it queued.
    QTRY_VERIFY_WITH_TIMEOUT(panel.histogram()->plot()->width() < 440, 30000);
    QCoreApplication::sendPostedEvents();
    QCoreApplication::processEvents();
    for (QCPAxis* axis : {panel.histogram()->plot()->xAxis, panel.heatmap()->plot()->yAxis}) {
      const QString why = unreadableAxis(axis);
      QVERIFY2(why.isEmpty(), qPrintable(why));
    }
  }

  // Gradient norms that sit inside one decade still get labelled ticks among them.
  void aLogAxisLabelsTwoTicksInsideTheRangeItShows() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    for (int step = 0; step < 30; ++step) {
      store->add(step, SeriesKey{"a", 0, CaptureKind::Gradient, 0}, gaussianStats(1, 0.002 + 0.0001 * step));
      store->add(step, SeriesKey{"b", 0, CaptureKind::Gradient, 0}, gaussianStats(1, 0.004 + 0.00007 * step));
    }
    panel.refresh();
    QCPAxis* y = panel.gradNorms()->plot()->yAxis;
    QCOMPARE(y->scaleType(), QCPAxis::stLogarithmic);
    panel.gradNorms()->plot()->replot();  // the ticks are made when drawn
    int inside = 0;
    for (double tick : y->tickVector()) inside += y->range().contains(tick);
    QVERIFY2(inside >= 2, qPrintable(QStringLiteral("%1 ticks inside %2..%3").arg(inside).arg(y->range().lower).arg(y->range().upper)));
  }

  // A few lines are drawn antialiased (on screen and in exported PNGs); very many keep the
  // one-span-per-column drawing, whose cost does not grow with the points.
  void fewLinesAreAntialiasedManyAreNot() {
    const auto partialAlpha = [](int points) {
      QCustomPlot plot;
      plot.resize(400, 300);
      auto* lines = new LineBundle(plot.xAxis, plot.yAxis);
      lines->reset(1);
      lines->setColor(0, Qt::blue);
      QVector<double> keys, values;
      for (int i = 0; i < points; ++i) {
        keys.append(i);
        values.append(std::sin(i * 0.37) * 10);
      }
      lines->append(0, keys, values);
      plot.xAxis->setRange(0, points);
      plot.yAxis->setRange(-11, 11);
      plot.toPixmap(400, 300);  // draws
      int partial = 0;
      const QImage& image = lines->image();
      for (int y = 0; y < image.height(); ++y) {
        for (int x = 0; x < image.width(); ++x) {
          const int alpha = qAlpha(image.pixel(x, y));
          partial += alpha > 0 && alpha < 255;
        }
      }
      return partial;
    };
    QVERIFY(partialAlpha(30) > 50);
    QCOMPARE(partialAlpha(40000), 0);
  }

  // One step is a point with nothing to join: drawn as a dot (5 px across), in both of the
  // bundle's ways of drawing, and as a marker on the loss page.
  void aSingleStepIsDrawnAsADot_data() {
    QTest::addColumn<int>("others");  // lines besides, with enough points to switch to spans
    QTest::newRow("antialiased") << 0;
    QTest::newRow("spans") << 20;
  }

  void aSingleStepIsDrawnAsADot() {
    QFETCH(int, others);
    QCustomPlot plot;
    plot.resize(400, 300);
    auto* lines = new LineBundle(plot.xAxis, plot.yAxis);
    lines->reset(1 + others);
    lines->setColor(0, Qt::blue);
    lines->append(0, {3.0}, {5.0});
    for (int l = 1; l <= others; ++l) {
      lines->setColor(l, Qt::red);
      QVector<double> keys, values;
      for (int i = 0; i < 2000; ++i) {
        keys.append(100 + i);  // beyond the range shown
        values.append(1);
      }
      lines->append(l, keys, values);
    }
    plot.xAxis->setRange(0, 10);
    plot.yAxis->setRange(0, 10);
    plot.toPixmap(400, 300);
    int blue = 0;
    const QImage& image = lines->image();
    for (int y = 0; y < image.height(); ++y) {
      for (int x = 0; x < image.width(); ++x) blue += qBlue(image.pixel(x, y)) > 128 && qRed(image.pixel(x, y)) < 64;
    }
    QVERIFY2(blue >= 9, qPrintable(QString::number(blue)));
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    store->addScalar(0, "loss", 2.5);
    panel.refresh();
    QCOMPARE(panel.loss()->pointCount(), 1);
    QCOMPARE(panel.loss()->plot()->graph(0)->scatterStyle().shape(), QCPScatterStyle::ssDisc);
    store->addScalar(1, "loss", 2.0);
    panel.refresh();
    QCOMPARE(panel.loss()->plot()->graph(0)->scatterStyle().shape(), QCPScatterStyle::ssNone);
  }

  // A layer keeps its line's colour when other layers are ticked later (fc stays blue); a file
  // with more layers than the on-screen legend holds exports a PNG with every layer named, in
  // the colours the lines have (by their place in the model: more layers than colours).
  void aLayerKeepsItsColourAndAnExportNamesEveryLine() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    const auto grad = [](const std::string& module) { return SeriesKey{module, 0, CaptureKind::Gradient, 0}; };
    store->add(0, grad("fc"), gaussianStats(1, 1));
    panel.refresh();
    GradNormPlot* norms = panel.gradNorms();
    QCOMPARE(int(norms->legendEntries().size()), 1);
    const QColor fc = norms->legendEntries()[0].second;
    store->add(1, grad("conv1"), gaussianStats(1, 2));  // ticked later, sorted before fc
    store->add(1, grad("fc"), gaussianStats(1, 1));
    panel.refresh();
    const auto entries = norms->legendEntries();
    QCOMPARE(int(entries.size()), 2);
    QCOMPARE(entries[0].first, QStringLiteral("conv1"));
    QCOMPARE(entries[1].second, fc);
    QVERIFY(entries[0].second != fc);
    QTemporaryDir tmp;
    const QString few = tmp.filePath(QStringLiteral("few.png")), many = tmp.filePath(QStringLiteral("many.png"));
    QVERIFY(norms->savePng(few));
    for (int l = 0; l < 30; ++l) store->add(2, grad("blocks." + std::to_string(l) + ".mlp"), gaussianStats(1, 1 + l));
    panel.refresh();
    QCOMPARE(int(norms->legendEntries().size()), 32);
    QVERIFY(!norms->legendShown());  // too many for the plot itself
    QVERIFY(norms->coloursByPlace());
    QColor fcNow;
    for (const auto& entry : norms->legendEntries()) {
      if (entry.first == QStringLiteral("fc")) fcNow = entry.second;
    }
    QVERIFY(fcNow.isValid());
    QVERIFY(norms->savePng(many));
    const QImage withLegend(many), plain(few);
    QCOMPARE(withLegend.width(), plain.width());
    QVERIFY2(withLegend.height() > plain.height() + 100, qPrintable(QStringLiteral("%1 vs %2").arg(withLegend.height()).arg(plain.height())));
    // The legend's rows hold the lines' colours.
    int swatches = 0;
    for (int y = plain.height(); y < withLegend.height(); ++y) {
      for (int x = 0; x < withLegend.width(); x += 2) swatches += QColor(withLegend.pixel(x, y)) == fcNow;
    }
    QVERIFY(swatches > 0);
    // Saved while lr is drawn, the loss page's files are named after lr.
    store->addScalar(0, "lr", 0.1);
    store->addScalar(0, "loss", 1);
    panel.refresh();
    panel.loss()->setScalar(QStringLiteral("lr"));
    QVERIFY(panel.saveAll(tmp.path()).isEmpty());
    QVERIFY(QFile::exists(tmp.filePath(QStringLiteral("lr.png"))));
    QVERIFY(!QFile::exists(tmp.filePath(QStringLiteral("loss.png"))));
  }

  // Past the palette's ten colours (which then repeated and named no layer), a line's colour
  // says where its layer sits in the model, first to last on the scale beside the plot: in the
  // tree's order, not the names' (blocks.10 after blocks.9). A few layers again: the palette.
  void manyLayersAreColouredByTheirPlaceInTheModel() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    std::vector<std::string> order{""};
    for (int l = 0; l < 12; ++l) order.push_back("blocks." + std::to_string(l));
    panel.setModuleOrder(order);
    const auto grad = [](int layer) {
      return SeriesKey{"blocks." + std::to_string(layer), 0, CaptureKind::Gradient, 0};
    };
    for (int l = 0; l < 10; ++l) store->add(0, grad(l), gaussianStats(1, 1 + l));
    panel.refresh();
    GradNormPlot* norms = panel.gradNorms();
    QVERIFY(!norms->coloursByPlace());
    QCOMPARE(norms->layerColor(grad(0)), QColor(31, 119, 180));  // the palette's first
    for (int l = 10; l < 12; ++l) store->add(0, grad(l), gaussianStats(1, 1 + l));
    panel.refresh();
    QVERIFY(norms->coloursByPlace());
    QCOMPARE(norms->layerColor(grad(0)), QColor(13, 8, 135));    // the scale's first colour
    QCOMPARE(norms->layerColor(grad(11)), QColor(240, 132, 46));  // and its last
    for (int l = 1; l < 12; ++l) {  // red grows along the scale: each layer after the one before it
      QVERIFY2(norms->layerColor(grad(l)).red() > norms->layerColor(grad(l - 1)).red(), qPrintable(QString::number(l)));
    }
    for (int line = 0; line < norms->lineCount(); ++line) {
      QCOMPARE(norms->drawnColor(line), norms->layerColor(norms->lineKey(line)));
    }
    auto few = std::make_shared<CaptureStore>();
    for (int l = 0; l < 2; ++l) few->add(0, grad(l), gaussianStats(1, 1 + l));
    panel.setStore(few);
    panel.refresh();
    QVERIFY(!norms->coloursByPlace());
    QCOMPARE(norms->layerColor(grad(0)), QColor(31, 119, 180));
    panel.setStore(store);
    QVERIFY(norms->coloursByPlace());
    panel.setStore(nullptr);  // nothing shown: no scale either
    QVERIFY(!norms->coloursByPlace());
  }

  // Export plots writes the Deviation page too, drawn although its tab was never shown: the
  // layer that jumped at step 30 is the row hot there (issue 49).
  void theDeviationPageIsExportedWithoutBeingShown() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    panel.setModuleOrder({"", "fc1", "fc2"});
    for (int step = 0; step < 40; ++step) {
      const double wobble = 1 + 0.01 * (step % 3);
      store->add(step, {"fc1", 0, CaptureKind::Activation, 0}, gaussianStats(1, (step == 30 ? 30 : 1) * wobble));
      store->add(step, {"fc2", 0, CaptureKind::Activation, 0}, gaussianStats(1, 2 * wobble));
      store->addScalar(step, "loss", 1.0);
    }
    panel.refresh();
    QVERIFY(!panel.showsDeviation());
    QTemporaryDir tmp;
    QVERIFY(panel.saveAll(tmp.path()).isEmpty());
    QFile csv(tmp.filePath(QStringLiteral("deviation.csv")));
    QVERIFY(csv.open(QIODevice::ReadOnly));
    const QStringList lines = QString::fromUtf8(csv.readAll()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.front(), QStringLiteral("module,step_from,sigma"));
    double fc1At30 = 0, fc2Max = 0;
    for (const QString& line : lines.mid(1)) {
      const QStringList f = line.split(',');
      if (f[0] == QStringLiteral("fc1") && f[1] == QStringLiteral("30")) fc1At30 = f[2].toDouble();
      if (f[0] == QStringLiteral("fc2")) fc2Max = std::max(fc2Max, f[2].toDouble());
    }
    QVERIFY2(fc1At30 >= 6, qPrintable(QString::number(fc1At30)));
    QVERIFY2(fc2Max < 6, qPrintable(QString::number(fc2Max)));
    QVERIFY(QFile::exists(tmp.filePath(QStringLiteral("deviation.png"))));
  }

  void aGapInTheHooksIsAGapInTheLine() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    panel.gradNorms()->setLogScale(false);
    const SeriesKey key{"fc", 0, CaptureKind::Gradient, 0};
    // Hooked for steps 0-19 and 40-59, off in between; the norm is 1 everywhere.
    for (int step = 0; step < 60; ++step) {
      if (step < 20 || step >= 40) store->add(step, key, gaussianStats(1, 1.0));
      store->addScalar(step, "loss", 1.0);
    }
    panel.refresh();
    GradNormPlot* plot = panel.gradNorms();
    QCustomPlot* qcp = plot->plot();
    qcp->replot();
    const QImage image = qcp->toPixmap().toImage();
    const int y = int(std::lround(qcp->yAxis->coordToPixel(1.0)));
    auto drawnAt = [&](double step) {
      const int x = int(std::lround(qcp->xAxis->coordToPixel(step)));
      // The line is one pixel; look one pixel around for its colour (blue, not the background).
      for (int dy = -1; dy <= 1; ++dy) {
        const QColor c = image.pixelColor(x, y + dy);
        if (c.blue() > 150 && c.red() < 100) return true;
      }
      return false;
    };
    QVERIFY(drawnAt(10));
    QVERIFY(drawnAt(50));
    QVERIFY2(!drawnAt(30), "the line runs across steps with no captures");
    QVERIFY(!drawnAt(25));
  }

  void theHeatmapFillsEveryRowASmoothDistributionSpans() {
    PlotsPanel panel;
    // Step 0's values in [-3, 3], step 1's in [-3.9, 3.9]: the map's range.
    HeatmapPlot* heatmap = heatmapOfFc(panel, {0, 1}, [](std::int64_t step) { return gaussianStats(step ? 1.3 : 1.0, 1); });
    QCOMPARE(heatmap->emptyRows(1), 0);
    // Step 0 spans 6 of the 7.8 units: only the rows wholly outside [-3, 3] stay empty
    // (0.9 / (7.8 / 96) = 11.07 rows on each side).
    QCOMPARE(heatmap->emptyRows(0), 22);
    // Resampling keeps the counts.
    const TensorStats s = gaussianStats(1.0, 1);
    std::vector<double> rows(96, 0.0);
    HeatmapPlot::addResampled(s, -3.9, 3.9, rows.data(), 96);
    double total = 0, expected = 0;
    for (double r : rows) total += r;
    for (auto c : s.histogram) expected += double(c);
    QCOMPARE(total, expected);
  }

  void theHeatmapShowsWholeCellsOnWholeSteps() {
    PlotsPanel panel;
    HeatmapPlot* heatmap = heatmapOfFc(panel, {0, 1, 2}, [](std::int64_t step) { return gaussianStats(1.0 + 0.1 * double(step), 1); });
    heatmap->plot()->replot();
    // Step 0's and step 2's columns are drawn whole: half a step on either side of them.
    const QCPRange x = heatmap->plot()->xAxis->range();
    QVERIFY2(x.lower <= -0.5 + 1e-9 && x.upper >= 2.5 - 1e-9, qPrintable(QStringLiteral("%1..%2").arg(x.lower).arg(x.upper)));
    // Ticks on whole steps only.
    for (const double tick : heatmap->plot()->xAxis->tickVector()) QCOMPARE(tick, std::round(tick));
    // And the CSV says the columns the picture shows: step 1 from 0.5 to 1.5.
    const QStringList lines = heatmap->toCsv().split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    QVERIFY(std::any_of(lines.begin(), lines.end(), [](const QString& line) { return line.startsWith(QStringLiteral("0.5,1.5,")); }));
  }

  // A thinned run holds steps 0, 4, ..., 196 and its newest, 199: 51 columns over 199 steps. Each
  // point went to column floor(step / span * columns), so 156 and 160 fell in 39 and 41 and
  // column 40 stayed dark, a stripe across the map (a reopened 3,202-module export showed it).
  void aThinnedRunsHeatmapHasNoEmptyColumn() {
    std::vector<std::int64_t> steps;
    for (std::int64_t step = 0; step < 200; step += 4) steps.push_back(step);
    steps.push_back(199);
    PlotsPanel panel;
    HeatmapPlot* heatmap = heatmapOfFc(panel, steps, [](std::int64_t) { return gaussianStats(1.0, 1); });
    QCOMPARE(heatmap->emptyRows(51), -1);  // 51 columns: one a step held
    for (int column = 0; column < 51; ++column) {
      const int empty = heatmap->emptyRows(column);
      QVERIFY2(empty >= 0 && empty < 96, qPrintable(QStringLiteral("column %1: %2 of 96 rows empty").arg(column).arg(empty)));
    }
  }

  void theLegendKeepsToACorner() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    QVERIFY2(!panel.gradNorms()->legendShown(), "an empty legend box at start");
    for (int l = 0; l < 6; ++l) {
      store->add(0, SeriesKey{"encoder.layers." + std::to_string(l) + ".self_attn", 0, CaptureKind::Gradient, 0},
                 gaussianStats(1, 1.0 + l));
    }
    panel.refresh();
    GradNormPlot* plot = panel.gradNorms();
    plot->plot()->replot();
    QVERIFY(plot->legendShown());
    auto withinCorner = [plot] {
      const QRect legend = plot->plot()->legend->outerRect();
      const QRect area = plot->plot()->axisRect()->rect();
      return legend.width() <= area.width() / 2 && legend.height() <= area.height() / 2;
    };
    QVERIFY(withinCorner());
    // Each name shortened between its parts, its layer's index kept (cut at its start it read
    // "…oder.layers.0.self_attn").
    const QCPLegend* legend = plot->plot()->legend;
    QCOMPARE(legend->itemCount(), 6);
    for (int i = 0; i < legend->itemCount(); ++i) {
      const QString name = qobject_cast<QCPPlottableLegendItem*>(legend->item(i))->plottable()->name();
      QVERIFY2(name.contains(QStringLiteral(".%1.self_attn").arg(i)) && !name.startsWith(QStringLiteral("…")), qPrintable(name));
    }
    // Small: the legend gives way instead of covering the plot.
    plot->resize(320, 200);
    plot->plot()->resize(320, 200);
    plot->plot()->replot();
    QVERIFY(!plot->legendShown() || withinCorner());
  }

  // Lines along the top (norms that stay high after one low start): the legend goes to a
  // bottom corner and covers none of their points (it sat at the top right over them).
  void theLegendTakesTheCornerTheLinesLeaveFree() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    std::vector<SeriesKey> keys;
    for (int l = 0; l < 3; ++l) keys.push_back(SeriesKey{"block." + std::to_string(l), 0, CaptureKind::Gradient, 0});
    for (int step = 0; step < 40; ++step) {
      for (std::size_t l = 0; l < keys.size(); ++l) {
        store->add(step, keys[l], gaussianStats(1, step == 0 && l == 0 ? 1e-3 : 10.0 + double(l)));
      }
    }
    panel.refresh();
    GradNormPlot* plot = panel.gradNorms();
    plot->plot()->replot();
    plot->plot()->replot();  // the legend's place chosen before the first layout counts from the second
    QVERIFY(plot->legendShown());
    const QRect legend = plot->plot()->legend->outerRect();
    QVERIFY2(legend.center().y() > plot->plot()->axisRect()->rect().center().y(),
             qPrintable(QStringLiteral("legend at y %1").arg(legend.top())));
    for (const SeriesKey& key : keys) {
      for (const auto& point : store->values(key, &TensorStats::l2norm)) {
        const QPoint at(int(plot->plot()->xAxis->coordToPixel(double(point.step))),
                        int(plot->plot()->yAxis->coordToPixel(point.value)));
        QVERIFY2(!legend.contains(at), qPrintable(QStringLiteral("%1 at step %2").arg(QString::fromStdString(key.module)).arg(point.step)));
      }
    }
  }

  // A compared run's dashed gradient norms are said in the legend (they had no entry): while a
  // run is compared, and not after.
  void theComparedRunsDashesAreInTheLegend() {
    auto store = std::make_shared<CaptureStore>();
    auto other = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    for (int step = 0; step < 5; ++step) {
      for (int l = 0; l < 3; ++l) {
        const SeriesKey key{"layer" + std::to_string(l), 0, CaptureKind::Gradient, 0};
        store->add(step, key, gaussianStats(1, 1.0 + l));
        other->add(step, key, gaussianStats(1, 2.0 + l));
      }
    }
    const auto named = [&] {
      QStringList names;
      const QCPLegend* legend = panel.gradNorms()->plot()->legend;
      for (int i = 0; i < legend->itemCount(); ++i) {
        if (auto* item = qobject_cast<QCPPlottableLegendItem*>(legend->item(i))) names << item->plottable()->name();
      }
      return names;
    };
    panel.refresh();
    QCOMPARE(named().size(), 3);
    panel.setComparedStore(other);
    panel.refresh();
    QCOMPARE(panel.gradNorms()->comparedLineCount(), 3);
    QVERIFY2(named().contains(QStringLiteral("compared run (dashed)")), qPrintable(named().join(QLatin1Char(','))));
    QCOMPARE(named().size(), 4);
    panel.setComparedStore(nullptr);
    panel.refresh();
    QCOMPARE(named().size(), 3);
  }

  void treeNumbersAreCompactAndZeroIsShown() {
    QCOMPARE(ModuleTreeModel::compactCount(11181642), QStringLiteral("11.2M"));
    QCOMPARE(ModuleTreeModel::compactCount(9000), QStringLiteral("9000"));
    QCOMPARE(ModuleTreeModel::compactCount(123456), QStringLiteral("123k"));
    QCOMPARE(ModuleTreeModel::compactNumber(0.00037), QStringLiteral("3.7e-4"));
    QCOMPARE(ModuleTreeModel::compactNumber(0.0123), QStringLiteral("0.0123"));
    QCOMPARE(ModuleTreeModel::compactNumber(73.125), QStringLiteral("73.1"));
    QCOMPARE(ModuleTreeModel::compactNumber(2.5e6), QStringLiteral("2.5e6"));
    QCOMPARE(ModuleTreeModel::compactNumber(0), QStringLiteral("0"));
  }

  // Issue 59: the Value column cut a range in its middle into another-looking number ("63.7…4.86"
  // for 63.7 – 64.86, "-9.6…18.3" for -9.61 – 118.3): a range of 4-digit values is whole (a
  // longer one is cut at its end, where the ellipsis shows it goes on).
  void anAlertsValueRangeIsWholeOrCutAtItsEnd() {
    AlertsPanel panel;
    panel.resize(1000, 300);
    panel.show();
    hookscope::Alert low{3, "blocks.1.norm", CaptureKind::Activation, hookscope::RuleKind::Anomaly, -9.61, "below its band"};
    hookscope::Alert high = low;
    high.step = 4;
    high.value = 118.3;
    hookscope::Alert wide{5, "blocks.2.fc1", CaptureKind::Activation, hookscope::RuleKind::Anomaly, -1.234e-5, "below its band"};
    hookscope::Alert wider = wide;
    wider.step = 6;
    wider.value = 123456789.0;
    panel.addAlerts({low, high, wide, wider});
    auto* table = panel.findChild<QTableWidget*>();
    QVERIFY(table);
    QCOMPARE(table->rowCount(), 2);
    QCOMPARE(table->item(0, 3)->text(), QStringLiteral("-9.61 – 118.3"));
    const QFontMetrics metrics(table->font());
    QVERIFY2(metrics.horizontalAdvance(table->item(0, 3)->text()) + 8 <= table->columnWidth(3),
             qPrintable(QString::number(table->columnWidth(3))));
    // Both layers whole: the column fits the longest path ("blocks.1.norm" read "b.1.norm" beside
    // a whole "blocks.2.fc1"), and goes back to its width with the table emptied.
    const int fitted = table->columnWidth(1);
    QVERIFY2(metrics.horizontalAdvance(QStringLiteral("blocks.1.norm")) + 8 <= table->columnWidth(1),
             qPrintable(QString::number(table->columnWidth(1))));
    panel.clear();
    QVERIFY(table->columnWidth(1) < fitted);
  }

  void theSliderStepsWithTheKeyboardAndThePlotsFollow() {
    auto store = std::make_shared<CaptureStore>();
    PlotsPanel panel;
    showOn(panel, store);
    const SeriesKey key{"fc", 0, CaptureKind::Activation, 0};
    for (int step = 0; step < 30; ++step) store->add(step, key, gaussianStats(1, 1));
    panel.setSelectedModule("fc");
    panel.refresh();
    QCOMPARE(panel.shownStep(), 29);
    QSlider* slider = panel.findChild<QSlider*>();
    QVERIFY(slider);
    slider->setFocus();
    QTest::keyClick(slider, Qt::Key_Left);
    QCOMPARE(panel.shownStep(), 28);
    QVERIFY(!panel.followsLatest());
    QTest::keyClick(slider, Qt::Key_PageUp);  // ten steps back, as in a document
    QCOMPARE(panel.shownStep(), 18);
    QTest::keyClick(slider, Qt::Key_Home);
    QCOMPARE(panel.shownStep(), 0);
    QCOMPARE(panel.stepText(), QStringLiteral("0 of 0–29"));  // the steps are numbered from 0
    QTest::keyClick(slider, Qt::Key_Right);
    QCOMPARE(panel.shownStep(), 1);
    QTest::keyClick(slider, Qt::Key_PageDown);  // ten steps forward
    QCOMPARE(panel.shownStep(), 11);
    panel.stepBy(-1);  // [ and ] anywhere in the window
    QCOMPARE(panel.shownStep(), 10);
    panel.stepBy(+5);
    QCOMPARE(panel.shownStep(), 15);
    QTest::keyClick(slider, Qt::Key_End);
    QCOMPARE(panel.shownStep(), 29);
    QCOMPARE(panel.histogram()->statsText().contains(QStringLiteral("step 29")), true);
  }
};

QTEST_MAIN(PlotsTest)
#include "PlotsTest.moc"
