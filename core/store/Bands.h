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

struct BandMover {
  SeriesKey key;
  std::optional<std::int64_t> start;  ///< the step its excursion began (nullopt: inside its band)
  std::string statistic;
  double value = 0, score = 0;
};

struct FirstMovers {
  std::int64_t step = -1;        ///< the step judged (-1: none)
  std::string why;               ///< how the step was chosen or why none is named ("" when a mover is)
  std::optional<BandScore> loss; ///< the loss's largest excursion, where the step was not given
  std::vector<BandMover> movers; ///< out of their band at the step: the earliest start first, then step order
  std::vector<BandMover> furthest;  ///< when none moved: the five furthest from their band
};

/// The series out of their band at `step` (by default the loss's largest excursion above its
/// band), `moduleOrder` the model's modules in order (for the order a step makes its captures).
/// Reads the scores the store keeps for each point (made when first read) where its band settings are
/// `settings`' (the window's live store, an export read by the CLI); scores the series again
/// otherwise.
FirstMovers firstMovers(const CaptureStore& store, const std::vector<std::string>& moduleOrder,
                        std::optional<std::int64_t> step, const BandSettings& settings);

/// The result as lines a person reads (at most `limit` movers).
std::vector<std::string> describeMovers(const FirstMovers& result, int limit = 5);

} // namespace hookscope
