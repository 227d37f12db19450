#include "report/Report.h"

#include "common/OutputFile.h"
#include "files/ExportFolder.h"
#include "store/Bands.h"
#include "store/RunCompare.h"
#include "rules/RuleEvaluator.h"
#include "plots/DeviationPlot.h"
#include "plots/GradNormPlot.h"
#include "plots/HeatmapPlot.h"
#include "plots/LossPlot.h"
#include "plots/PrecisionPlot.h"
#include "plots/ViewState.h"

#include "plots/QCustomPlotInclude.h"

#include <QBuffer>
#include <QFileInfo>
#include <QSaveFile>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>

using namespace hookscope;

namespace {

constexpr int kWidth = 900;
constexpr int kHeight = 340;

QString esc(const std::string& text) { return QString::fromStdString(text).toHtmlEscaped(); }
QString esc(const QString& text) { return text.toHtmlEscaped(); }

/// The page drawn at a fixed size, as a PNG image inside the HTML.
QString image(PlotPage* page, const ViewState& state, const QString& alt) {
  // Shown (never on a screen) at the picture's size: laid out as the window lays it out.
  page->setAttribute(Qt::WA_DontShowOnScreen);
  page->show();
  page->resize(kWidth, kHeight);
  page->refresh(state);
  page->fitToData();
  page->plot()->replot(QCustomPlot::rpImmediateRefresh);  // a layout first: pages that name what fits (deviation)
  const QPixmap pixmap = page->plot()->toPixmap(kWidth, kHeight, 1.0);
  QByteArray png;
  QBuffer buffer(&png);
  buffer.open(QIODevice::WriteOnly);
  pixmap.save(&buffer, "PNG");
  return QStringLiteral("<img alt=\"%1\" width=\"%2\" height=\"%3\" src=\"data:image/png;base64,%4\">")
      .arg(esc(alt))
      .arg(kWidth)
      .arg(kHeight)
      .arg(QString::fromLatin1(png.toBase64()));
}

QString row(const QString& name, const QString& value) {
  return QStringLiteral("<tr><th>%1</th><td>%2</td></tr>\n").arg(esc(name), value);
}

/// The run: what was run or attached, its configuration, what was hooked and kept.
QString summary(const ExportData& data, const QString& run, const QStringList& thinnedReads) {
  const auto& m = data.manifest;
  QString html = QStringLiteral("<table class=\"facts\">\n");
  html += row(QStringLiteral("export"), esc(QFileInfo(run).absoluteFilePath()));
  for (const QString& thinned : thinnedReads) {
    html += row(QStringLiteral("read"), esc(thinned + QStringLiteral(": the report is of those steps (--memory-cap MIB reads more)")));
  }
  if (m.script) {
    const auto& s = *m.script;
    html += row(QStringLiteral("script"), esc(s.describe()));
    html += row(QStringLiteral("ended"), esc(s.ended));
    if (m.ranks.size() > 1) html += row(QStringLiteral("ranks"), QString::number(m.ranks.size()));
  } else {
    html += row(QStringLiteral("model"), esc(m.modelFile + " (sha256 " + m.modelSha256.substr(0, 16) + "…)"));
    html += row(QStringLiteral("configuration"), esc(m.config.describe()));
    if (m.configurations.size() > 1) {
      QString list;
      for (const auto& c : m.configurations) {
        list += esc("steps " + std::to_string(c.fromStep) + "–" + std::to_string(c.toStep) + ": " + c.config.describe()) +
                QStringLiteral("<br>");
      }
      html += row(QStringLiteral("configurations"), list);
    }
  }
  html += row(QStringLiteral("created"), esc(m.createdUtc + " by HookScope " + m.hookscopeVersion));
  html += row(QStringLiteral("steps"), QString::number(m.steps) +
                                           (m.interrupted.empty() ? QString() : esc(", interrupted by " + m.interrupted)));
  QStringList hooked;
  for (const auto& h : m.hooked) {
    QStringList kinds;
    for (const auto& k : h.kinds) kinds << QString::fromStdString(k);
    hooked << esc((h.module.empty() ? std::string("(root)") : h.module)) + QStringLiteral(" <small>(%1)</small>").arg(esc(kinds.join(QStringLiteral(", "))));
  }
  html += row(QStringLiteral("hooked"), QString::number(m.hooked.size()) + QStringLiteral(" modules: ") + hooked.join(QStringLiteral(", ")));
  html += row(QStringLiteral("captures"), QStringLiteral("%1 in %2 series, %3 steps kept")
                                               .arg(data.store->captureCount())
                                               .arg(data.store->seriesKeys().size())
                                               .arg(data.store->steps().size()));
  if (m.thinned()) {
    html += row(QStringLiteral("thinned"), QStringLiteral("every %1 steps kept, to stay under %2 MiB")
                                              .arg(m.thinning.back().stride)
                                              .arg(m.memoryCapBytes >> 20));
  }
  if (const std::int64_t dropped = m.droppedCaptures()) {
    html += row(QStringLiteral("gaps"), QStringLiteral("%1 captures dropped by the script in %2 steps (manifest.json, gaps)")
                                           .arg(dropped)
                                           .arg(m.gaps.size()));
  }
  return html + QStringLiteral("</table>\n");
}

/// "Not finite (NaN or Inf) at 2 of 6 steps, first at step 3: the points are not drawn."
QString nonFiniteNote(std::vector<std::int64_t> steps, std::size_t of, const QString& consequence) {
  std::sort(steps.begin(), steps.end());
  return QStringLiteral("<p class=\"warn\">Not finite (NaN or Inf) at %1 of %2 steps, first at step %3: %4.</p>\n")
      .arg(steps.size())
      .arg(of)
      .arg(steps.front())
      .arg(esc(consequence));
}

QString alertsTable(const std::vector<Alert>& alerts, bool ranks) {
  if (alerts.empty()) return QStringLiteral("<p>No rule fired.</p>\n");
  QString html = QStringLiteral("<table class=\"alerts\"><tr><th>first step</th><th>last step</th><th>steps</th>") +
                 (ranks ? QStringLiteral("<th>rank</th>") : QString()) +
                 QStringLiteral("<th>rule</th><th>layer</th><th>kind</th><th>message</th></tr>\n");
  for (const auto& a : alerts) {
    html += QStringLiteral("<tr><td>%1</td><td>%2</td><td>%3</td>").arg(a.step).arg(a.lastStep < 0 ? a.step : a.lastStep).arg(a.count);
    if (ranks) html += QStringLiteral("<td>%1</td>").arg(a.rank);
    html += QStringLiteral("<td>%1</td><td>%2</td><td>%3</td><td>%4</td></tr>\n")
                .arg(esc(std::string(ruleName(a.rule))), esc(a.module.empty() ? std::string("(root)") : a.module),
                     esc(std::string(captureKindName(a.kind))), esc(a.message));
  }
  return html + QStringLiteral("</table>\n");
}

/// Where the compared run first diverges from this one, each step's first difference and what
/// could not be aligned (as `hookscope-cli compare` says it).
QString comparisonSection(const ExportData& data, const ExportData& other, const QString& otherName,
                          ReportContents* contents) {
  const RunComparison result = compareRuns(*data.store, *other.store, 1e-4, data.manifest.modulePaths());
  QString body = QStringLiteral("<h2>Compared with %1</h2>\n").arg(esc(otherName));
  body += QStringLiteral("<p class=\"note\">Drawn over this run in the pictures below: its loss and gradient norms "
                         "dashed.</p>\n");
  const auto describe = [](const SeriesDifference& d) { return esc(describeDifference(d)); };
  if (result.diverged()) {
    contents->firstDivergence = describe(result.first);
    body += QStringLiteral("<p class=\"warn\">First divergence: %1.</p>\n").arg(contents->firstDivergence);
    body += QStringLiteral("<table><tr><th>the first differing series per step</th></tr>\n");
    for (std::size_t i = 0; i < result.steps.size() && i < 20; ++i) {
      body += QStringLiteral("<tr><td>%1</td></tr>\n").arg(describe(result.steps[i]));
    }
    if (result.steps.size() > 20) {
      body += QStringLiteral("<tr><td>… and %1 more steps (hookscope-cli compare --csv lists every one)</td></tr>\n")
                  .arg(result.steps.size() - 20);
    }
    body += QStringLiteral("</table>\n");
  } else {
    body += QStringLiteral("<p>No divergence over %1 steps and %2 series (relative tolerance 1e-4).</p>\n")
                .arg(result.stepsCompared)
                .arg(result.seriesCompared);
  }
  for (const auto& note : result.notes) body += QStringLiteral("<p class=\"note\">%1.</p>\n").arg(esc(note));
  if (!result.onlyInA.empty() || !result.onlyInB.empty()) {
    body += QStringLiteral("<p class=\"note\">%1 series only in this run, %2 only in %3.</p>\n")
                .arg(result.onlyInA.size())
                .arg(result.onlyInB.size())
                .arg(esc(otherName));
  }
  return body;
}

/// The lines of the gradient-norm picture, named: the plot's own legend fits a corner of the
/// window's plot only for a few layers.
QString gradNormLegend(const GradNormPlot& page) {
  QString html = QStringLiteral("<table class=\"legend\"><tr><th></th><th>layer</th><th>first</th><th>last</th></tr>\n");
  for (int line = 0; line < page.lineCount(); ++line) {
    const SeriesKey key = page.lineKey(line);
    const QVector<double> values = page.lineValues(line);
    QString name = key.module.empty() ? QStringLiteral("(root)") : QString::fromStdString(key.module);
    if (key.call || key.index) name += QStringLiteral(" (call %1, output %2)").arg(key.call).arg(key.index);
    if (key.rank >= 0 && page.rankMode() != GradNormPlot::RankMode::OneRank) name += QStringLiteral(", rank %1").arg(key.rank);
    html += QStringLiteral("<tr><td><span class=\"swatch\" style=\"background:%1\"></span></td><td>%2</td><td>%3</td><td>%4</td></tr>\n")
                .arg(page.drawnColor(line).name(), esc(name),
                     values.isEmpty() ? QString() : QString::number(values.front(), 'g', 4),
                     values.isEmpty() ? QString() : QString::number(values.back(), 'g', 4));
  }
  return html + QStringLiteral("</table>\n");
}

/// The series a layer's heatmap draws: its activation (call 0, output 0), else what it has, on
/// the shown rank or as a whole tensor (a sharded run's); else its weight, or its first
/// parameter, and that parameter's gradient (a run that captured parameters alone, such as a
/// sharded run's whole tensors).
bool layerSeries(const CaptureStore& store, const std::string& module, int rank, SeriesKey* key) {
  const auto found = [&](const SeriesKey& candidate) {
    if (store.series(candidate).empty()) return false;
    *key = candidate;
    return true;
  };
  for (const auto kind : {CaptureKind::Activation, CaptureKind::Gradient, CaptureKind::Input}) {
    if (found({module, 0, kind, 0, rank}) || found({module, 0, kind, 0, kWholeRank})) return true;
  }
  const std::string prefix = module.empty() ? std::string() : module + ".";
  std::vector<std::string> parameters;  // the layer's own: "fc.weight", not "fc.sub.weight"
  for (const auto& k : store.seriesKeys()) {
    if ((k.kind != CaptureKind::Param && k.kind != CaptureKind::ParamGrad) || k.module.rfind(prefix, 0) != 0) continue;
    if (k.module.find('.', prefix.size()) == std::string::npos) parameters.push_back(k.module);
  }
  std::stable_partition(parameters.begin(), parameters.end(),
                        [&](const std::string& p) { return p == prefix + "weight"; });
  for (const auto& parameter : parameters) {
    for (const auto kind : {CaptureKind::Param, CaptureKind::ParamGrad}) {
      if (found({parameter, 0, kind, 0, rank}) || found({parameter, 0, kind, 0, kWholeRank})) return true;
    }
  }
  return false;
}

/// Loss and the other scalars over steps: the loss first, then the script's, the timings last.
QString scalarsSection(const ViewState& state, ReportContents* contents) {
  const auto& store = state.store;
  auto names = store->scalarNames();
  // How a GPU read the captures (reads_one, reads_two, reads_shared: StepIntake) is HookScope's
  // own count, not something the script logged: left to scalars.csv.
  names.erase(std::remove_if(names.begin(), names.end(), [](const std::string& n) { return n.rfind("reads_", 0) == 0; }),
              names.end());
  auto weight = [](const std::string& name) {
    if (name == "loss") return 0;
    if (name == "lr") return 1;
    return name.size() > 3 && name.compare(name.size() - 3, 3, "_ms") == 0 ? 3 : 2;
  };
  std::stable_sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) { return weight(a) < weight(b); });
  QString body = QStringLiteral("<h2>Loss and scalars</h2>\n");
  if (names.empty()) body += QStringLiteral("<p>No scalars were recorded.</p>\n");
  for (const auto& name : names) {
    LossPlot page;
    page.setScalar(QString::fromStdString(name));
    body += QStringLiteral("<h3>%1</h3>\n").arg(esc(name)) + image(&page, state, QString::fromStdString(name));
    std::vector<std::int64_t> bad;
    std::size_t points = 0;
    for (const int r : state.ranks) {
      for (const auto& p : store->scalars(name, r)) {
        ++points;
        if (!std::isfinite(p.value)) bad.push_back(p.step);
      }
    }
    if (!bad.empty()) body += nonFiniteNote(bad, points, QStringLiteral("the points are not drawn"));
    ++contents->images;
  }
  return body;
}

/// Gradient norms of every hooked layer, with the legend naming each line; the model's modules
/// in `order` (many layers are coloured by their place in it).
QString gradNormSection(const ViewState& state, const std::vector<std::string>& order, ReportContents* contents) {
  QString body = QStringLiteral("<h2>Gradient norms</h2>\n");
  std::set<std::int64_t> steps, bad;  // steps with gradients, and those holding NaN or Inf
  for (const auto& key : state.store->seriesKeys()) {
    if (key.kind != CaptureKind::Gradient) continue;
    for (const auto& p : state.store->series(key)) {
      steps.insert(p.step);
      if (!std::isfinite(p.stats.l2norm) || p.stats.hasNonFinite()) bad.insert(p.step);
    }
  }
  if (steps.empty()) {
    return body + QStringLiteral("<p>No gradients were captured (hook Grad, or <code>--kinds gradient</code>).</p>\n");
  }
  GradNormPlot page;
  page.setModuleOrder(order);
  body += image(&page, state, QStringLiteral("gradient norms"));  // draws, then the legend names what it drew
  body += QStringLiteral("<p class=\"note\">The L2 norm of each hooked layer's output gradient per step, log scale:</p>\n");
  body += gradNormLegend(page);
  if (!bad.empty()) {
    body += nonFiniteNote({bad.begin(), bad.end()}, steps.size(), QStringLiteral("a norm there is of the finite values, and a gradient with none has no point"));
  }
  ++contents->images;
  return body;
}

/// The share of one count at its worst step in one series.
struct Worst {
  double fraction = 0;
  std::int64_t step = -1;
};

/// The low-precision counts: per hooked tensor, each count's largest share over the steps and
/// its step, worst first; the one worst drawn over steps. Says so when nothing was lost, and
/// when the export holds no counts (older than format 3, or from an older package).
QString precisionSection(ViewState state, ReportContents* contents) {
  constexpr int kMaxRows = 20;
  QString body = QStringLiteral("<h2>Low precision</h2>\n");
  struct Row {
    SeriesKey key;
    std::array<Worst, 4> worst;
    double largest = 0;
  };
  std::vector<Row> rows;
  int counted = 0;
  for (const auto& key : state.store->seriesKeys()) {
    // The shown rank's tensors and a sharded run's whole ones.
    if (key.kind == CaptureKind::Update || (key.rank != state.shownRank() && key.rank != kWholeRank)) continue;
    Row row{key, {}, 0};
    bool any = false;
    for (const auto& p : state.store->series(key)) {
      if (!p.stats.hasPrecision()) continue;
      any = true;
      for (std::size_t i = 0; i < kPrecisionCounts.size(); ++i) {
        const double f = precisionFraction(p.stats, kPrecisionCounts[i]);
        if (f > row.worst[i].fraction) row.worst[i] = {f, p.step};
      }
    }
    if (!any) continue;
    ++counted;
    for (const auto& w : row.worst) row.largest = std::max(row.largest, w.fraction);
    if (row.largest > 0) rows.push_back(row);
  }
  if (counted == 0) {
    return body + QStringLiteral("<p>Not counted in this export: it was written before export format 3, or by an "
                                 "older <code>hookscope</code> package.</p>\n");
  }
  if (rows.empty()) {
    return body + QStringLiteral("<p>None of the %1 captured tensors held a value that float16 would overflow or "
                                 "flush to zero, or that fp8 (E4M3 or E5M2, scaled to the tensor's largest value) "
                                 "would flush, at any step.</p>\n")
                      .arg(counted);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.largest > b.largest; });
  state.selected = rows.front().key;
  state.hasSelection = true;
  PrecisionPlot page;
  body += QStringLiteral("<h3>%1 <small>%2, call %3, tensor %4: the most lost</small></h3>\n")
              .arg(esc(rows.front().key.module.empty() ? std::string("(root)") : rows.front().key.module),
                   esc(std::string(captureKindName(rows.front().key.kind))))
              .arg(rows.front().key.call)
              .arg(rows.front().key.index) +
          image(&page, state, QStringLiteral("precision"));
  ++contents->images;
  body += QStringLiteral("<p class=\"note\">Each count's largest share of a tensor's values over the steps, and "
                         "its step (docs/export-format.md defines them):</p>\n<table class=\"precision\"><tr>"
                         "<th>layer</th><th>tensor</th>");
  for (const auto& count : kPrecisionCounts) body += QStringLiteral("<th>%1</th>").arg(esc(std::string(count.label)));
  body += QStringLiteral("</tr>\n");
  for (std::size_t r = 0; r < rows.size() && int(r) < kMaxRows; ++r) {
    const Row& row = rows[r];
    QString tensor = QString::fromLatin1(captureKindName(row.key.kind));
    if (row.key.call || row.key.index) tensor += QStringLiteral(" (call %1, tensor %2)").arg(row.key.call).arg(row.key.index);
    if (row.key.rank == kWholeRank) tensor += QStringLiteral(", whole tensor");
    body += QStringLiteral("<tr><td>%1</td><td>%2</td>")
                .arg(esc(row.key.module.empty() ? std::string("(root)") : row.key.module), esc(tensor));
    for (const auto& w : row.worst) {
      body += w.fraction > 0 ? QStringLiteral("<td>%1% <small>at step %2</small></td>")
                                   .arg(QString::number(100 * w.fraction, 'g', 3))
                                   .arg(w.step)
                             : QStringLiteral("<td>0</td>");
    }
    body += QStringLiteral("</tr>\n");
    ++contents->precisionRows;
  }
  body += QStringLiteral("</table>\n");
  if (int(rows.size()) > kMaxRows) {
    body += QStringLiteral("<p class=\"note\">%1 more tensors lost values: <code>hookscope-cli show</code> lists "
                           "every one.</p>\n")
                .arg(int(rows.size()) - kMaxRows);
  }
  const int none = counted - int(rows.size());
  if (none > 0) body += QStringLiteral("<p class=\"note\">The other %1 captured tensors lost none.</p>\n").arg(none);
  return body;
}

/// The layers to draw as heatmaps: those named, else every hooked one (tree order), the one
/// where the spike started first (past the first 16 of a transformer it was left out).
std::vector<std::string> heatmapLayers(const ReportRequest& request, const ExportData& data,
                                       const std::optional<std::string>& firstMover) {
  std::vector<std::string> layers;
  if (!request.layers.isEmpty()) {
    for (const auto& l : request.layers) layers.push_back(l == QStringLiteral("(root)") ? std::string() : l.toStdString());
    return layers;
  }
  std::set<std::string> seen;
  if (firstMover) {
    layers.push_back(*firstMover);
    seen.insert(*firstMover);
  }
  for (const auto& h : data.manifest.hooked) {
    if (seen.insert(h.module).second) layers.push_back(h.module);
  }
  for (const auto& key : data.store->seriesKeys()) {  // an export without `hooked` (version 1)
    if (!isParameterKind(key.kind) && seen.insert(key.module).second) layers.push_back(key.module);
  }
  return layers;
}

/// A histogram-over-time heatmap per layer; false, with *error, when a named layer has none.
bool heatmapSection(const ReportRequest& request, const ExportData& data, ViewState state, ReportContents* contents,
                    QString* body, QString* error) {
  const CaptureStore& store = *data.store;
  const int rank = state.shownRank();
  *body += QStringLiteral("<h2>Histograms over steps</h2>\n");
  QStringList missing;
  int drawn = 0;
  for (const auto& module : heatmapLayers(request, data, contents->firstMover)) {
    const QString name = module.empty() ? QStringLiteral("(root)") : QString::fromStdString(module);
    SeriesKey key;
    if (!layerSeries(store, module, rank, &key)) {
      if (!request.layers.isEmpty()) missing << name;
      continue;
    }
    if (drawn == request.maxLayers) {
      ++contents->layersLeftOut;
      continue;
    }
    state.selected = key;
    state.hasSelection = true;
    HeatmapPlot page;
    QString what = QString::fromLatin1(captureKindName(key.kind));
    if (key.module != module) what += QStringLiteral(" of ") + esc(key.module);  // a parameter's
    if (key.rank == kWholeRank) what += QStringLiteral(", whole tensor");
    *body += QStringLiteral("<h3>%1 <small>%2, call 0, tensor 0</small></h3>\n").arg(esc(name), what) +
             image(&page, state, name);
    std::vector<std::int64_t> bad;
    const auto points = store.series(key);
    for (const auto& p : points) {
      if (p.stats.hasNonFinite()) bad.push_back(p.step);
    }
    if (!bad.empty()) *body += nonFiniteNote(bad, points.size(), QStringLiteral("its columns count the finite values"));
    contents->heatmapLayers << name;
    ++contents->images;
    ++drawn;
  }
  if (!missing.isEmpty()) {
    *error = QStringLiteral("%1 in this export has no captures to draw (a layer's path, as `hookscope-cli show` lists them)")
                 .arg(missing.join(QStringLiteral(", ")));
    return false;
  }
  if (drawn == 0) *body += QStringLiteral("<p>No layer has activations, gradients, inputs or parameters captured.</p>\n");
  if (contents->layersLeftOut) {
    *body += QStringLiteral("<p class=\"note\">%1 more hooked layers are not drawn; name the ones to draw with "
                            "<code>--layer PATH</code> (repeatable).</p>\n")
                 .arg(contents->layersLeftOut);
  }
  return true;
}

/// Where the loss's largest excursion started (issue 49), as `hookscope-cli explain` says it,
/// and every hooked layer against its own band step by step.
QString spikeSection(const ExportData& data, const ViewState& state, ReportContents* contents) {
  const FirstMovers result = firstMovers(*data.store, data.manifest.modulePaths(), std::nullopt, data.store->bandSettings());
  QString body = QStringLiteral("<h2>Where the loss spiked</h2>\n");
  if (result.loss && result.loss->score >= result.sigma) {
    body += QStringLiteral("<p>The loss left its band at step %1 (%2 sigma above it); the layers whose excursion "
                           "began from step %3 on:</p>\n")
                .arg(result.step)
                .arg(result.loss->score, 0, 'f', 1)
                .arg(result.since);
  }
  const auto lines = describeMovers(result, 8);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    // The first mover, or the line saying layers left their band with no loss spike.
    const bool warn = (i == 0 && !result.movers.empty()) || (!result.unfollowed.empty() && lines[i].rfind("but ", 0) == 0);
    body += QStringLiteral("<p%1>%2</p>\n").arg(warn ? QStringLiteral(" class=\"warn\"") : QString(), esc(lines[i]));
  }
  if (!result.loss) return body;  // too few steps for a band: nothing to draw
  // The first mover's row outlined and named, as the window shows the layer selected.
  const BandMover* first = !result.movers.empty() ? &result.movers.front()
                           : !result.unfollowed.empty() ? &result.unfollowed.front() : nullptr;
  ViewState shown = state;
  if (first) {
    contents->firstMover = ownerModule(first->key);
    shown.selected = first->key;
    shown.hasSelection = true;
  }
  DeviationPlot page;
  page.setModuleOrder(data.manifest.modulePaths());
  body += QStringLiteral("<h3>every layer against its band</h3>\n") + image(&page, shown, QStringLiteral("deviation"));
  ++contents->images;
  body += QStringLiteral("<p class=\"note\">A row a layer in the model's order, a column a step: how many robust "
                         "deviations (sigmas) its furthest statistic (L2 norm, std, amax, zero fraction) lies from the "
                         "band of its own last %1 steps; empty while a band warms up (%2 steps).%3</p>\n")
              .arg(data.store->bandSettings().window)
              .arg(data.store->bandSettings().warmup)
              .arg(first ? QStringLiteral(" Outlined: %1, where it started; its histograms over steps come first below.")
                               .arg(esc(contents->firstMover->empty() ? QStringLiteral("(root)") : QString::fromStdString(*contents->firstMover)))
                         : QString());
  return body;
}

/// The whole page: its title, style and body.
QString page(const QString& title, const QString& body) {
  return QStringLiteral("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>%1</title>\n"
                        "<style>body{font-family:sans-serif;max-width:%2px;margin:1.5em auto;padding:0 1em;color:#222}"
                        "h1{font-size:1.5em}h2{margin-top:1.6em;border-bottom:1px solid #ccc}h3{margin:1.2em 0 .3em;"
                        "font-size:1em}small{color:#666;font-weight:normal}table{border-collapse:collapse;margin:.5em 0}"
                        "th,td{text-align:left;vertical-align:top;padding:3px 10px 3px 0;border-bottom:1px solid #eee}"
                        "table.facts th{white-space:nowrap;color:#555}img{display:block;border:1px solid #ddd}"
                        ".note{color:#555}.warn{color:#a40000}.swatch{display:inline-block;width:24px;height:4px;vertical-align:middle}</style></head>\n<body>\n%3</body></html>\n")
      .arg(esc(title))
      .arg(kWidth + 40)
      .arg(body);
}

}  // namespace

ReportResult writeReport(const ReportRequest& request, ReportContents* contents, QString* error) {
  const auto stage = [&](const QString& what) {
    if (request.onStage) request.onStage(what);
  };
  stage(QStringLiteral("reading %1").arg(request.run));
  ExportData data;
  std::string message;
  if (!readExport(request.run.toStdString(), &data, &message, request.capBytes)) {
    *error = QString::fromStdString(message);
    return ReportResult::BadInput;
  }
  *contents = ReportContents();
  const auto noteThinned = [&](const QString& dir, const CaptureStore& store) {
    const std::string thinned = thinnedReadText(QFileInfo(dir).fileName().toStdString(), store, request.capBytes);
    if (!thinned.empty()) contents->thinnedReads << QString::fromStdString(thinned);
  };
  noteThinned(request.run, *data.store);
  // Never over a device, FIFO, socket or folder; over a regular file only with --force.
  if (const std::string why = checkOutputFile(request.out.toStdString(), request.force); !why.empty()) {
    *error = QString::fromStdString(why);
    return ReportResult::CannotWrite;
  }
  ViewState state;
  state.store = data.store;
  state.ranks = data.store->ranks();
  state.rank = -1;
  state.latestStep = data.store->latestStep();
  state.step = state.latestStep;
  ExportData other;
  if (!request.compare.isEmpty()) {
    stage(QStringLiteral("reading %1").arg(request.compare));
    if (!readExport(request.compare.toStdString(), &other, &message, request.capBytes)) {
      *error = QStringLiteral("--compare: %1").arg(QString::fromStdString(message));
      return ReportResult::BadInput;
    }
    noteThinned(request.compare, *other.store);
    state.compared = other.store;
  }

  stage(QStringLiteral("drawing %1 series over %2 steps").arg(data.store->seriesKeys().size()).arg(data.store->steps().size()));
  const QString title = QStringLiteral("HookScope report: %1").arg(QFileInfo(request.run).fileName());
  QString body = QStringLiteral("<h1>%1</h1>\n").arg(esc(title)) + summary(data, request.run, contents->thinnedReads);
  if (state.compared) body += comparisonSection(data, other, QFileInfo(request.compare).fileName(), contents);
  body += scalarsSection(state, contents);
  body += gradNormSection(state, data.manifest.modulePaths(), contents);
  body += spikeSection(data, state, contents);
  body += precisionSection(state, contents);
  if (!heatmapSection(request, data, state, contents, &body, error)) return ReportResult::BadInput;
  body += QStringLiteral("<h2>Alerts</h2>\n") + alertsTable(data.alerts, state.ranks.size() > 1);

  QSaveFile file(request.out);
  if (!file.open(QIODevice::WriteOnly) || file.write(page(title, body).toUtf8()) < 0 || !file.commit()) {
    *error = QStringLiteral("cannot write %1 (%2)").arg(request.out, file.errorString());
    return ReportResult::CannotWrite;
  }
  return ReportResult::Written;
}
