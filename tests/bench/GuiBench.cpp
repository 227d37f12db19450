// Time the GUI thread spends redrawing every plot with 100 hooked layers and 2,000 steps of
// history (offscreen). Prints figures; asserts nothing.
//
//   hookscope-gui-bench [ranks | layers N]   (ranks: the 8-rank figures only; layers N: one rank
//                                             of N layers, with the process's peak memory)
#include "PeakMemory.h"
#include "panels/PlotsPanel.h"
#include "plots/PlotPage.h"
#include "plots/QCustomPlotInclude.h"

#include <QApplication>
#include <QElapsedTimer>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

using namespace hookscope;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

TensorStats fakeStats(std::mt19937& rng, int step) {
  std::normal_distribution<double> noise(0, 0.1);
  TensorStats s;
  s.shape = {8, 64};
  s.dtype = "float32";
  s.numel = 512;
  s.min = -3 - 0.001 * step;
  s.max = 3 + 0.001 * step;
  s.mean = noise(rng);
  s.std = 1;
  s.l2norm = std::exp(noise(rng)) * (1 + 0.001 * step);
  s.histogram.resize(64);
  for (int b = 0; b < 64; ++b) s.histogram[std::size_t(b)] = std::int64_t(100 * std::exp(-0.5 * std::pow((b - 32) / 8.0, 2)));
  s.histLow = s.min;
  s.histHigh = s.max;
  return s;
}

std::vector<double> g_refreshMs;  // of each frame: the part before drawing (reading the store)

// One frame as the window makes it: refresh every page, then let the queued replots run.
double frame(PlotsPanel& panel) {
  QElapsedTimer timer;
  timer.start();
  panel.refresh();
  g_refreshMs.push_back(double(timer.nsecsElapsed()) / 1e6);
  QCoreApplication::processEvents();
  return double(timer.nsecsElapsed()) / 1e6;
}

struct Figures {
  double live = 0, liveMax = 0, scrub = 0, open = 0, select = 0;
};


// `ranks` ranks of a job in one store (the window's default memory cap, so thinned as the
// window would thin it), the panel showing `rank` (-1: all ranks).
Figures benchmark(int layers, int ranks, int rank, bool print) {
  const int history = 2000, frames = 60;
  Figures figures;
  auto store = std::make_shared<CaptureStore>();
  std::mt19937 rng(0);
  auto addStep = [&](int step) {
    for (int r = 0; r < ranks; ++r) {
      for (int l = 0; l < layers; ++l) {
        const std::string path = "layer" + std::to_string(l);
        store->add(step, {path, 0, CaptureKind::Gradient, 0, r}, fakeStats(rng, step));
        store->add(step, {path, 0, CaptureKind::Activation, 0, r}, fakeStats(rng, step));
      }
      store->addScalar(step, "loss", 2.0 / (1 + 0.01 * step) + 0.01 * r, r);
    }
  };
  for (int step = 0; step < history; ++step) addStep(step);
  PlotsPanel panel;
  panel.resize(1200, 800);
  panel.show();
  QElapsedTimer opening;
  opening.start();
  panel.setStore(store);
  panel.setSelectedModule("layer42");
  frame(panel);
  figures.open = double(opening.nsecsElapsed()) / 1e6;
  if (ranks > 1) panel.setRank(rank);
  frame(panel);
  // Live: each frame follows one new step (the store changed).
  std::vector<double> live;
  g_refreshMs.clear();
  const auto pages = panel.pages();
  std::vector<std::vector<double>> drawMs(std::size_t(pages.size()));
  for (int f = 0; f < frames; ++f) {
    addStep(history + f);
    live.push_back(frame(panel));
    for (int i = 0; i < pages.size(); ++i) drawMs[std::size_t(i)].push_back(pages[i]->plot()->replotTime());
  }
  // Scrubbing: the store is unchanged, the shown step moves.
  std::vector<double> scrub;
  for (int f = 0; f < frames; ++f) {
    QElapsedTimer timer;
    timer.start();
    panel.scrubTo(100 + 25 * f);
    QCoreApplication::processEvents();
    scrub.push_back(double(timer.nsecsElapsed()) / 1e6);
  }
  // Selecting another layer (a click in the tree).
  std::vector<double> select;
  for (int f = 0; f < 10; ++f) {
    QElapsedTimer timer;
    timer.start();
    panel.setSelectedModule("layer" + std::to_string((f * 7919) % layers));
    QCoreApplication::processEvents();
    select.push_back(double(timer.nsecsElapsed()) / 1e6);
  }
  figures.live = median(live);
  figures.liveMax = *std::max_element(live.begin(), live.end());
  figures.scrub = median(scrub);
  figures.select = median(select);
  if (!print) return figures;
  std::printf("GUI refresh, offscreen, %dx%d: %d hooked layers (gradient + activation series), %d steps of history",
              panel.width(), panel.height(), layers, history);
  if (ranks > 1) {
    std::printf(", %d ranks, showing %s; store %.0f MiB, every %lld. step kept", ranks,
                rank < 0 ? "all ranks" : qPrintable(QStringLiteral("rank %1").arg(rank)), double(store->bytesUsed()) / (1 << 20),
                static_cast<long long>(store->stride()));
  }
  std::printf("\n  live frame (a new step arrived): median %.2f ms, max %.2f ms; reading the store %.2f ms\n", figures.live,
              figures.liveMax, median(g_refreshMs));
  for (int i = 0; i < pages.size(); ++i) {
    std::printf("    of which drawing \"%s\": median %.2f ms\n", qPrintable(pages[i]->title()), median(drawMs[std::size_t(i)]));
  }
  std::printf("  scrub frame (shown step moved): median %.2f ms\n", figures.scrub);
  std::printf("  first frame with the store: %.1f ms; another layer selected: median %.2f ms\n", figures.open,
              figures.select);
  return figures;
}

} // namespace

int main(int argc, char** argv) {
  qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  // "ranks": the job figures only (8 ranks, all ranks and one rank).
  const bool ranksOnly = argc > 1 && std::string(argv[1]) == "ranks";
  if (argc > 2 && std::string(argv[1]) == "layers") {
    const int layers = std::max(1, std::atoi(argv[2]));
    const Figures many = benchmark(layers, 1, 0, true);
    std::printf("RESULT gui_layers layers=%d live_ms=%.3f live_max_ms=%.3f scrub_ms=%.3f select_ms=%.3f open_ms=%.1f "
                "peak_rss_mib=%.0f\n", layers, many.live, many.liveMax, many.scrub, many.select, many.open, peakMiB());
    return 0;
  }
  if (!ranksOnly) {
    const Figures one = benchmark(100, 1, 0, true);
    std::printf("RESULT gui live_ms=%.3f scrub_ms=%.3f\n", one.live, one.scrub);
  }
  const Figures all = benchmark(100, 8, -1, true);
  const Figures single = benchmark(100, 8, 3, true);
  std::printf("RESULT gui_ranks all_live_ms=%.3f all_scrub_ms=%.3f rank_live_ms=%.3f rank_scrub_ms=%.3f\n", all.live,
              all.scrub, single.live, single.scrub);
  return 0;
}
