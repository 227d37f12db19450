#pragma once
// The normal band of a series' statistic kept step by step as the store scores its points
// (issue 49; when they are read: CaptureStore::bandPoints): its last `window` measured values,
// in the order they came and sorted, so that a step's score (sigmas from the band's median, the
// MAD times 1.4826 its sigma) costs two binary searches, one move of the values between the old
// and the new one, and a selection of the MAD from the two sorted halves — no sort. The scores
// equal bandScores' (Bands.h), bit for bit.

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace hookscope {

/// The most steps a band may be made of: a step's score moves up to half the band's values, so
/// a series costs its steps times this at most (100,000 steps of one series: ~0.5 s at 10,000).
constexpr int kMaxBandWindow = 10000;

struct BandSettings {
  int window = 200;     ///< the last steps a band is made of (0: no bands kept)
  int warmup = 8;       ///< values a band needs before it scores a step
  double sigma = 6.0;   ///< how far out counts as having left the band
};

/// What a band is made of: the log10 of a magnitude (L2 norm, std, amax, a loss) or a fraction.
enum class BandMeasure { Magnitude, Fraction };

/// The statistics of a capture that get a band, in the order of SeriesPoint::bands.
constexpr int kBandStatistics = 4;
extern const char* const kBandStatisticNames[kBandStatistics];  ///< "l2norm", "std", "amax", "zero_frac"
BandMeasure bandMeasureOf(int statistic);
/// The fewest values a tensor's zero fraction needs for a band (hookscope.bands.ZERO_FRACTION_VALUES).
constexpr std::int64_t kZeroFractionValues = 100;

/// The number a band is made of, or nullopt for a value with none (not finite; a zero magnitude).
std::optional<double> bandMeasure(BandMeasure measure, double value);
/// The smallest spread a band assumes (its MAD's floor): about 6% in value for the
/// magnitudes, 0.01 for a fraction.
double bandFloor(BandMeasure measure);

/// One statistic's band, updated a step at a time.
class RunningBand {
 public:
  /// Scores `value` against the band of the values before it, then adds it to the band.
  /// NaN: not scored (no value, a warming band, a zero magnitude); +inf: NaN or Inf once warm.
  double push(std::optional<double> value, BandMeasure measure, const BandSettings& settings);
  /// Values in the band now (at most the window).
  std::size_t size() const { return m_sorted.size(); }
  std::size_t memoryBytes() const { return (m_ring.capacity() + m_sorted.capacity()) * sizeof(double); }

 private:
  double madOf(double median) const;
  std::vector<double> m_ring;    ///< the band's values as they came; m_next the oldest once full
  std::vector<double> m_sorted;  ///< the same values, ascending
  std::size_t m_next = 0;
  std::int64_t m_seen = 0;       ///< measured values ever pushed (the warmup counts these)
};

/// The bands of one series: one per statistic, and the step of the last point pushed (a second
/// point of that step is not).
struct SeriesBands {
  std::array<RunningBand, kBandStatistics> bands;
  std::int64_t lastStep = std::numeric_limits<std::int64_t>::min();
};

/// The statistic whose score lies furthest from its band (the first of equals); -1 when none is
/// scored (NaN).
int furthestOf(const std::array<double, kBandStatistics>& scores);

} // namespace hookscope
