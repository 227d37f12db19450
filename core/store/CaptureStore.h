#pragma once

#include "common/CaptureKind.h"
#include "kernels/TensorStats.h"
#include "store/BandTracker.h"
#include "store/SeriesKey.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace hookscope {

class ShardAssembly;

/// One stored capture of a series.
struct SeriesPoint {
  std::int64_t step = 0;
  TensorStats stats;
  /// Each statistic against its band (kBandStatisticNames' order): the sigmas from the band's
  /// median, NaN where not scored (BandTracker.h). Filled the first time the point is read
  /// through bandPoints, not as it is added: read them there.
  std::array<double, kBandStatistics> bands = unscoredBands();
  /// The values its widest band held when it was scored, at most 65535 (the anomaly rule waits
  /// for a full one).
  std::uint16_t bandValues = 0;
  bool banded = false;  ///< bands and bandValues are filled
  static std::array<double, kBandStatistics> unscoredBands() {
    std::array<double, kBandStatistics> none;
    none.fill(std::numeric_limits<double>::quiet_NaN());
    return none;
  }
};

/// A stored capture's banded statistics and their scores, without its histogram: what the
/// first movers and the deviation view read.
struct BandPoint {
  std::int64_t step = 0;
  std::array<std::optional<double>, kBandStatistics> values;  ///< nullopt: not measured
  std::array<double, kBandStatistics> scores{};               ///< SeriesPoint::bands
  std::uint32_t bandValues = 0;                                ///< SeriesPoint::bandValues
  /// The score furthest from its band (NaN when none is scored).
  double furthest() const;
};

/// One value of a named per-step scalar (loss, lr, step_ms, ...).
struct ScalarPoint {
  std::int64_t step = 0;
  double value = 0;
  double band = std::numeric_limits<double>::quiet_NaN();  ///< against its band, as SeriesPoint::bands
};

/// A record that the store dropped steps to stay under its memory cap.
struct ThinningEvent {
  std::int64_t atStep = 0;         ///< the newest step stored when thinning ran
  std::int64_t stepsBefore = 0;    ///< steps holding captures before
  std::int64_t stepsAfter = 0;     ///< and after
  std::size_t bytesBefore = 0;
  std::size_t bytesAfter = 0;
  std::int64_t stride = 1;         ///< steps kept from then on: first + k * stride, and the newest
  /// Calls of a module kept within a step from then on: 0, k, 2k, ... (1: every call). Only
  /// once two steps alone exceed the cap (a module called thousands of times per step).
  std::int64_t callStride = 1;
};

/// Thread-safe store of capture statistics, bounded by a memory cap. When the cap is
/// exceeded, the stride between kept steps doubles: steps first + k * stride stay, plus
/// the newest, so what remains is spread evenly over the whole run. Every doubling is
/// recorded.
class CaptureStore {
public:
  static constexpr std::size_t kDefaultCapBytes = std::size_t(512) << 20;
  static constexpr std::int64_t kAllSteps = std::numeric_limits<std::int64_t>::max();

  explicit CaptureStore(std::size_t capBytes = kDefaultCapBytes);
  ~CaptureStore();

  /// Adds one capture.
  void add(std::int64_t step, const SeriesKey& key, TensorStats stats);
  /// Adds one rank's row of a sharded tensor, and the whole tensor's (rank kWholeRank) once
  /// every part of it at that step has come (ShardAssembly).
  void addShard(std::int64_t step, const SeriesKey& key, TensorStats stats, const ShardPart& part);
  /// Why the last sharded tensor whose parts did not fit was not made whole ("" when none).
  std::string shardProblem() const;
  /// Removes one capture; false when the store does not hold it.
  bool remove(std::int64_t step, const SeriesKey& key);
  /// Adds a scalar value of a rank for a step (never thinned).
  void addScalar(std::int64_t step, const std::string& name, double value, int rank = 0);

  /// Keys of all series, sorted.
  std::vector<SeriesKey> seriesKeys() const;
  /// Copies of a series' points with from <= step <= to.
  std::vector<SeriesPoint> series(const SeriesKey& key, std::int64_t from = 0,
                                  std::int64_t to = kAllSteps) const;
  /// One statistic of a series over steps >= from (e.g. &TensorStats::l2norm), without
  /// copying histograms: what line plots need.
  std::vector<ScalarPoint> values(const SeriesKey& key, double TensorStats::*field, std::int64_t from = 0) const;
  /// One statistic of many series (`keys`, best in key order) over from <= step < to, read at once:
  /// series i's values are values[ends[i - 1], ends[i]) (none where the store has not the
  /// series). Both vectors are emptied first. A step's rules read every gradient's window so.
  void valuesBetween(const std::vector<const SeriesKey*>& keys, double TensorStats::*field, std::int64_t from,
                     std::int64_t to, std::vector<double>* values, std::vector<std::size_t>* ends) const;
  /// A series' banded statistics and scores over from <= step <= to.
  std::vector<BandPoint> bandPoints(const SeriesKey& key, std::int64_t from = 0, std::int64_t to = kAllSteps) const;
  /// The newest point of a series at or before `step`; false when there is none.
  bool pointAt(const SeriesKey& key, std::int64_t step, SeriesPoint* out) const;
  /// Every series' point at exactly `step`, in key order (as seriesKeys()): a step's rules read
  /// the store once, where a point each at a time cost a search and a copy for every rule.
  /// Into `out` (emptied first, its capacity kept). withCounts: the series whose histogram
  /// counts are copied too (none given: every series').
  void pointsAt(std::int64_t step, std::vector<std::pair<SeriesKey, SeriesPoint>>* out,
                const std::function<bool(const SeriesKey&)>& withCounts = {}) const;
  /// Calls fn with every series' points, read in place under the store's lock (adds wait):
  /// an export of a store at its cap without a second copy of it.
  void readAll(const std::function<void(const std::map<SeriesKey, std::deque<SeriesPoint>>&)>& fn) const;
  /// Names of the scalar series of every rank, sorted.
  std::vector<std::string> scalarNames() const;
  /// Copies of one scalar series of a rank.
  std::vector<ScalarPoint> scalars(const std::string& name, int rank = 0) const;
  /// The ranks that hold a capture or a scalar, ascending ({0} for one process, empty when empty).
  std::vector<int> ranks() const;
  /// The newest step that holds a capture or a scalar; -1 when empty. O(1).
  std::int64_t latestStep() const;
  /// Steps that hold at least one capture, ascending.
  std::vector<std::int64_t> steps() const;
  /// The newest step at or before `step` that holds a capture; -1 when none. What a view shows
  /// for a step the store left out under its cap (live, a step off the grid goes as soon as the
  /// next one's first capture comes). O(log steps).
  std::int64_t stepAtOrBefore(std::int64_t step) const;
  /// Number of stored captures.
  std::size_t captureCount() const;

  /// Bytes of the captures and scalars, plus the alerts' (setAlertBytes).
  std::size_t bytesUsed() const;
  /// Memory that a rank's alerts take, which counts against the cap too.
  void setAlertBytes(std::size_t bytes, int rank = 0);
  std::size_t capBytes() const;
  /// Sets the cap, thinning at once if the store is over it.
  void setCapBytes(std::size_t capBytes);
  /// All thinning that happened, oldest first.
  std::vector<ThinningEvent> thinning() const;
  /// A thinning done before the points came (an export read every event.stride-th step, since
  /// whole it would not fit under the cap): recorded, and its stride taken as the store's own,
  /// so that the first step added and every stride-th after it are the grid a later thinning halves.
  void recordThinning(const ThinningEvent& event);
  /// Grows on every change: readers compare it to skip unchanged redraws.
  std::uint64_t version() const { return m_version.load(std::memory_order_acquire); }
  /// Current distance between kept steps (1 until the first thinning).
  std::int64_t stride() const;
  /// The bands the store scores its points against (window 0: none). Scores are made when read
  /// (bandPoints), from the points held before each one: adding costs nothing for them, and a
  /// change of settings or a thinning makes them again from what is held then.
  void setBandSettings(const BandSettings& settings);
  BandSettings bandSettings() const;

  /// Drops everything, including the thinning record.
  void clear();

  /// Bytes one stored point costs, for the cap and for benchmarks.
  static std::size_t pointBytes(const TensorStats& stats);

private:
  void thinLocked(std::int64_t newestStep);
  void bandLocked(const std::deque<SeriesPoint>& points, CaptureKind kind, std::size_t first, std::size_t end) const;
  void forgetBandsLocked();
  void dropCallsLocked();
  bool overCapLocked() const { return m_bytes + m_alertBytes > m_cap; }
  void dropStepsLocked(const std::set<std::int64_t>& dropped);
  bool onGridLocked(std::int64_t step) const;

  mutable std::mutex m_mutex;
  // A deque: points are appended without moving the ones before (no doubling slack the cap
  // does not see), and a thinning gives memory back.
  std::map<SeriesKey, std::deque<SeriesPoint>> m_series;
  std::map<std::pair<int, std::string>, std::vector<ScalarPoint>> m_scalars;  ///< (rank, name)
  std::set<int> m_ranks;
  std::map<std::int64_t, std::size_t> m_stepCaptures;  ///< step -> captures stored for it
  std::vector<ThinningEvent> m_thinning;
  std::size_t m_bytes = 0;
  std::size_t m_cap;
  std::size_t m_captures = 0;
  std::int64_t m_stride = 1;
  std::int64_t m_callStride = 1;
  std::size_t m_alertBytes = 0;  ///< the sum of m_rankAlertBytes
  std::map<int, std::size_t> m_rankAlertBytes;
  std::int64_t m_latestScalarStep = -1;
  std::atomic<std::uint64_t> m_version{0};
  std::unique_ptr<ShardAssembly> m_shards;
  // Bands by the address of their series' points (a map node's value never moves): a hash of a
  // pointer, not a second search by key. A series' band stands where its scoring last stopped;
  // scores are a cache filled under the lock by the readers that want them (bandPoints).
  BandSettings m_bandSettings;
  mutable std::unordered_map<const void*, SeriesBands> m_bands;
  std::unordered_map<const void*, RunningBand> m_scalarBands;
};

} // namespace hookscope
