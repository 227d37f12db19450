#pragma once
// Each series against its own history (issue 49): a normal band per series and statistic, a
// deviation score per step, and the first series to leave its band before a step. The same
// rules as the Python package's hookscope.bands, which tests/python/test_explain.py holds this
// to, line for line: the band of a statistic at step t is the median and the MAD (times 1.4826)
// of its last `window` values before t, of log10|v| for the L2 norm, std and amax and of v for
// the zero fraction; a step's score is how many of those sigmas it lies from the median, once
// `warmup` values came before it.

#include "store/CaptureStore.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hookscope {

/// One step of a statistic against its band.
struct BandScore {
  std::int64_t step = 0;
  bool scored = false;  ///< false before the band has `warmup` values, or for a value with no measure
  double score = 0;     ///< sigmas from the band's median (+inf for NaN or Inf after the warmup)
  double value = 0;
  std::size_t band = 0;  ///< values its band held (measured values before it, at most the window)
};

/// Scores of `points` ((step, value) in step order; nullopt where the value was not measured)
/// of `statistic` ("l2norm", "std", "amax", "zero_frac", "loss").
std::vector<BandScore> bandScores(const std::vector<std::pair<std::int64_t, std::optional<double>>>& points,
                                  const std::string& statistic, const BandSettings& settings);

/// The first step of the run of out-of-band steps holding `step`; nullopt when `step` is in its band.
std::optional<std::int64_t> excursionStart(const std::vector<BandScore>& scores, std::int64_t step, double sigma);

/// The loss's largest rise above its band (nullopt while none is scored): from the store's
/// scores of `loss` where `stored`, scored again with `settings` otherwise.
std::optional<BandScore> largestRise(const std::vector<ScalarPoint>& loss, bool stored, const BandSettings& settings);

/// Steps before the loss left its band (or before the step judged) where an excursion that
/// caused it may begin: a fault reaches the loss within a step or two.
constexpr std::int64_t kBandLookback = 8;
/// Without a loss spike, an excursion is a finding from kFindingBand steps into the run (its
/// band holding that many values less the warm-up: a series ticked at any step of the warm-up
/// is judged alike) where it went kFindingFactor times sigma out: a narrow young band, or a few
/// sigmas among hundreds of series, is what an untouched run shows too.
constexpr std::size_t kFindingBand = 30;
constexpr double kFindingFactor = 2;

/// The first excursion of `scores` (in step order) that begins at a step in [low, high] and
/// counts: one still out at `high` at `sigma`, one already back only where its furthest step
/// went `ended` sigmas out (default `sigma`); one that began before `low` and goes on is not one.
struct Excursion {
  std::int64_t start = 0;
  std::optional<std::int64_t> back;  ///< the first step at or before `high` inside its band again (nullopt: still out)
  double score = 0, value = 0;       ///< at its first step
};
std::optional<Excursion> firstExcursion(const std::vector<BandScore>& scores, std::int64_t low, std::int64_t high,
                                        double sigma, std::optional<double> ended = std::nullopt);

struct BandMover {
  SeriesKey key;
  std::optional<std::int64_t> start;  ///< the step its excursion began (nullopt: inside its band)
  std::optional<std::int64_t> back;   ///< the step it was inside its band again (nullopt: still out at the step)
  std::string statistic;
  double value = 0, score = 0;        ///< at `start` (at the step judged for one inside its band)
};

struct FirstMovers {
  std::int64_t step = -1;        ///< the step judged (-1: none)
  std::int64_t since = -1;       ///< the first step an excursion may begin at
  std::string why;               ///< how the step was chosen or why none is named ("" when a mover is)
  std::optional<BandScore> loss; ///< the loss's largest excursion, where the step was not given
  std::vector<BandMover> movers; ///< excursions begun from `since` to `step`: the earliest start first, then step order
  std::vector<BandMover> furthest;  ///< when none is named: the five furthest from their band, inside it, at the step
  /// When the loss never left its band (no step given): each series' first excursion
  /// kFindingFactor x sigma or more out of its band from step judgedFrom (the loss's first step
  /// plus kFindingBand) with a band of bandNeeded values or more (kFindingBand less the warm-up),
  /// begun at the first of the steps before it as far out of a younger band, as movers.
  std::vector<BandMover> unfollowed;
  std::int64_t judgedFrom = 0;
  std::size_t bandNeeded = 0;
  double sigma = 0;
  int window = 0;
};

/// Where the loss's spike started: the series whose excursion out of their band began from
/// kBandLookback steps before the loss left its band (by default its largest excursion above
/// its band; or before `step`) up to that step, whether or not they are still out there; when
/// the loss never left its band (no step given), the series that left theirs all the same;
/// `moduleOrder` the model's modules in order (for the order a step makes its captures).
/// Reads the scores the store keeps for each point (made when first read) where its band settings are
/// `settings`' (the window's live store, an export read by the CLI); scores the series again
/// otherwise. hookscope.bands.first_movers is the same, line for line.
FirstMovers firstMovers(const CaptureStore& store, const std::vector<std::string>& moduleOrder,
                        std::optional<std::int64_t> step, const BandSettings& settings);

/// The result as lines a person reads (at most `limit` movers).
std::vector<std::string> describeMovers(const FirstMovers& result, int limit = 5);

} // namespace hookscope
