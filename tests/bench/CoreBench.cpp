// Benchmarks of the engine. Prints figures; asserts nothing. See scripts/bench.sh.
//   hookscope-core-bench overhead MODEL INPUT_SPEC [ROUNDS [HOOKSCOPE_CLI]]
//     (with HOOKSCOPE_CLI also (d): the model run by an engine process, `hookscope-cli serve`, as
//     the window runs it, timed here from the command to its steps' statistics received)
//   hookscope-core-bench stats
//   hookscope-core-bench memory
//   hookscope-core-bench limits FIXTURES_DIR
#include "common/Allocator.h"
#include "kernels/StatsKernels.h"
#include "links/AttachJob.h"
#include "links/EngineProcess.h"
#include "files/ExportManifest.h"
#include "store/CaptureStore.h"
#include "model/Model.h"
#include "rules/RuleEvaluator.h"
#include "run/StepRunner.h"
#include "run/TorchStats.h"
#include "model/TorchSaveFile.h"

#include <sys/resource.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <array>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace hookscope;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Config {
  const char* name;
  bool instrument;
  bool hookAll;
  std::unique_ptr<Model> model;
  std::unique_ptr<StepRunner> runner;
  std::vector<double> stepMs;
  std::vector<double> captureMs;
  std::vector<double> faults;
  std::vector<double> forwardMs;
  std::vector<double> backwardMs;
  std::vector<double> optimizerMs;
  StepResult last;
};

/// The model in an engine process with every module hooked, as the window runs it.
struct EngineConfig {
  std::unique_ptr<EngineProcess> process;
  std::shared_ptr<CaptureStore> store = std::make_shared<CaptureStore>();
  std::unique_ptr<AttachJob> job;
  std::vector<double> stepMs;
  std::vector<double> engineStepMs;  ///< the step as the engine timed it, inside its process
  std::mutex waitMutex;
  std::condition_variable settled;
  bool start(const std::string& cli, const std::string& path, const std::string& spec, std::size_t modules) {
    EngineOptions options;
    options.program = cli;
    options.model = path;
    std::string error;
    process = EngineProcess::start(options, store, nullptr, 120000, &error);
    if (!process) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return false;
    }
    job = std::make_unique<AttachJob>(store);
    job->setOnSettled([this](std::int64_t, const std::vector<Alert>&, const std::optional<Alert>&) {
      settled.notify_all();  // under the job's lock: waiters read settledStep() after it
    });
    job->pause();
    job->setAllHooks(std::vector<std::uint8_t>(modules, kindBit(CaptureKind::Activation) | kindBit(CaptureKind::Gradient)));
    if (!job->add(process->takeLink(), &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return false;
    }
    RunConfig config;
    config.inputSpecs = {spec};
    config.loss = LossKind::CrossEntropy;
    config.optimizer = OptimizerKind::Sgd;
    job->configure(runConfigText(config));
    return steps(3, false);
  }
  /// Runs `count` steps and waits for their statistics.
  bool steps(int count, bool timed) {
    const std::int64_t until = job->settledStep() + count;
    const auto start = Clock::now();
    job->step(count);
    {
      // Woken by each settled step, as the window is: no polling that would take a core.
      std::unique_lock<std::mutex> lock(waitMutex);
      while (job->settledStep() < until) {
        if (job->waitEnded(0)) return false;
        settled.wait_for(lock, std::chrono::milliseconds(100));
      }
    }
    if (timed) {
      stepMs.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count() / count);
      for (const auto& p : store->scalars("step_ms")) {
        if (p.step > until - count) engineStepMs.push_back(p.value);
      }
    }
    return true;
  }
};

int overhead(const std::string& path, const std::string& spec, int rounds, const std::string& cli) {
  std::vector<Config> configs;
  configs.push_back({"(a) not instrumented", false, false, nullptr, nullptr, {}, {}, {}, {}, {}, {}, {}});
  configs.push_back({"(b) instrumented, nothing ticked", true, false, nullptr, nullptr, {}, {}, {}, {}, {}, {}, {}});
  configs.push_back({"(c) every module: activations + gradients", true, true, nullptr, nullptr, {}, {}, {}, {}, {}, {}, {}});
  for (auto& c : configs) {
    std::string error;
    LoadOptions options;
    options.instrument = c.instrument;
    c.model = Model::load(path, &error, options);
    if (!c.model) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 3;
    }
    if (c.hookAll) {
      for (std::size_t i = 0; i < c.model->modules().size(); ++i) {
        c.model->setHooks(int(i), kindBit(CaptureKind::Activation) | kindBit(CaptureKind::Gradient));
      }
    }
    c.runner = std::make_unique<StepRunner>(*c.model, std::make_shared<CaptureStore>());
    RunConfig config;
    config.inputSpecs = {spec};
    config.loss = LossKind::CrossEntropy;
    config.optimizer = OptimizerKind::Sgd;
    if (!c.runner->configure(config, &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 4;
    }
    StepResult r;
    for (int warm = 0; warm < 3; ++warm) c.runner->step(&r, &error);  // profiling runs of the executor
  }
  const int stepsPerTurn = 3;
  EngineConfig engine;
  if (!cli.empty() && !engine.start(cli, path, spec, configs[2].model->modules().size())) return 4;
  for (int round = 0; round < rounds; ++round) {
    // This process's OpenMP threads spin a while after its own steps; the window's, which run
    // no model, never do: let them go to sleep before the engine's turn.
    if (!cli.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (!cli.empty() && !engine.steps(stepsPerTurn, true)) {
      std::fprintf(stderr, "the engine process ended: %s\n", engine.process->exitText().c_str());
      return 4;
    }
    for (auto& c : configs) {
      for (int s = 0; s < stepsPerTurn; ++s) {
        StepResult r;
        std::string error;
        const long faultsBefore = minorPageFaults();
        const auto start = Clock::now();
        if (!c.runner->step(&r, &error)) {
          std::fprintf(stderr, "%s\n", error.c_str());
          return 4;
        }
        c.stepMs.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
        c.captureMs.push_back(r.captureMs);
        c.forwardMs.push_back(r.forwardMs);
        c.backwardMs.push_back(r.backwardMs);
        c.optimizerMs.push_back(r.optimizerMs);
        c.last = r;
        c.faults.push_back(double(minorPageFaults() - faultsBefore));
      }
    }
  }
  const double a = median(configs[0].stepMs);
  std::printf("step overhead: %s, input %s, SGD, %d threads, %d rounds x %d steps, alternating\n", path.c_str(),
              spec.c_str(), at::get_num_threads(), rounds, stepsPerTurn);
  for (const auto& c : configs) {
    std::printf("  %-44s median %9.2f ms  ratio to (a) %.3f  (statistics inside: %.2f ms, page faults: %.0f)\n",
                c.name, median(c.stepMs), median(c.stepMs) / a, median(c.captureMs), median(c.faults));
    std::printf("  %-44s forward %.2f ms, backward %.2f ms, optimizer %.2f ms; captures copied %d, shared %d\n", "",
                median(c.forwardMs), median(c.backwardMs), median(c.optimizerMs), c.last.capturesCopied,
                c.last.capturesShared);
  }
  std::printf("RESULT overhead b/a=%.4f c/a=%.4f a_ms=%.3f c_ms=%.3f\n", median(configs[1].stepMs) / a,
              median(configs[2].stepMs) / a, a, median(configs[2].stepMs));
  if (!cli.empty()) {
    const double d = median(engine.stepMs);
    std::printf("  %-44s median %9.2f ms  ratio to (a) %.3f  (the step inside the engine: %.2f ms; to (c) %.3f)\n",
                "(d) (c) in an engine process, as the window", d, d / a, median(engine.engineStepMs),
                d / median(configs[2].stepMs));
    std::printf("RESULT engine d/a=%.4f d/c=%.4f d_ms=%.3f\n", d / a, d / median(configs[2].stepMs), d);
  }
  return 0;
}

int stats() {
  std::printf("statistics kernel (min, max, mean, std, norm, zeros, NaN/Inf, 64-bin histogram) vs one LibTorch sum\n"
              "over the same float32 tensor; LibTorch runs %d thread(s), the kernel one core or every idle core (%d);\n"
              "the kernel's scan in %s registers\n",
              at::get_num_threads(), int(std::thread::hardware_concurrency()), hookscope::kernels::scanRegisters());
  for (std::int64_t n : {std::int64_t(10000), std::int64_t(1000000), std::int64_t(10000000)}) {
    at::manual_seed(0);
    const at::Tensor t = at::randn({n});
    const int repeats = n <= 10000 ? 2000 : n <= 1000000 ? 300 : 40;
    volatile double sink = 0;
    // Each kernel alternates with the sum, back to back as captures arrive in a run; the
    // pool's helper thread is then awake (one woken from sleep adds about 0.1 ms here).
    auto timeAgainstSum = [&](StatsCores cores, std::vector<double>& statsUs, std::vector<double>& sumUs) {
      for (int i = 0; i < repeats; ++i) {
        auto start = Clock::now();
        sink = sink + t.sum().item<float>();
        sumUs.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
        start = Clock::now();
        sink = sink + computeTensorStats(t, 64, cores).l2norm;
        statsUs.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
    };
    std::vector<double> allUs, oneUs, sumUs;
    timeAgainstSum(StatsCores::Idle, allUs, sumUs);
    timeAgainstSum(StatsCores::One, oneUs, sumUs);
    const double sum = median(sumUs), all = median(allUs), one = median(oneUs);
    std::printf("  numel %9lld  sum %9.1f us  stats on idle cores %9.1f us (ratio %.2f)  on one core %9.1f us (ratio %.2f)\n",
                (long long)n, sum, all, all / sum, one, one / sum);
    std::printf("RESULT stats numel=%lld sum_us=%.2f stats_us=%.2f ratio=%.3f one_core_us=%.2f one_core_ratio=%.3f\n",
                (long long)n, sum, all, all / sum, one, one / sum);
  }
  return 0;
}

int memory() {
  TensorStats s;
  s.shape = {8, 64, 28, 28};
  s.dtype = "float32";
  s.numel = 8 * 64 * 28 * 28;
  s.histogram.assign(64, 1);
  const std::size_t perCapture = CaptureStore::pointBytes(s);
  CaptureStore store;  // default cap
  const int layers = 100, steps = 10000;
  std::vector<SeriesKey> keys;
  for (int l = 0; l < layers; ++l) keys.push_back({"layer" + std::to_string(l) + ".conv", 0, CaptureKind::Gradient, 0});
  const auto start = Clock::now();
  std::size_t peak = 0;
  for (int step = 0; step < steps; ++step) {
    for (const auto& key : keys) store.add(step, key, s);
    peak = std::max(peak, store.bytesUsed());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const auto kept = store.steps();
  std::printf("capture store: %d layers x %d steps, default cap %.0f MiB\n", layers, steps, double(store.capBytes()) / (1 << 20));
  std::printf("  bytes per capture (64-bin histogram, 4-d shape): %zu\n", perCapture);
  std::printf("  without a cap this would be %.0f MiB\n", double(perCapture) * layers * steps / (1 << 20));
  std::printf("  store after the run: %.1f MiB (peak %.1f MiB), %zu steps kept (first %lld, last %lld, stride %lld), %zu thinnings recorded\n",
              double(store.bytesUsed()) / (1 << 20), double(peak) / (1 << 20), kept.size(), (long long)kept.front(),
              (long long)kept.back(), (long long)store.stride(), store.thinning().size());
  std::printf("  %.2f us per add (including thinning)\n", seconds * 1e6 / (double(layers) * steps));
  std::printf("RESULT memory bytes_per_capture=%zu final_mib=%.2f peak_mib=%.2f cap_mib=%.0f steps_kept=%zu thinnings=%zu\n",
              perCapture, double(store.bytesUsed()) / (1 << 20), double(peak) / (1 << 20),
              double(store.capBytes()) / (1 << 20), kept.size(), store.thinning().size());
  return peak <= store.capBytes() ? 0 : 1;
}

// The band update (issue 49) against the store update it rides on: 1,000 series a step, each
// capture added to a store that keeps bands and to one that keeps none, in turns. Scores are
// made when read: the add pays nothing for them; the anomaly rule (off unless asked for) reads
// every series' score each step, so a recorder or window with it on pays the scoring then; the
// deviation view, explain and a spike read them once.
int bands(int series) {
  const int steps = 600, rounds = 3;
  std::vector<SeriesKey> keys;
  for (int l = 0; l < series; ++l) {
    keys.push_back({"blocks." + std::to_string(l / 10) + ".layer" + std::to_string(l % 10), 0, CaptureKind::Activation, 0});
  }
  std::mt19937 random(49);
  std::normal_distribution<double> noise(0, 0.05);
  std::vector<TensorStats> samples(64);
  for (auto& s : samples) {
    s.shape = {8, 64, 28, 28};
    s.dtype = "float32";
    s.numel = 8 * 64 * 28 * 28;
    s.histogram.assign(64, 1);
    s.l2norm = std::exp(noise(random));
    s.std = s.l2norm / 400;
    s.zeroFraction = 0.5 + noise(random);
  }
  // (a) the store's add alone; (b) what the recorder does a step: each capture added, then the
  // rules over the step (they read every series' point at the step); (c) the same with the
  // anomaly rule on, which scores every series each step; (d) scoring the whole run when read
  // afterwards (the deviation view opened at the end, explain on the export).
  enum Work { AddOnly, Rules, Anomaly };
  std::map<std::pair<bool, int>, std::vector<double>> us;
  std::vector<double> readUs;
  RuleSettings anomalyOn;
  anomalyOn.enabled[std::size_t(RuleKind::Anomaly)] = true;
  for (int round = 0; round < rounds; ++round) {
    for (const bool keep : {true, false}) {
      for (const int work : {AddOnly, Rules, Anomaly}) {
        CaptureStore store;
        if (!keep) store.setBandSettings(BandSettings{0, 8, 6});
        RuleEvaluator evaluator(work == Anomaly ? anomalyOn : RuleSettings{});
        const auto start = Clock::now();
        for (int step = 0; step < steps; ++step) {
          for (int i = 0; i < series; ++i) store.add(step, keys[std::size_t(i)], samples[std::size_t((step + i) % 64)]);
          if (work != AddOnly) evaluator.evaluate(store, step, {});
        }
        us[{keep, work}].push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / steps);
        if (keep && work == AddOnly) {
          const auto read = Clock::now();
          for (const auto& key : keys) store.bandPoints(key);
          readUs.push_back(std::chrono::duration<double, std::micro>(Clock::now() - read).count() / steps);
        }
      }
    }
  }
  const auto at = [&](bool keep, int work) { return median(us[{keep, work}]); };
  const double with = at(true, AddOnly), without = at(false, AddOnly);
  const double stepWith = at(true, Rules), stepWithout = at(false, Rules);
  const double anomalyWith = at(true, Anomaly), anomalyWithout = at(false, Anomaly);
  std::printf("bands: %d series x %d steps (window 200, 4 statistics a series)\n", series, steps);
  std::printf("  the store's add a step: %.0f us without bands, %.0f us with (%+.1f%%)\n", without, with,
              100 * (with - without) / without);
  std::printf("  the recorder's step (add, then the rules): %.0f us without bands, %.0f us with (%+.1f%%)\n",
              stepWithout, stepWith, 100 * (stepWith - stepWithout) / stepWithout);
  std::printf("  with the anomaly rule on (every score read each step): %.0f us a step; without bands it judges "
              "nothing: %.0f us (%+.1f%%)\n",
              anomalyWith, anomalyWithout, 100 * (anomalyWith - anomalyWithout) / anomalyWithout);
  std::printf("  scoring the whole run when read afterwards: %.0f us a step of the run (%.0f ms in all)\n",
              median(readUs), median(readUs) * steps / 1000);
  // The design not taken, for scale: an exponential average and mean absolute deviation of the
  // same log values (two numbers a statistic, no window), with the same add around it.
  struct Ema { double mean = 0, spread = 0; std::int64_t seen = 0; };
  std::vector<std::array<Ema, kBandStatistics>> emas(std::size_t(series) + 0);
  std::vector<double> emaUs;
  double sink = 0;
  for (int round = 0; round < rounds; ++round) {
    const auto start = Clock::now();
    for (int step = 0; step < steps; ++step) {
      for (int i = 0; i < series; ++i) {
        const TensorStats& s = samples[std::size_t((step + i) % 64)];
        const double values[kBandStatistics] = {s.l2norm, s.std, s.amax, s.zeroFraction};
        for (int k = 0; k < kBandStatistics; ++k) {
          Ema& e = emas[std::size_t(i)][std::size_t(k)];
          const auto x = bandMeasure(bandMeasureOf(k), values[k]);
          if (!x) continue;
          sink += e.seen >= 8 ? (*x - e.mean) / std::max(e.spread * 1.2533, 0.025) : 0;
          const double a = e.seen < 200 ? 1.0 / double(++e.seen) : 1.0 / 200;
          e.mean += a * (*x - e.mean);
          e.spread += a * (std::fabs(*x - e.mean) - e.spread);
        }
      }
    }
    emaUs.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / steps);
  }
  std::printf("  for scale, an exponential band (mean and mean deviation, no window) alone: %.0f us a step "
              "(%.1f%% of the add, %.1f%% of the recorder's step)%s\n",
              median(emaUs), 100 * median(emaUs) / without, 100 * median(emaUs) / stepWithout, sink == 1.5 ? " " : "");
  std::printf("RESULT bands series=%d store_us=%.1f with_bands_us=%.1f band_share=%.4f step_us=%.1f "
              "step_with_bands_us=%.1f step_band_share=%.4f anomaly_step_us=%.1f read_us=%.1f\n",
              series, without, with, (with - without) / without, stepWithout, stepWith,
              (stepWith - stepWithout) / stepWithout, anomalyWith, median(readUs));
  return 0;
}

double maxRssMiB() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024;
}

// Memory bounds on hostile input: decompression bombs, a rule firing every step, a module
// called 20,000 times per step.
int limits(const std::string& fixtures) {
  const double startRss = maxRssMiB();
  std::string error;
  const bool modelLoaded = bool(Model::load(fixtures + "/bad/bomb_model.pt", &error));
  bool dataLoaded = true;
  try {
    loadTorchSaveFile(fixtures + "/bad/bomb.data.pt");
  } catch (const std::exception&) {
    dataLoaded = false;
  }
  const double bombRss = maxRssMiB() - startRss;
  std::printf("decompression bombs (300 MiB records in files of well under 1 MiB): model %s, data file %s; "
              "peak RSS grew by %.1f MiB\n",
              modelLoaded ? "LOADED" : "refused", dataLoaded ? "LOADED" : "refused", bombRss);

  const std::size_t cap = 16u << 20;
  CaptureStore alertStore(cap);
  RuleEvaluator rules;
  const int steps = 30000, series = 22;
  std::size_t fired = 0;
  for (int step = 0; step < steps; ++step) {
    for (int i = 0; i < series; ++i) {
      TensorStats s;
      s.shape = {8, 64};
      s.numel = 512;
      s.zeroFraction = 1.0;  // dead units, every step, every series
      s.histogram.assign(64, 1);
      alertStore.add(step, {"relu" + std::to_string(i), 0, CaptureKind::Activation, 0}, s);
    }
    fired += rules.evaluate(alertStore, step, {}).size();
    alertStore.setAlertBytes(rules.bytes());
  }
  const std::string csv = alertsCsv(rules.alerts());
  std::printf("a rule firing on %d series for %d steps, 16 MiB cap: %zu firings kept as %zu alerts "
              "(%.1f KiB, alerts.csv %.1f KiB); store %.1f MiB of %.0f MiB\n",
              series, steps, fired, rules.alerts().size(), double(rules.bytes()) / 1024, double(csv.size()) / 1024,
              double(alertStore.bytesUsed()) / (1 << 20), double(cap) / (1 << 20));

  CaptureStore callStore(cap);
  std::size_t peak = 0;
  const int calls = 20000;
  for (int step = 0; step < 5; ++step) {
    for (int call = 0; call < calls; ++call) {
      TensorStats s;
      s.shape = {8, 16};
      s.numel = 128;
      s.histogram.assign(64, 1);
      callStore.add(step, {"cell", call, CaptureKind::Activation, 0}, s);
      peak = std::max(peak, callStore.bytesUsed());
    }
  }
  const auto thinning = callStore.thinning();
  std::printf("a module called %d times per step, 5 steps, 16 MiB cap: peak %.1f MiB, %zu thinnings, "
              "every %lld-th call kept\n",
              calls, double(peak) / (1 << 20), thinning.size(),
              thinning.empty() ? 1LL : (long long)thinning.back().callStride);
  std::printf("RESULT limits bomb_rss_mib=%.1f bombs_refused=%d alerts=%zu alert_kib=%.1f call_peak_mib=%.2f cap_mib=16\n",
              bombRss, int(!modelLoaded && !dataLoaded), rules.alerts().size(), double(rules.bytes()) / 1024,
              double(peak) / (1 << 20));
  return (!modelLoaded && !dataLoaded && peak <= cap && alertStore.bytesUsed() <= cap) ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  keepFreedMemory();  // as HookScope's programs do
  if (argc >= 4 && std::strcmp(argv[1], "overhead") == 0) {
    return overhead(argv[2], argv[3], argc > 4 ? std::atoi(argv[4]) : 5, argc > 5 ? argv[5] : "");
  }
  if (argc >= 2 && std::strcmp(argv[1], "stats") == 0) return stats();
  if (argc >= 2 && std::strcmp(argv[1], "memory") == 0) return memory();
  if (argc >= 2 && std::strcmp(argv[1], "bands") == 0) return bands(argc > 2 ? std::atoi(argv[2]) : 1000);
  if (argc >= 3 && std::strcmp(argv[1], "limits") == 0) return limits(argv[2]);
  std::fprintf(stderr, "usage: hookscope-core-bench overhead MODEL INPUT_SPEC [ROUNDS [HOOKSCOPE_CLI]] | stats | memory | bands [SERIES] | limits FIXTURES\n");
  return 2;
}
