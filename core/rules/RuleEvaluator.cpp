#include "rules/RuleEvaluator.h"

#include "common/CsvFormat.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <sstream>

namespace hookscope {

namespace {

constexpr const char* kRuleNames[kRuleCount] = {"non_finite",   "exploding_gradient", "vanishing_gradient",
                                                "dead_units",   "saturation",         "update_ratio",
                                                "loss_plateau", "rank_divergence",    "fp16_overflow",
                                                "fp8_underflow", "anomaly"};

std::string label(const std::string& module) { return module.empty() ? std::string("the root module") : "'" + module + "'"; }

std::string number(double v) {
  std::ostringstream out;
  out.precision(4);
  out << v;
  return out.str();
}

// Fraction of finite values within eps of the bounds, from the histogram (bin centers).
double nearBoundsFraction(const TensorStats& s, double low, double high, double eps) {
  if (s.histogram.empty() || s.numel == 0) return 0;
  const auto edges = s.edges();
  double near = 0, total = 0;
  for (std::size_t b = 0; b < s.histogram.size(); ++b) {
    const double center = 0.5 * (edges[b] + edges[b + 1]);
    total += double(s.histogram[b]);
    if (center <= low + eps || center >= high - eps) near += double(s.histogram[b]);
  }
  return total > 0 ? near / total : 0;
}

} // namespace

const char* ruleName(RuleKind rule) { return kRuleNames[int(rule)]; }

std::string ruleNameList() {
  std::string list;
  for (const char* name : kRuleNames) list += std::string(list.empty() ? "" : ", ") + name;
  return list;
}

std::optional<RuleKind> parseRuleName(const std::string& name) {
  for (int i = 0; i < kRuleCount; ++i) {
    if (name == kRuleNames[i]) return RuleKind(i);
  }
  return std::nullopt;
}

double ruleThreshold(const RuleSettings& s, RuleKind rule) {
  switch (rule) {
    case RuleKind::NonFinite: return 0;
    case RuleKind::ExplodingGradient: return s.explodingNorm;
    case RuleKind::VanishingGradient: return s.vanishingNorm;
    case RuleKind::DeadUnits: return s.deadFraction;
    case RuleKind::Saturation: return s.saturationFraction;
    case RuleKind::UpdateRatio: return s.updateRatioHigh;
    case RuleKind::LossPlateau: return s.plateauWindow;
    case RuleKind::RankDivergence: return s.divergence;
    case RuleKind::Fp16Overflow: return s.fp16Overflow;
    case RuleKind::Fp8Underflow: return s.fp8Underflow;
    case RuleKind::Anomaly: return s.anomalySigma;
  }
  return 0;
}

const char* ruleThresholdMeaning(RuleKind rule) {
  switch (rule) {
    case RuleKind::NonFinite: return "(no threshold: any NaN or Inf)";
    case RuleKind::ExplodingGradient: return "gradient norm above";
    case RuleKind::VanishingGradient: return "gradient norm below";
    case RuleKind::DeadUnits: return "fraction of exact zeros above";
    case RuleKind::Saturation: return "fraction at the bounds above";
    case RuleKind::UpdateRatio: return "update / weight norm above (below: 1e-5 of it)";
    case RuleKind::LossPlateau: return "steps without a lower loss";
    case RuleKind::RankDivergence: return "relative difference between ranks above";
    case RuleKind::Fp16Overflow: return "fraction past float16's 65504 above";
    case RuleKind::Fp8Underflow: return "fraction fp8 would flush to zero above";
    case RuleKind::Anomaly: return "robust deviations from a series' own last 200 steps, at least";
  }
  return "";
}

bool setRuleThreshold(RuleSettings& s, RuleKind rule, double value, std::string* error) {
  auto fail = [&](const std::string& why) {
    if (error) *error = std::string("threshold of ") + ruleName(rule) + ": " + why;
    return false;
  };
  if (!std::isfinite(value)) return fail("not a finite number");
  switch (rule) {
    case RuleKind::NonFinite: return fail("non_finite has no threshold");
    case RuleKind::ExplodingGradient:
      if (value <= 0) return fail("must be positive");
      s.explodingNorm = value;
      return true;
    case RuleKind::VanishingGradient:
      if (value < 0) return fail("must not be negative");
      s.vanishingNorm = value;
      return true;
    case RuleKind::DeadUnits:
    case RuleKind::Saturation:
    case RuleKind::Fp16Overflow:
    case RuleKind::Fp8Underflow:
      if (value < 0 || value > 1) return fail("is a fraction in [0, 1]");
      (rule == RuleKind::DeadUnits      ? s.deadFraction
       : rule == RuleKind::Saturation   ? s.saturationFraction
       : rule == RuleKind::Fp16Overflow ? s.fp16Overflow
                                        : s.fp8Underflow) = value;
      return true;
    case RuleKind::UpdateRatio:
      if (value <= 0) return fail("must be positive");
      s.updateRatioHigh = value;
      s.updateRatioLow = value * 1e-5;
      return true;
    case RuleKind::LossPlateau:
      if (value < 2 || value != std::floor(value)) return fail("is a whole number of steps, 2 or more");
      s.plateauWindow = int(value);
      return true;
    case RuleKind::RankDivergence:
      if (value < 0) return fail("must not be negative");
      s.divergence = value;
      return true;
    case RuleKind::Anomaly:
      if (value <= 0) return fail("is a positive number of deviations, such as 6");
      s.anomalySigma = value;
      s.enabled[std::size_t(RuleKind::Anomaly)] = true;  // a threshold asked for is a rule wanted
      return true;
  }
  return false;
}

RuleEvaluator::RuleEvaluator(RuleSettings settings) : m_settings(settings) {}

namespace {

// One step's check: the rules on what the step captured, each firing kept in `fired`.
class StepCheck {
public:
  /// points: filled with the step's points (its capacity reused).
  StepCheck(const RuleSettings& settings, int rank, const std::map<std::string, std::string>& types,
            const CaptureStore& store, std::int64_t step, std::vector<std::pair<SeriesKey, SeriesPoint>>& points)
      : m_settings(settings), m_rank(rank), m_types(types), m_store(store), m_step(step), m_points(points) {
    store.pointsAt(step, &points, [this](const SeriesKey& key) { return key.kind == CaptureKind::Activation && bounds(key.module); });
  }

  std::vector<Alert> fired;

  bool on(RuleKind rule) const { return m_settings.enabled[std::size_t(rule)]; }
  /// Every series' point at this step, in key order.
  const std::vector<std::pair<SeriesKey, SeriesPoint>>& points() const { return m_points; }
  /// The series' point at this step; null when it has none.
  const SeriesPoint* at(const SeriesKey& key) const {
    const auto i = indexOf(key);
    return i ? &m_points[*i].second : nullptr;
  }
  /// Where in points() the series' point is; none when it has none.
  std::optional<std::size_t> indexOf(const SeriesKey& key) const {
    const auto pos = std::lower_bound(m_points.begin(), m_points.end(), key,
                                      [](const auto& entry, const SeriesKey& k) { return entry.first < k; });
    if (pos == m_points.end() || !(pos->first == key)) return std::nullopt;
    return std::size_t(pos - m_points.begin());
  }
  void fire(const std::string& module, CaptureKind kind, RuleKind rule, double value, std::string message) {
    Alert alert{m_step, module, kind, rule, value, std::move(message)};
    alert.rank = m_rank;
    fired.push_back(std::move(alert));
  }

  // non_finite: the first place it appears, not everywhere it spread to.
  void nonFinite(const StepOrder& order) {
    bool found = false;
    const auto fireAt = [&](const SeriesKey& key, const TensorStats& s, const char* where) {
      fire(key.module, key.kind, RuleKind::NonFinite, double(s.nanCount + s.infCount),
           std::string(where) + std::string(captureKindName(key.kind)) + " of " + label(key.module) + " (" +
               std::to_string(s.nanCount) + " NaN, " + std::to_string(s.infCount) + " Inf)");
      found = true;
    };
    for (const auto* sequence : {&order.forward, &order.backward}) {
      for (const auto& key : *sequence) {
        const SeriesPoint* p = at(key);
        if (p && p->stats.hasNonFinite()) {
          fireAt(key, p->stats, "NaN/Inf first appears in the ");
          break;
        }
      }
    }
    // Nothing computed holds one, the weights do (a checkpoint, a capture of parameters alone):
    // each parameter that holds NaN or Inf is said. Once activations hold them too, those are
    // where it is said first, not every parameter it spread to.
    if (!found) {
      for (const auto& [key, p] : m_points) {
        if (key.kind == CaptureKind::Param && key.rank == m_rank && p.stats.hasNonFinite()) {
          fireAt(key, p.stats, "NaN/Inf in the ");
        }
      }
    }
    const auto loss = m_store.scalars("loss", m_rank);
    if (!loss.empty() && loss.back().step == m_step && !std::isfinite(loss.back().value)) {
      fire("", CaptureKind::Activation, RuleKind::NonFinite, loss.back().value, "the loss is " + number(loss.back().value));
    }
  }

  // The exploding rule's window of every gradient it judges at this step, read from the store at
  // once (a search of the store and a copy for each series cost more than the rules).
  void readGradientWindows() {
    m_windowOf.assign(m_points.size(), -1);
    if (!on(RuleKind::ExplodingGradient)) return;
    std::vector<const SeriesKey*> keys;
    for (std::size_t i = 0; i < m_points.size(); ++i) {
      const auto& [key, p] = m_points[i];
      if (key.rank == m_rank && key.kind == CaptureKind::Gradient && std::isfinite(p.stats.l2norm) && !p.stats.hasNonFinite()) {
        m_windowOf[i] = int(keys.size());
        keys.push_back(&key);
      }
    }
    m_store.valuesBetween(keys, &TensorStats::l2norm, m_step - m_settings.explodingWindow, m_step, &m_windows, &m_windowEnds);
  }

  // Point i of points(), a gradient. A tensor holding NaN or Inf is non_finite's: no rule judges
  // it by its finite part (a gradient 25% NaN and 75% zero would read as a vanishing norm of 0).
  void gradient(std::size_t i) {
    const SeriesKey& key = m_points[i].first;
    const TensorStats& s = m_points[i].second.stats;
    if (s.hasNonFinite()) return;
    if (on(RuleKind::ExplodingGradient) && m_windowOf[i] >= 0) exploding(key, s, std::size_t(m_windowOf[i]));
    if (on(RuleKind::VanishingGradient) && s.numel > 0 && s.l2norm < m_settings.vanishingNorm) {
      fire(key.module, key.kind, RuleKind::VanishingGradient, s.l2norm,
           "gradient norm at " + label(key.module) + " is " + number(s.l2norm) + ", below " + number(m_settings.vanishingNorm));
    }
  }

  // window: the series' place in m_windowEnds. Only the window's steps: reading the whole
  // history at every step made a run's rules quadratic in its steps (the recorder of a long job
  // spent its time here).
  void exploding(const SeriesKey& key, const TensorStats& s, std::size_t window) {
    std::vector<double>& history = m_history;
    history.clear();
    for (std::size_t v = window ? m_windowEnds[window - 1] : 0; v < m_windowEnds[window]; ++v) {
      if (std::isfinite(m_windows[v])) history.push_back(m_windows[v]);
    }
    double median = 0;
    if (history.size() >= 5) {
      std::nth_element(history.begin(), history.begin() + long(history.size() / 2), history.end());
      median = history[history.size() / 2];
    }
    if (s.l2norm > m_settings.explodingNorm) {
      fire(key.module, key.kind, RuleKind::ExplodingGradient, s.l2norm,
           "gradient norm at " + label(key.module) + " is " + number(s.l2norm) + ", above " + number(m_settings.explodingNorm));
    } else if (median > 0 && s.l2norm > m_settings.explodingFactor * median) {
      fire(key.module, key.kind, RuleKind::ExplodingGradient, s.l2norm,
           "gradient norm at " + label(key.module) + " is " + number(s.l2norm) + ", " + number(s.l2norm / median) +
               " times its median of the last steps");
    }
  }

  void activation(const SeriesKey& key, const TensorStats& s) {
    if (on(RuleKind::DeadUnits) && s.numel > 0 && s.zeroFraction > m_settings.deadFraction) {
      fire(key.module, key.kind, RuleKind::DeadUnits, s.zeroFraction,
           number(100 * s.zeroFraction) + "% of the outputs of " + label(key.module) + " are exactly zero");
    }
    const auto range = bounds(key.module);
    if (!range) return;
    const double fraction = nearBoundsFraction(s, range->low, range->high, m_settings.saturationEpsilon);
    if (fraction > m_settings.saturationFraction) {
      fire(key.module, key.kind, RuleKind::Saturation, fraction,
           number(100 * fraction) + "% of the outputs of " + label(key.module) + " (" + range->type + ") sit at its bounds");
    }
  }

  // The bounds a module's outputs saturate at, where saturation is judged for its type (the
  // rule on); the only rule that reads a histogram's counts.
  struct Bounds {
    double low, high;
    const std::string& type;
  };
  std::optional<Bounds> bounds(const std::string& module) const {
    const auto type = m_types.find(module);
    if (!on(RuleKind::Saturation) || type == m_types.end()) return std::nullopt;
    if (type->second == "Sigmoid") return Bounds{0, 1, type->second};
    if (type->second == "Tanh" || type->second == "Hardtanh") return Bounds{-1, 1, type->second};
    return std::nullopt;
  }

  void update(const SeriesKey& key, const TensorStats& s) {
    if (on(RuleKind::UpdateRatio) && s.numel > 0 && !s.hasNonFinite() && std::isfinite(s.l2norm) &&
        (s.l2norm < m_settings.updateRatioLow || s.l2norm > m_settings.updateRatioHigh)) {
      fire(key.module, key.kind, RuleKind::UpdateRatio, s.l2norm,
           "update of " + key.module + " is " + number(s.l2norm) + " of its norm, outside [" +
               number(m_settings.updateRatioLow) + ", " + number(m_settings.updateRatioHigh) + "]");
    }
  }

  // fp16_overflow and fp8_underflow: in forward order, then backward order (as non_finite, the
  // first alert is the first place it shows), then the series no order lists (inputs, parameters);
  // each once, marked by its place in points().
  void precision(const StepOrder& order) {
    std::vector<char> done(m_points.size(), 0);
    const auto check = [&](std::size_t i) {
      if (done[i]) return;
      done[i] = 1;
      const auto& [key, p] = m_points[i];
      if (key.kind != CaptureKind::Update && p.stats.hasPrecision() && p.stats.numel > 0) precisionOf(key, p.stats);
    };
    for (const auto* sequence : {&order.forward, &order.backward}) {
      for (const auto& key : *sequence) {
        if (const auto i = indexOf(key)) check(*i);
      }
    }
    for (std::size_t i = 0; i < m_points.size(); ++i) {
      if (m_points[i].first.rank == m_rank) check(i);
    }
  }

  void precisionOf(const SeriesKey& key, const TensorStats& s) {
    const auto what = [&] { return std::string("the ") + captureKindName(key.kind) + " of " + label(key.module); };
    const double numel = double(s.numel);
    if (on(RuleKind::Fp16Overflow) && s.f16Overflow > 0 && double(s.f16Overflow) / numel > m_settings.fp16Overflow) {
      fire(key.module, key.kind, RuleKind::Fp16Overflow, double(s.f16Overflow) / numel,
           std::to_string(s.f16Overflow) + " values (" + number(100 * double(s.f16Overflow) / numel) + "%) of " + what() +
               " overflow float16 (|v| > 65504; the largest is " + number(s.amax) + ")");
    }
    // The hybrid recipe of fp8 training: E4M3 forward, E5M2 (more range, less precision) for gradients.
    const bool backward = key.kind == CaptureKind::Gradient || key.kind == CaptureKind::ParamGrad;
    const std::int64_t flushed = backward ? s.e5m2Underflow : s.e4m3Underflow;
    if (on(RuleKind::Fp8Underflow) && flushed > 0 && double(flushed) / numel > m_settings.fp8Underflow) {
      fire(key.module, key.kind, RuleKind::Fp8Underflow, double(flushed) / numel,
           number(100 * double(flushed) / numel) + "% of " + what() + " would flush to zero in fp8 " +
               (backward ? "E5M2" : "E4M3") + " with per-tensor scaling (amax " + number(s.amax) + ")");
    }
  }

  // anomaly: the statistic furthest from its band, where it is sigma or more out (NaN or Inf
  // after the warmup count as out: non_finite names them too).
  void anomaly(const SeriesKey& key, const BandPoint& p) {
    // A band of a few steps is narrow: with hundreds of series, some leave theirs by 15 sigma in
    // the steps after its warmup (measured: docs/cli.md). The rule waits for a fuller one.
    if (int(p.bandValues) < m_settings.anomalyBand) return;
    const int worst = furthestOf(p.scores);
    if (worst < 0 || !(std::fabs(p.scores[std::size_t(worst)]) >= m_settings.anomalySigma)) return;
    const double score = p.scores[std::size_t(worst)];
    char text[96];
    std::snprintf(text, sizeof text, "%.1f sigma %s its band", std::fabs(score), score > 0 ? "above" : "below");
    fire(key.module, key.kind, RuleKind::Anomaly, score,
         std::string(kBandStatisticNames[worst]) + " of " + label(key.module) + " is " + text);
  }

  // In the order the step made them (as non_finite): a break on anomaly names the first.
  void anomalies(const StepOrder& order, const std::vector<SeriesKey>& keys) {
    std::set<SeriesKey> done;
    const auto judge = [&](const SeriesKey& key) {
      if (key.rank != m_rank || !done.insert(key).second) return;
      const auto points = m_store.bandPoints(key, m_step, m_step);  // scored as they are read
      if (!points.empty()) anomaly(key, points.front());
    };
    for (const auto& key : order.forward) judge(key);
    for (const auto& key : order.backward) judge(key);
    for (const auto& key : keys) judge(key);
  }

  void lossPlateau() {
    const auto loss = m_store.scalars("loss", m_rank);
    const int window = m_settings.plateauWindow;
    if (int(loss.size()) <= 2 * window || loss.back().step != m_step) return;
    double before = INFINITY, recent = INFINITY;
    const std::size_t n = loss.size();
    for (std::size_t i = n - 2 * std::size_t(window); i < n - std::size_t(window); ++i) before = std::min(before, loss[i].value);
    for (std::size_t i = n - std::size_t(window); i < n; ++i) recent = std::min(recent, loss[i].value);
    if (std::isfinite(before) && std::isfinite(recent) &&
        recent > before - m_settings.plateauMinDecrease * std::max(std::fabs(before), 1e-12)) {
      fire("", CaptureKind::Activation, RuleKind::LossPlateau, recent,
           "the loss has not decreased in " + std::to_string(window) + " steps (best " + number(recent) + " against " +
               number(before) + " before)");
    }
  }

private:
  const RuleSettings& m_settings;
  const int m_rank;
  const std::map<std::string, std::string>& m_types;
  const CaptureStore& m_store;
  const std::int64_t m_step;
  const std::vector<std::pair<SeriesKey, SeriesPoint>>& m_points;
  // readGradientWindows: each point's place in m_windowEnds (-1: none), the windows' values.
  std::vector<int> m_windowOf;
  std::vector<double> m_windows;
  std::vector<std::size_t> m_windowEnds;
  std::vector<double> m_history;  // one series' finite values, for its median
};

} // namespace

std::vector<Alert> RuleEvaluator::evaluate(const CaptureStore& store, std::int64_t step, const StepOrder& order) {
  StepCheck check(m_settings, m_rank, m_types, store, step, m_points);
  if (on(RuleKind::NonFinite)) check.nonFinite(order);
  check.readGradientWindows();
  for (std::size_t i = 0; i < check.points().size(); ++i) {
    const auto& [key, p] = check.points()[i];
    if (key.rank != m_rank) continue;
    const TensorStats& s = p.stats;
    if (key.kind == CaptureKind::Gradient && std::isfinite(s.l2norm)) check.gradient(i);
    if (key.kind == CaptureKind::Activation) check.activation(key, s);
    if (key.kind == CaptureKind::Update) check.update(key, s);
  }
  if (on(RuleKind::Anomaly)) check.anomalies(order, store.seriesKeys());
  if (on(RuleKind::Fp16Overflow) || on(RuleKind::Fp8Underflow)) check.precision(order);
  if (on(RuleKind::LossPlateau)) check.lossPlateau();
  add(check.fired);
  return check.fired;
}

void RuleEvaluator::add(const std::vector<Alert>& fired) {
  for (const auto& alert : fired) {
    const auto key = std::make_tuple(int(alert.rule), alert.module, int(alert.kind), alert.rank);
    const auto group = m_groups.find(key);
    if (group != m_groups.end()) {
      Alert& kept = m_alerts[group->second];
      kept.lastStep = alert.step;
      ++kept.count;
      continue;
    }
    m_groups.emplace(key, m_alerts.size());
    m_alerts.push_back(alert);
    m_alerts.back().lastStep = alert.step;
    m_bytes += sizeof(Alert) + 64 + alert.module.capacity() + alert.message.capacity();
  }
}

std::string alertsCsv(const std::vector<Alert>& alerts) {
  std::string out = std::string(kAlertsCsvHeader) + "\n";
  for (const auto& a : alerts) {
    out += std::to_string(a.step) + ',' + std::to_string(a.rank) + ',' + csvField(a.module) + ',' + captureKindName(a.kind) + ',' + ruleName(a.rule) + ',' +
           formatDouble(a.value) + ',' + csvField(a.message) + ',' + std::to_string(a.lastStep < 0 ? a.step : a.lastStep) +
           ',' + std::to_string(a.count) + '\n';
  }
  return out;
}

} // namespace hookscope
