// A 12-layer GPT-2-shaped model in the window at 1024x700 and 1600x1000 (issue 59): every
// module's name readable in the tree, the twelve blocks told apart wherever a layer is named
// (the histogram's title, the Deviation rows), and no two tick labels of a plot's step axis
// running together ("50100"). The model is a script played by hand over the socket
// (AttachTestSupport.h's FakeRank): its module tree and its captures, no PyTorch.
#include "AttachTestSupport.h"
#include "panels/AlertsPanel.h"
#include "panels/PlotsPanel.h"
#include "panels/RunControls.h"
#include "plots/DeviationPlot.h"
#include "plots/GradNormPlot.h"
#include "plots/HeatmapPlot.h"
#include "plots/HistogramPlot.h"
#include "plots/LossPlot.h"
#include "plots/QCustomPlotInclude.h"

#include <QStandardPaths>
#include <QTabBar>
#include <QTabWidget>
#include <QTreeView>

#include <algorithm>
#include <cmath>

using namespace hookscope::test;

namespace {

constexpr int kBlocks = 12;
constexpr int kSteps = 1000;  // four-digit step labels

/// GPT2LMHeadModel's modules as Hugging Face names them, parents first.
std::vector<std::pair<std::string, std::string>> gpt2Modules() {
  std::vector<std::pair<std::string, std::string>> list{{"", "GPT2LMHeadModel"},
                                                        {"transformer", "GPT2Model"},
                                                        {"transformer.wte", "Embedding"},
                                                        {"transformer.wpe", "Embedding"},
                                                        {"transformer.drop", "Dropout"},
                                                        {"transformer.h", "ModuleList"}};
  for (int b = 0; b < kBlocks; ++b) {
    const std::string block = "transformer.h." + std::to_string(b);
    for (const auto& [name, type] : std::vector<std::pair<std::string, std::string>>{
             {"", "GPT2Block"},          {".ln_1", "LayerNorm"},       {".attn", "GPT2Attention"},
             {".attn.c_attn", "Conv1D"}, {".attn.c_proj", "Conv1D"},   {".attn.attn_dropout", "Dropout"},
             {".attn.resid_dropout", "Dropout"}, {".ln_2", "LayerNorm"}, {".mlp", "GPT2MLP"},
             {".mlp.c_fc", "Conv1D"},    {".mlp.c_proj", "Conv1D"},    {".mlp.act", "NewGELUActivation"},
             {".mlp.dropout", "Dropout"}}) {
      list.emplace_back(block + name, type);
    }
  }
  list.emplace_back("transformer.ln_f", "LayerNorm");
  list.emplace_back("lm_head", "Linear");
  return list;
}

/// Whether any two labels of `axis` (horizontal) overlap, measured from their text as drawn;
/// what they are, for the failure.
QString overlappingTicks(const QCPAxis* axis) {
  const QFontMetrics metrics(axis->tickLabelFont());
  const QVector<double> ticks = axis->tickVector();
  const QVector<QString> labels = axis->tickVectorLabels();
  double lastRight = -1e9;
  QString lastLabel;
  for (int i = 0; i < ticks.size() && i < labels.size(); ++i) {
    if (!axis->range().contains(ticks[i])) continue;
    const double centre = axis->coordToPixel(ticks[i]);
    const double half = metrics.horizontalAdvance(labels[i]) / 2.0;
    if (centre - half < lastRight + 2) {
      return QStringLiteral("'%1' and '%2' (%3 px wide)").arg(lastLabel, labels[i]).arg(axis->axisRect()->width());
    }
    lastRight = centre + half;
    lastLabel = labels[i];
  }
  return QString();
}

} // namespace

class DeepModelWindowTest : public QObject {
  Q_OBJECT

private Q_SLOTS:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("HookScopeTest"));
  }

  // The measure below sees labels that run together: QCustomPlot's own ticker on a narrow plot.
  void theMeasureSeesTickLabelsRunTogether() {
    QCustomPlot plot;
    plot.resize(90, 80);
    plot.show();
    QVERIFY(QTest::qWaitForWindowExposed(&plot));
    plot.xAxis->setRange(0, 100000);
    plot.xAxis->ticker()->setTickCount(8);
    plot.replot();
    QVERIFY(!overlappingTicks(plot.xAxis).isEmpty());
    plot.xAxis->ticker()->setTickCount(1);
    plot.replot();
    QCOMPARE(overlappingTicks(plot.xAxis), QString());
  }

  void aTwelveLayerTransformerIsReadableAtBothSizes() {
    QTemporaryDir dir(QStringLiteral("/tmp/hs-gui-XXXXXX"));
    MainWindow window;
    window.setInteractive(false);
    const auto modules = gpt2Modules();
    auto rank = attachFakeScript(window, dir, modules);
    QVERIFY(rank);
    for (int step = 0; step < kSteps; ++step) {
      nlohmann::json captures = nlohmann::json::array();
      for (int m = 0; m < int(modules.size()); ++m) {
        if (modules[std::size_t(m)].second == "ModuleList") continue;  // never called: no hook fires
        const double top = (1 + 0.01 * (step % 3)) * (1 + m % 7);
        captures.push_back(fakeCapture(m, "activation", top));
        captures.push_back(fakeCapture(m, "gradient", 0.01 * top));
      }
      QVERIFY(rank->send({{"type", "stats"}, {"step", step}, {"captures", captures}}));
      nlohmann::json message = {{"type", "step"}, {"step", step}, {"scalars", {{"loss", 3.0 - 0.001 * step}}}};
      // The output shapes, as a script probes them at the first step: the head's is long, the
      // root's a 0-d loss.
      if (step == 0) message["shapes"] = {{std::to_string(modules.size() - 1), {{"8x1024x50257"}}}, {"0", {{""}}}};
      QVERIFY(rank->send(message));
      rank->drain();
    }
    QTRY_COMPARE_WITH_TIMEOUT(window.view().state.stepsDone, std::int64_t(kSteps), kTimeout);
    window.show();
    QTreeView* view = window.treeView();
    view->expandAll();
    for (const QSize size : {QSize(1024, 700), QSize(1600, 1000)}) {
      window.resize(size);
      QTRY_VERIFY_WITH_TIMEOUT(!window.redrawPending(), kTimeout);
      // The tree: every module's name whole (GPT-2's were cut to "…", "c…j", "GPT2L…Model"); the
      // tree scrolls sideways rather than cut them.
      const QAbstractItemModel* shown = view->model();
      QStringList cut;
      std::vector<QModelIndex> pending{shown->index(0, 0)};
      while (!pending.empty()) {
        const QModelIndex at = pending.back();
        pending.pop_back();
        const QString name = at.data().toString();
        const int needs = view->fontMetrics().horizontalAdvance(name);
        if (view->visualRect(at).width() < needs + 4) cut << QStringLiteral("%1 (%2 of %3 px)").arg(name).arg(view->visualRect(at).width()).arg(needs);
        for (int r = 0; r < shown->rowCount(at); ++r) pending.push_back(shown->index(r, 0, at));
      }
      QVERIFY2(cut.isEmpty(), qPrintable(QStringLiteral("at %1 px: ").arg(size.width()) + cut.mid(0, 8).join(QStringLiteral(", "))));
      // Shapes whole ("8x1024x50257" was cut in a column fitted to 8x16x14x14); a 0-d output says
      // so (its cell was empty).
      ModuleTreeModel* tree = window.treeModel();
      const QModelIndex head = tree->indexOfModule(int(modules.size()) - 1, ModuleTreeModel::OutputShape);
      QCOMPARE(head.data().toString(), QStringLiteral("8x1024x50257"));
      QVERIFY(view->columnWidth(ModuleTreeModel::OutputShape) >=
              view->fontMetrics().horizontalAdvance(QStringLiteral("8x1024x50257")) + 8);
      QCOMPARE(tree->data(tree->indexOfModule(0, ModuleTreeModel::OutputShape)).toString(), QStringLiteral("scalar"));
      // The Run tab of a script's run holds a line and the memory cap: folded to that, the tree
      // gets the rest (about 12 rows showed above it at 1024x700); the Alerts tab gets its room.
      auto* controls = window.findChild<RunControls*>();
      auto* tabs = qobject_cast<QTabWidget*>(controls->parentWidget()->parentWidget());
      QVERIFY(tabs);
      tabs->setCurrentWidget(controls);
      const int folded = tabs->height();
      QVERIFY2(folded <= tabs->tabBar()->height() + controls->sizeHint().height() + 40,
               qPrintable(QStringLiteral("%1 px for %2").arg(folded).arg(controls->sizeHint().height())));
      const int treeRows = view->viewport()->height() / view->visualRect(shown->index(0, 0)).height();
      QVERIFY2(treeRows >= (size.height() < 1000 ? 25 : 45), qPrintable(QString::number(treeRows)));
      tabs->setCurrentIndex(tabs->indexOf(window.findChild<AlertsPanel*>()));
      QVERIFY2(tabs->height() >= folded + 100, qPrintable(QString::number(tabs->height())));
      tabs->setCurrentWidget(controls);
      QCOMPARE(tabs->height(), folded);
      // The histogram's title tells the blocks apart: the block's index is never what is cut.
      QStringList titles;
      for (int b = 0; b < kBlocks; ++b) {
        window.selectModule(QStringLiteral("transformer.h.%1.mlp.c_fc").arg(b));
        window.plots()->refresh();
        const QString title = window.plots()->histogram()->statsText().section(QLatin1Char('\n'), 0, 0);
        QVERIFY2(title.contains(QStringLiteral(".%1.").arg(b)), qPrintable(title));
        titles << title;
      }
      QCOMPARE(QSet<QString>(titles.begin(), titles.end()).size(), kBlocks);
      // A container, hooked: said to be one, with what to do (the advice was about
      // MultiheadAttention and traced models), on neutral axes (the last layer's stayed).
      QVERIFY(window.treeModel()->setData(window.treeModel()->indexOfModule(0, ModuleTreeModel::Act), Qt::Checked,
                                          Qt::CheckStateRole));
      rank->drain();
      window.selectModule(QStringLiteral("transformer.h"));
      window.plots()->refresh();
      const QString advice = window.plots()->histogram()->statsText();
      QVERIFY2(advice.contains(QStringLiteral("is a ModuleList")) && !advice.contains(QStringLiteral("MultiheadAttention")),
               qPrintable(advice));
      QCOMPARE(window.plots()->histogram()->plot()->xAxis->range(), QCPRange(0, 5));
      window.selectModule(QStringLiteral("transformer.h.11.mlp.c_fc"));
      // The Deviation rows: names distinct, the selected one (block 11's c_fc) among them.
      window.plots()->showDeviation();
      DeviationPlot* deviation = window.plots()->deviation();
      QTRY_VERIFY_WITH_TIMEOUT(deviation->rows().size() == modules.size() - 1, kTimeout);  // transformer.h: none
      const QCustomPlot* rows = deviation->plot();
      const auto rowOf = [&](const std::string& path) {
        return double(std::find(deviation->rows().begin(), deviation->rows().end(), path) - deviation->rows().begin());
      };
      QTRY_VERIFY_WITH_TIMEOUT(rows->yAxis->tickVector().contains(rowOf("transformer.h.11.mlp.c_fc")), kTimeout);
      const QVector<QString> names = rows->yAxis->tickVectorLabels();
      QCOMPARE(QSet<QString>(names.begin(), names.end()).size(), names.size());
      // No step axis's labels run together ("50100", "20406080" at 1024 px), each plot looked at
      // while it is shown.
      const auto apart = [&](const char* what, QCustomPlot* plot) {
        plot->replot();
        QVERIFY2(plot->xAxis->tickVectorLabels().size() >= 2, what);
        const QString overlap = overlappingTicks(plot->xAxis);
        QVERIFY2(overlap.isEmpty(), qPrintable(QStringLiteral("%1 at %2 px: %3").arg(what).arg(size.width()).arg(overlap)));
      };
      apart("deviation", deviation->plot());
      window.plots()->showPrecision(false);  // the Values tab
      window.plots()->refresh();
      apart("heatmap", window.plots()->heatmap()->plot());
      apart("gradient norms", window.plots()->gradNorms()->plot());
      apart("loss", window.plots()->loss()->plot());
      const QString shots = qEnvironmentVariable("HOOKSCOPE_SCREENSHOTS");
      if (!shots.isEmpty()) window.grab().save(QStringLiteral("%1/gpt2-%2.png").arg(shots).arg(size.width()));
    }
  }
};

QTEST_MAIN(DeepModelWindowTest)
#include "DeepModelWindowTest.moc"
