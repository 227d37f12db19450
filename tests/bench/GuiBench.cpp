// Time the GUI thread spends redrawing every plot with 100 hooked layers and 2,000 steps of
// history (offscreen). Prints figures; asserts nothing.
#include "PlotsPanel.h"
#include "plots/PlotPage.h"
#include "plots/QCustomPlotInclude.h"

#include <QApplication>
#include <QElapsedTimer>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

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

// One frame as the window makes it: refresh every page, then let the queued replots run.
double frame(PlotsPanel& panel) {
  QElapsedTimer timer;
  timer.start();
  panel.refresh();
  QCoreApplication::processEvents();
  return double(timer.nsecsElapsed()) / 1e6;
}

} // namespace

int main(int argc, char** argv) {
  qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  const int layers = 100, history = 2000, frames = 60;
  auto store = std::make_shared<CaptureStore>();
  std::mt19937 rng(0);
  auto addStep = [&](int step) {
    for (int l = 0; l < layers; ++l) {
      const std::string path = "layer" + std::to_string(l);
      store->add(step, {path, 0, CaptureKind::Gradient, 0}, fakeStats(rng, step));
      store->add(step, {path, 0, CaptureKind::Activation, 0}, fakeStats(rng, step));
    }
    store->addScalar(step, "loss", 2.0 / (1 + 0.01 * step));
  };
  for (int step = 0; step < history; ++step) addStep(step);
  PlotsPanel panel;
  panel.resize(1200, 800);
  panel.show();
  panel.setStore(store);
  panel.setSelectedModule("layer42");
  frame(panel);
  // Live: each frame follows one new step (the store changed).
  std::vector<double> live;
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
  std::printf("GUI refresh, offscreen, %dx%d: %d hooked layers (gradient + activation series), %d steps of history\n",
              panel.width(), panel.height(), layers, history);
  std::printf("  live frame (a new step arrived): median %.2f ms, max %.2f ms\n", median(live),
              *std::max_element(live.begin(), live.end()));
  for (int i = 0; i < pages.size(); ++i) {
    std::printf("    of which drawing \"%s\": median %.2f ms\n", qPrintable(pages[i]->title()), median(drawMs[std::size_t(i)]));
  }
  std::printf("  scrub frame (shown step moved): median %.2f ms\n", median(scrub));
  std::printf("RESULT gui live_ms=%.3f scrub_ms=%.3f\n", median(live), median(scrub));
  return 0;
}
