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
/// with the store's scores, from its last point before `since` on: a long run's whole history is
/// not copied to explain one step.
std::vector<BandPoint> pointsUpTo(const CaptureStore& store, const SeriesKey& key, std::int64_t since, std::int64_t step,
                                  bool stored) {
  if (!stored) return store.bandPoints(key, 0, step);
  for (std::int64_t span = 256;; span *= 4) {
    const std::int64_t from = since - span;
    auto points = store.bandPoints(key, from, step);
    if (from <= 0 || (!points.empty() && points.front().step < since) || !store.pointAt(key, from - 1, nullptr)) {
      return points;
    }
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
    score.band = band.size();
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

std::optional<Excursion> firstExcursion(const std::vector<BandScore>& scores, std::int64_t low, std::int64_t high,
                                        double sigma, std::optional<double> ended) {
  const double needed = ended.value_or(sigma);
  std::optional<Excursion> found;
  double peak = 0;
  bool wasOut = false;
  for (const BandScore& s : scores) {
    if (s.step > high) break;
    const bool out = s.scored && std::fabs(s.score) >= sigma;
    if (!found && out && !wasOut && s.step >= low) {
      found = Excursion{s.step, std::nullopt, s.score, s.value};
      peak = 0;
    }
    if (found) {
      if (out) {
        peak = std::max(peak, std::fabs(s.score));
      } else {  // an unscored step ends it too, as excursionStart stops at one
        if (peak >= needed) {
          found->back = s.step;
          return found;
        }
        found.reset();
      }
    }
    wasOut = out;
  }
  return found;
}

namespace {

using Points = std::vector<std::pair<std::int64_t, std::optional<double>>>;

/// A series' values of one statistic, and whether any was measured.
Points valuesOf(const std::vector<BandPoint>& points, int statistic, bool* any) {
  Points values;
  *any = false;
  for (const auto& p : points) {
    values.emplace_back(p.step, p.values[std::size_t(statistic)]);
    *any = *any || values.back().second.has_value();
  }
  return values;
}

/// Keeps `candidate` in `best` when its excursion began earlier, or as early and further out
/// (the first such in statistic order on a tie).
void keepEarliest(std::optional<BandMover>* best, BandMover candidate) {
  if (!*best || std::make_pair(*candidate.start, -std::fabs(candidate.score)) <
                    std::make_pair(*(*best)->start, -std::fabs((*best)->score))) {
    *best = std::move(candidate);
  }
}

void sortByStart(std::vector<BandMover>* movers) {
  std::stable_sort(movers->begin(), movers->end(), [](const BandMover& a, const BandMover& b) { return *a.start < *b.start; });
}

/// The series that left their band with no loss spike to explain: FirstMovers::unfollowed, with
/// the terms they were judged by (judgedFrom, bandNeeded), into `result`.
void unfollowed(const CaptureStore& store, const std::vector<SeriesKey>& ordered, const BandSettings& settings,
                FirstMovers* result) {
  const std::size_t full = std::min(kFindingBand, std::size_t(std::max(settings.window, 0)));
  const std::int64_t judgedFrom = result->judgedFrom = store.scalars("loss", 0).front().step + std::int64_t(full);
  const std::size_t needed = result->bandNeeded = full - std::min(full, std::size_t(std::max(settings.warmup, 0)));
  std::vector<BandMover>& found = result->unfollowed;
  const double strong = kFindingFactor * settings.sigma;
  const std::int64_t last = std::numeric_limits<std::int64_t>::max();
  for (const auto& key : ordered) {
    const auto points = store.bandPoints(key, 0, last);
    std::optional<BandMover> best;
    for (int statistic = 0; statistic < kBandStatistics; ++statistic) {
      bool any = false;
      const Points values = valuesOf(points, statistic, &any);
      if (!any) continue;
      const auto young = bandScores(values, kBandStatisticNames[statistic], settings);
      auto scores = young;
      for (auto& s : scores) s.scored = s.scored && s.band >= needed && s.step >= judgedFrom;
      auto excursion = firstExcursion(scores, std::numeric_limits<std::int64_t>::min(), last, strong);
      if (excursion) {
        // Begun where it began: back over the steps just before, as far out of their younger
        // band (a series ticked a few steps later has a younger band at the same step).
        auto i = std::size_t(std::find_if(young.begin(), young.end(),
                                          [&](const BandScore& s) { return s.step == excursion->start; }) -
                             young.begin());
        while (i > 0 && young[i - 1].scored && std::fabs(young[i - 1].score) >= strong) --i;
        excursion->start = young[i].step;
        excursion->score = young[i].score;
        excursion->value = young[i].value;
        keepEarliest(&best, BandMover{key, excursion->start, excursion->back, kBandStatisticNames[statistic],
                                      excursion->value, excursion->score});
      }
    }
    if (best) found.push_back(*best);
  }
  sortByStart(&found);
}

/// "step 45, activation 'conv1' (amax 2621, 118.0 sigma above its band), back in it at step 46".
std::string excursionText(const BandMover& m) {
  return "step " + std::to_string(*m.start) + ", " + nameOf(m.key) + " (" + m.statistic + " " + format("%.4g", m.value) +
         ", " + format("%.1f", std::fabs(m.score)) + " sigma " + (m.score > 0 ? "above" : "below") + " its band)" +
         (m.back ? ", back in it at step " + std::to_string(*m.back) : std::string());
}

/// "the loss never left its band (its largest rise: step S, +1.9 sigma against a band of its last
/// N steps; 6.0 needed)", or "no rise: at most -0.7 sigma, at step S," where it only fell.
std::string lossStayedText(const std::vector<BandScore>& lossScores, const BandScore& spike, double sigma) {
  const auto at = std::find_if(lossScores.begin(), lossScores.end(), [&](const BandScore& s) { return s.step == spike.step; });
  char rise[96], text[240];
  if (spike.score > 0) {
    std::snprintf(rise, sizeof rise, "its largest rise: step %lld, %+.1f sigma", static_cast<long long>(spike.step),
                  spike.score);
  } else {
    std::snprintf(rise, sizeof rise, "no rise: at most %+.1f sigma, at step %lld,", spike.score,
                  static_cast<long long>(spike.step));
  }
  std::snprintf(text, sizeof text, "the loss never left its band (%s against a band of its last %zu steps; %.1f needed)",
                rise, at == lossScores.end() ? std::size_t(0) : at->band, sigma);
  return text;
}

} // namespace

FirstMovers firstMovers(const CaptureStore& store, const std::vector<std::string>& moduleOrder,
                        std::optional<std::int64_t> step, const BandSettings& settings) {
  FirstMovers result;
  result.sigma = settings.sigma;
  result.window = settings.window;
  const BandSettings kept = store.bandSettings();
  const bool stored = kept.window == settings.window && kept.warmup == settings.warmup;
  std::int64_t since = step ? *step - kBandLookback : 0;
  bool spiked = true;
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
    Points values;
    for (const auto& p : loss) values.emplace_back(p.step, p.value);
    const auto lossScores = bandScores(values, "loss", settings);
    since = excursionStart(lossScores, *step, settings.sigma).value_or(*step) - kBandLookback;
    spiked = spike->score >= settings.sigma;
    if (!spiked) result.why = lossStayedText(lossScores, *spike, settings.sigma);
  }
  result.step = *step;
  result.since = since;
  const auto ordered = inStepOrder(store.seriesKeys(), moduleOrder);
  if (!spiked) unfollowed(store, ordered, settings, &result);
  std::vector<BandMover> found, near;
  for (const auto& key : ordered) {
    const auto points = pointsUpTo(store, key, since, *step, stored);
    if (points.empty() || points.front().step > *step) continue;
    std::optional<BandMover> best, nearest;
    for (int statistic = 0; statistic < kBandStatistics; ++statistic) {
      bool any = false;
      const Points values = valuesOf(points, statistic, &any);
      if (!any) continue;
      std::vector<BandScore> scores;
      if (stored) {
        for (const auto& p : points) {
          scores.push_back(storedScore(p.step, p.values[std::size_t(statistic)].value_or(std::nan("")),
                                       p.scores[std::size_t(statistic)]));
        }
      } else {
        scores = bandScores(values, kBandStatisticNames[statistic], settings);
      }
      // One back in its band by the step must have gone twice as far out: a young band's few
      // sigmas come and go in an untouched run.
      const auto excursion =
          spiked ? firstExcursion(scores, since, *step, settings.sigma, kFindingFactor * settings.sigma) : std::nullopt;
      if (excursion) {
        keepEarliest(&best, BandMover{key, excursion->start, excursion->back, kBandStatisticNames[statistic],
                                      excursion->value, excursion->score});
      }
      const BandScore& last = scores.back();
      if (last.step == *step && last.scored && (!nearest || std::fabs(last.score) > std::fabs(nearest->score))) {
        nearest = BandMover{key, std::nullopt, std::nullopt, kBandStatisticNames[statistic], last.value, last.score};
      }
    }
    if (best) found.push_back(*best);
    else if (nearest && std::fabs(nearest->score) < settings.sigma) near.push_back(*nearest);  // out since before `since`: neither
  }
  sortByStart(&found);
  result.movers = found;
  if (found.empty() && result.unfollowed.empty()) {
    std::stable_sort(near.begin(), near.end(),
                     [](const BandMover& a, const BandMover& b) { return std::fabs(a.score) > std::fabs(b.score); });
    if (near.size() > 5) near.resize(5);
    result.furthest = near;
    if (result.why.empty()) {
      char text[160];
      std::snprintf(text, sizeof text, "no series left its band (%.1f sigma or more) from step %lld to step %lld",
                    settings.sigma, static_cast<long long>(since), static_cast<long long>(*step));
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
    lines.push_back(std::string(i == 0 ? "first to move: " : "then: ") + excursionText(m) +
                    (tie ? " (the same step as the one before)" : ""));
  }
  const auto& later = result.unfollowed;
  if (!later.empty()) {
    char text[240];
    std::snprintf(text, sizeof text,
                  "but %zu series left %s band all the same (%.1f sigma or more, from step %lld on, against a band of "
                  "%zu values or more), and the loss did not follow:",
                  later.size(), later.size() == 1 ? "its" : "their", kFindingFactor * result.sigma,
                  static_cast<long long>(result.judgedFrom), result.bandNeeded);
    lines.push_back(text);
  }
  for (std::size_t i = 0; i < later.size() && int(i) < limit; ++i) lines.push_back("  " + excursionText(later[i]));
  for (const BandMover& m : result.furthest) {
    lines.push_back("furthest inside its band at step " + std::to_string(result.step) + ": " + nameOf(m.key) + " (" +
                    m.statistic + ", " + format("%.1f", std::fabs(m.score)) + " sigma)");
  }
  return lines;
}

} // namespace hookscope
