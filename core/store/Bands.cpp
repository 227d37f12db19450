#include "store/Bands.h"

#include "store/RunCompare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <tuple>

namespace hookscope {

namespace {

BandMeasure measureOf(const std::string& statistic) {
  return statistic == "zero_frac" ? BandMeasure::Fraction : BandMeasure::Magnitude;
}

std::string format(const char* pattern, double a) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, a);
  return text;
}

BandScore storedScore(std::int64_t step, double value, double score) {
  BandScore out;
  out.step = step;
  out.value = value;
  out.scored = !std::isnan(score);
  out.score = out.scored ? score : 0;
  return out;
}

/// A series' points up to `step`. Scored again, every one (a band is made of what came before);
/// with the store's scores, only as far back as an excursion reaches: a long run's whole history
/// is not copied to explain one step.
std::vector<BandPoint> pointsUpTo(const CaptureStore& store, const SeriesKey& key, std::int64_t step, bool stored,
                                  double sigma) {
  if (!stored) return store.bandPoints(key, 0, step);
  for (std::int64_t span = 256;; span *= 4) {
    const std::int64_t from = step - span;
    auto points = store.bandPoints(key, from, step);
    if (from <= 0 || points.empty() || points.back().step != step) return points;
    // Does some statistic's run of out-of-band steps reach the first point read?
    bool reaches = false;
    for (std::size_t i = 0; i < kBandStatistics && !reaches; ++i) {
      auto out = [&](const BandPoint& p) { return !std::isnan(p.scores[i]) && std::fabs(p.scores[i]) >= sigma; };
      reaches = std::all_of(points.begin(), points.end(), out);
    }
    if (!reaches || !store.pointAt(key, points.front().step - 1, nullptr)) return points;
  }
}

std::string nameOf(const SeriesKey& key) {
  std::string where;
  if (key.rank == kWholeRank) where = " (whole tensor)";
  else if (key.rank != 0) where = " (rank " + std::to_string(key.rank) + ")";
  return std::string(captureKindName(key.kind)) + " '" + (key.module.empty() ? "(root)" : key.module) + "'" + where;
}

} // namespace

std::vector<BandScore> bandScores(const std::vector<std::pair<std::int64_t, std::optional<double>>>& points,
                                  const std::string& statistic, const BandSettings& settings) {
  // The running band (BandTracker.h): a binary search and a move of the values between the
  // old and the new one a step, where sorting each step's band again made --window 100000 over
  // 100,000 steps take hours. Its scores equal the sorted band's, bit for bit (BandTrackerTest).
  std::vector<BandScore> out;
  out.reserve(points.size());
  const BandMeasure kind = measureOf(statistic);
  RunningBand band;
  for (const auto& [step, measured] : points) {
    BandScore score;
    score.step = step;
    score.value = measured ? *measured : std::numeric_limits<double>::quiet_NaN();
    const double z = band.push(measured, kind, settings);
    score.scored = !std::isnan(z);
    score.score = score.scored ? z : 0;
    out.push_back(score);
  }
  return out;
}

std::optional<std::int64_t> excursionStart(const std::vector<BandScore>& scores, std::int64_t step, double sigma) {
  const auto at = std::find_if(scores.begin(), scores.end(), [&](const BandScore& s) { return s.step == step; });
  if (at == scores.end() || !at->scored || std::fabs(at->score) < sigma) return std::nullopt;
  std::int64_t start = step;
  for (auto it = std::make_reverse_iterator(at); it != scores.rend(); ++it) {
    if (!it->scored || std::fabs(it->score) < sigma) break;
    start = it->step;
  }
  return start;
}

std::optional<BandScore> largestRise(const std::vector<ScalarPoint>& loss, bool stored, const BandSettings& settings) {
  std::vector<BandScore> scores;
  if (stored) {
    for (const auto& p : loss) scores.push_back(storedScore(p.step, p.value, p.band));
  } else {
    std::vector<std::pair<std::int64_t, std::optional<double>>> values;
    for (const auto& p : loss) values.emplace_back(p.step, p.value);
    scores = bandScores(values, "loss", settings);
  }
  std::optional<BandScore> spike;
  for (const auto& s : scores) {
    if (s.scored && (!spike || s.score > spike->score)) spike = s;
  }
  return spike;
}

FirstMovers firstMovers(const CaptureStore& store, const std::vector<std::string>& moduleOrder,
                        std::optional<std::int64_t> step, const BandSettings& settings) {
  FirstMovers result;
  const BandSettings kept = store.bandSettings();
  const bool stored = kept.window == settings.window && kept.warmup == settings.warmup;
  if (!step) {
    const auto loss = store.scalars("loss", 0);
    const std::optional<BandScore> spike = largestRise(loss, stored, settings);
    result.loss = spike;
    if (!spike) {
      result.why = "the loss has " + std::to_string(loss.size()) + " steps; a band needs " +
                   std::to_string(settings.warmup + 1) + " before the step it judges";
      return result;
    }
    step = spike->step;
    if (spike->score < settings.sigma) {
      char text[200];
      std::snprintf(text, sizeof text,
                    "the loss never left its band (its largest rise: step %lld, %+.1f sigma against its last %d "
                    "steps; %.1f needed)",
                    static_cast<long long>(spike->step), spike->score, settings.window, settings.sigma);
      result.why = text;
    }
  }
  result.step = *step;
  std::vector<BandMover> found, near;
  for (const auto& key : inStepOrder(store.seriesKeys(), moduleOrder)) {
    const auto points = pointsUpTo(store, key, *step, stored, settings.sigma);
    if (points.empty() || points.back().step != *step) continue;
    std::optional<BandMover> best;
    std::tuple<int, std::int64_t, double> bestRank;
    for (int statistic = 0; statistic < kBandStatistics; ++statistic) {
      std::vector<std::pair<std::int64_t, std::optional<double>>> values;
      std::vector<BandScore> scores;
      bool any = false;
      for (const auto& p : points) {
        values.emplace_back(p.step, p.values[std::size_t(statistic)]);
        any = any || values.back().second.has_value();
        scores.push_back(storedScore(p.step, values.back().second.value_or(std::nan("")), p.scores[std::size_t(statistic)]));
      }
      if (!any) continue;
      if (!stored) scores = bandScores(values, kBandStatisticNames[statistic], settings);
      const auto at = std::find_if(scores.begin(), scores.end(), [&](const BandScore& s) { return s.step == *step; });
      if (at == scores.end() || !at->scored) continue;
      BandMover mover{key, excursionStart(scores, *step, settings.sigma), kBandStatisticNames[statistic], at->value,
                      at->score};
      // Out of its band beats inside; then the earlier start; then the further out.
      const auto rank = mover.start ? std::make_tuple(0, *mover.start, -std::fabs(mover.score))
                                    : std::make_tuple(1, std::int64_t(0), -std::fabs(mover.score));
      if (!best || rank < bestRank) {
        best = mover;
        bestRank = rank;
      }
    }
    if (best) (best->start ? found : near).push_back(*best);
  }
  std::stable_sort(found.begin(), found.end(), [](const BandMover& a, const BandMover& b) { return *a.start < *b.start; });
  result.movers = found;
  if (found.empty()) {
    std::stable_sort(near.begin(), near.end(),
                     [](const BandMover& a, const BandMover& b) { return std::fabs(a.score) > std::fabs(b.score); });
    if (near.size() > 5) near.resize(5);
    result.furthest = near;
    if (result.why.empty()) {
      char text[160];
      std::snprintf(text, sizeof text, "no series was %.1f sigma or more from its band at step %lld", settings.sigma,
                    static_cast<long long>(*step));
      result.why = text;
    }
  }
  return result;
}

std::vector<std::string> describeMovers(const FirstMovers& result, int limit) {
  std::vector<std::string> lines;
  if (!result.why.empty()) lines.push_back(result.why);
  for (std::size_t i = 0; i < result.movers.size() && int(i) < limit; ++i) {
    const BandMover& m = result.movers[i];
    const bool tie = i > 0 && *m.start == *result.movers[i - 1].start;
    lines.push_back(std::string(i == 0 ? "first to move" : "then") + ": step " + std::to_string(*m.start) + ", " +
                    nameOf(m.key) + " (" + m.statistic + " " + format("%.4g", m.value) + ", " +
                    format("%.1f", std::fabs(m.score)) + " sigma " + (m.score > 0 ? "above" : "below") + " its band)" +
                    (tie ? " (the same step as the one before)" : ""));
  }
  for (const BandMover& m : result.furthest) {
    lines.push_back("furthest from its band: " + nameOf(m.key) + " (" + m.statistic + ", " +
                    format("%.1f", std::fabs(m.score)) + " sigma)");
  }
  return lines;
}

} // namespace hookscope
