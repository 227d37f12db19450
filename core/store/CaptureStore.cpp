#include "store/CaptureStore.h"

#include "store/ShardAssembly.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace hookscope {

namespace {
constexpr std::size_t kSeriesOverhead = sizeof(SeriesKey) + 64;
constexpr std::size_t kScalarBytes = sizeof(ScalarPoint);

// The statistics of a capture that get a band, in kBandStatisticNames' order (nullopt: not
// measured: amax before the low-precision counts). As hookscope.bands.band_value: the L2 norm of
// a tensor holding NaN is NaN (Inf where it holds Inf and no NaN), as torch's norm of it is: NaN
// appearing in a layer is that layer leaving its band (+inf sigmas), whatever its finite values
// did. The zero fraction of a tensor of under kZeroFractionValues values has no band: one more
// zero moves it by more than the band's floor (0.01), and a bias's gradient of 8 values read
// 12.5 sigmas out as one of them rounded to 0. Nor has a parameter's (its values, gradient or
// update): a weight's gradient is zero by whole rows where a unit before it was silent for the
// batch, a step's luck; that unit's own output, an activation, is where a dead unit shows. A
// tensor none of whose values reaches float32's smallest normal number is all zero on the band,
// as its magnitudes are that number (BandTracker's bandMeasure): where a deep model's gradient
// underflows, the layer at the edge is all 0 but a step where a few values round to 1.4e-45,
// which read as its zero fraction 21.9 sigmas below its band.
std::array<std::optional<double>, kBandStatistics> bandedValues(const TensorStats& s, CaptureKind kind) {
  const double norm = s.nanCount > 0   ? std::numeric_limits<double>::quiet_NaN()
                      : s.infCount > 0 ? std::numeric_limits<double>::infinity()
                                       : s.l2norm;
  const double normal = double(std::numeric_limits<float>::min());
  const bool underflowed = std::fabs(s.min) < normal && std::fabs(s.max) < normal;  // false where either is NaN
  return {norm, s.std, s.hasPrecision() ? std::optional<double>(s.amax) : std::nullopt,
          s.numel >= kZeroFractionValues && !isParameterKind(kind)
              ? std::optional<double>(underflowed ? 1.0 : s.zeroFraction)
              : std::nullopt};
}

// Pushes a point's banded statistics into `bands`, writing the scores into `scored` when given
// (priming a band reads the points before the ones scored). A second point of a step is not
// pushed: its band moved on without it.
void pushPoint(SeriesBands& bands, const SeriesPoint& point, CaptureKind kind, SeriesPoint* scored,
               const BandSettings& settings) {
  if (point.step <= bands.lastStep) return;
  bands.lastStep = point.step;
  const auto values = bandedValues(point.stats, kind);
  for (std::size_t k = 0; k < values.size(); ++k) {
    RunningBand& band = bands.bands[k];
    const std::size_t held = band.size();
    const double score = band.push(values[k], bandMeasureOf(int(k)), settings);
    if (!scored) continue;
    scored->bandValues = std::uint16_t(std::max<std::size_t>(scored->bandValues, std::min<std::size_t>(held, 65535)));
    scored->bands[k] = score;
  }
}

// The first point of a series (kept in step order) at or after `step`.
template <typename Points>
auto firstAtOrAfter(Points& points, std::int64_t step) {
  return std::lower_bound(points.begin(), points.end(), step,
                          [](const SeriesPoint& p, std::int64_t s) { return p.step < s; });
}
/// The newest of `points` (non-empty, in step order) at or before `step`; null where none is.
const SeriesPoint* lastAtOrBefore(const std::deque<SeriesPoint>& points, std::int64_t step) {
  const auto pos = std::upper_bound(points.begin(), points.end(), step,
                                    [](std::int64_t s, const SeriesPoint& p) { return s < p.step; });
  return pos == points.begin() ? nullptr : &*(pos - 1);
}
} // namespace

CaptureStore::CaptureStore(std::size_t capBytes) : m_cap(capBytes), m_shards(std::make_unique<ShardAssembly>()) {}

CaptureStore::~CaptureStore() = default;

void CaptureStore::addShard(std::int64_t step, const SeriesKey& key, TensorStats stats, const ShardPart& part) {
  TensorStats whole;
  const bool made = m_shards->add(step, key, stats, part, &whole);
  add(step, key, std::move(stats));
  if (!made) return;
  SeriesKey wholeKey = key;
  wholeKey.rank = kWholeRank;
  add(step, wholeKey, std::move(whole));
}

void CaptureStore::readAll(const std::function<void(const std::map<SeriesKey, std::deque<SeriesPoint>>&)>& fn) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  fn(m_series);
}

std::string CaptureStore::shardProblem() const { return m_shards->lastProblem(); }

std::size_t CaptureStore::pointBytes(const TensorStats& stats) {
  return sizeof(SeriesPoint) - sizeof(TensorStats) + stats.memoryBytes();
}

void CaptureStore::add(std::int64_t step, const SeriesKey& key, TensorStats stats) {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (key.call % m_callStride != 0) return;  // thinned calls (recorded in m_thinning)
  if (key.rank != kWholeRank) m_ranks.insert(key.rank);
  // A new step: the previous newest was kept only for being newest; off the grid it goes.
  if (m_stride > 1 && m_stepCaptures.size() > 1 && !m_stepCaptures.count(step)) {
    const std::int64_t newest = m_stepCaptures.rbegin()->first;
    if (newest < step && !onGridLocked(newest)) dropStepsLocked({newest});
  }
  auto [it, inserted] = m_series.try_emplace(key);
  if (inserted) m_bytes += kSeriesOverhead + key.module.capacity();
  auto& points = it->second;
  m_bytes += pointBytes(stats);
  SeriesPoint point{step, std::move(stats)};
  if (points.empty() || points.back().step <= step) {
    points.push_back(std::move(point));
  } else {
    auto pos = std::upper_bound(points.begin(), points.end(), step,
                                [](std::int64_t s, const SeriesPoint& p) { return s < p.step; });
    points.insert(pos, std::move(point));
  }
  ++m_stepCaptures[step];
  ++m_captures;
  if (overCapLocked()) thinLocked(m_stepCaptures.rbegin()->first);
  m_version.fetch_add(1, std::memory_order_release);
}

// Scores the points in [first, end) that have none. The series' kept band carries on where
// its scoring stopped when that is the point before `first` (a reader following the run: one
// push a point); otherwise a band is primed from the values before `first` (the last window of
// each statistic, warmup included), which gives the same scores: a band is only its last values.
void CaptureStore::bandLocked(const std::deque<SeriesPoint>& points, CaptureKind kind, std::size_t first,
                              std::size_t end) const {
  if (m_bandSettings.window <= 0) return;
  while (first < end && points[first].banded) ++first;
  if (first >= end) return;
  SeriesBands& kept = m_bands[&points];
  const std::int64_t before = first > 0 ? points[first - 1].step : std::numeric_limits<std::int64_t>::min();
  SeriesBands primed;
  SeriesBands* bands = &kept;
  if (kept.lastStep != before) {
    const std::size_t need = std::size_t(std::max(m_bandSettings.window, m_bandSettings.warmup));
    std::array<std::size_t, kBandStatistics> counts{};
    std::size_t from = first;
    const auto enough = [&] { return std::all_of(counts.begin(), counts.end(), [&](std::size_t c) { return c >= need; }); };
    while (from > 0 && !enough()) {
      --from;
      const auto values = bandedValues(points[from].stats, kind);
      for (std::size_t i = 0; i < values.size(); ++i) counts[i] += values[i] && bandMeasure(bandMeasureOf(int(i)), *values[i]);
    }
    for (std::size_t i = from; i < first; ++i) pushPoint(primed, points[i], kind, nullptr, m_bandSettings);
    primed.lastStep = before;
    bands = &primed;
  }
  auto& scored = const_cast<std::deque<SeriesPoint>&>(points);  // the scores are a cache
  for (std::size_t i = first; i < end; ++i) {
    scored[i].banded = true;
    pushPoint(*bands, scored[i], kind, &scored[i], m_bandSettings);
  }
  if (bands == &primed && primed.lastStep > kept.lastStep) kept = std::move(primed);
}

// Scores made from other points or settings than those held now are made again when read.
void CaptureStore::forgetBandsLocked() {
  m_bands.clear();
  for (auto& [key, points] : m_series) {
    for (auto& point : points) {
      point.banded = false;
      point.bands = SeriesPoint::unscoredBands();
      point.bandValues = 0;
    }
  }
}

void CaptureStore::setBandSettings(const BandSettings& settings) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_bandSettings = settings;
  forgetBandsLocked();
}

BandSettings CaptureStore::bandSettings() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_bandSettings;
}

bool CaptureStore::remove(std::int64_t step, const SeriesKey& key) {
  std::lock_guard<std::mutex> lock(m_mutex);
  const auto series = m_series.find(key);
  if (series == m_series.end()) return false;
  auto& points = series->second;
  const auto point = firstAtOrAfter(points, step);
  if (point == points.end() || point->step != step) return false;
  m_bytes -= pointBytes(point->stats);
  for (auto later = point; later != points.end(); ++later) later->banded = false;  // their bands held it
  points.erase(point);
  m_bands.erase(&points);
  const auto count = m_stepCaptures.find(step);
  if (--count->second == 0) m_stepCaptures.erase(count);
  --m_captures;
  m_version.fetch_add(1, std::memory_order_release);
  return true;
}

void CaptureStore::addScalar(std::int64_t step, const std::string& name, double value, int rank) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_ranks.insert(rank);
  auto& points = m_scalars[{rank, name}];
  ScalarPoint point{step, value};
  if (m_bandSettings.window > 0 && (points.empty() || points.back().step < step)) {
    point.band = m_scalarBands[&points].push(value, BandMeasure::Magnitude, m_bandSettings);
  }
  points.push_back(point);
  m_latestScalarStep = std::max(m_latestScalarStep, step);
  m_bytes += kScalarBytes;
  // Scalars count against the cap too (they are never thinned: the captures make room).
  if (overCapLocked() && !m_stepCaptures.empty()) thinLocked(m_stepCaptures.rbegin()->first);
  m_version.fetch_add(1, std::memory_order_release);
}

bool CaptureStore::onGridLocked(std::int64_t step) const {
  return m_stepCaptures.empty() || (step - m_stepCaptures.begin()->first) % m_stride == 0;
}

void CaptureStore::dropStepsLocked(const std::set<std::int64_t>& dropped) {
  for (std::int64_t step : dropped) {
    const auto it = m_stepCaptures.find(step);
    if (it == m_stepCaptures.end()) continue;
    m_captures -= it->second;
    m_stepCaptures.erase(it);
  }
  for (auto& [key, points] : m_series) {
    auto keep = std::remove_if(points.begin(), points.end(), [&](const SeriesPoint& p) {
      if (!dropped.count(p.step)) return false;
      m_bytes -= pointBytes(p.stats);
      return true;
    });
    points.erase(keep, points.end());
  }
}

void CaptureStore::thinLocked(std::int64_t newestStep) {
  const std::int64_t strideBefore = m_stride;
  while (overCapLocked() && m_stepCaptures.size() > 2) {
    ThinningEvent event;
    event.atStep = newestStep;
    event.stepsBefore = std::int64_t(m_stepCaptures.size());
    event.bytesBefore = m_bytes;
    m_stride *= 2;
    std::set<std::int64_t> dropped;
    for (const auto& [step, count] : m_stepCaptures) {
      if (step != newestStep && !onGridLocked(step)) dropped.insert(step);
    }
    dropStepsLocked(dropped);
    event.stepsAfter = std::int64_t(m_stepCaptures.size());
    event.bytesAfter = m_bytes;
    event.stride = m_stride;
    event.callStride = m_callStride;
    m_thinning.push_back(event);
  }
  // A band is made of the steps held, every other one now (a thinning of calls drops whole
  // series, and the bands of the series kept stand).
  if (m_stride != strideBefore) forgetBandsLocked();
  // Two steps alone are over the cap: a module is called many times per step. Keep every
  // other call of each module (0, 2, 4, ...), again until under the cap or one call is left.
  auto hasLaterCalls = [this] {
    return std::any_of(m_series.begin(), m_series.end(), [](const auto& s) { return s.first.call > 0; });
  };
  while (overCapLocked() && hasLaterCalls()) {
    ThinningEvent event;
    event.atStep = newestStep;
    event.stepsBefore = std::int64_t(m_stepCaptures.size());
    event.bytesBefore = m_bytes;
    m_callStride *= 2;
    dropCallsLocked();
    event.stepsAfter = std::int64_t(m_stepCaptures.size());
    event.bytesAfter = m_bytes;
    event.stride = m_stride;
    event.callStride = m_callStride;
    m_thinning.push_back(event);
  }
}

void CaptureStore::dropCallsLocked() {
  for (auto it = m_series.begin(); it != m_series.end();) {
    if (it->first.call % m_callStride == 0) {
      ++it;
      continue;
    }
    for (const auto& p : it->second) {
      m_bytes -= pointBytes(p.stats);
      const auto count = m_stepCaptures.find(p.step);
      if (count != m_stepCaptures.end() && --count->second == 0) m_stepCaptures.erase(count);
      --m_captures;
    }
    m_bytes -= kSeriesOverhead + it->first.module.capacity();
    m_bands.erase(&it->second);
    it = m_series.erase(it);
  }
}

std::vector<SeriesKey> CaptureStore::seriesKeys() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::vector<SeriesKey> keys;
  keys.reserve(m_series.size());
  for (const auto& entry : m_series) keys.push_back(entry.first);
  return keys;
}

std::vector<SeriesPoint> CaptureStore::series(const SeriesKey& key, std::int64_t from,
                                              std::int64_t to) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::vector<SeriesPoint> result;
  const auto it = m_series.find(key);
  if (it == m_series.end()) return result;
  for (auto pos = firstAtOrAfter(it->second, from); pos != it->second.end() && pos->step <= to; ++pos) {
    result.push_back(*pos);
  }
  return result;
}

std::vector<ScalarPoint> CaptureStore::values(const SeriesKey& key, double TensorStats::*field,
                                              std::int64_t from) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::vector<ScalarPoint> result;
  const auto it = m_series.find(key);
  if (it == m_series.end()) return result;
  const auto& points = it->second;
  auto pos = firstAtOrAfter(points, from);
  result.reserve(std::size_t(points.end() - pos));
  for (; pos != points.end(); ++pos) result.push_back({pos->step, pos->stats.*field});
  return result;
}

void CaptureStore::valuesBetween(const std::vector<const SeriesKey*>& keys, double TensorStats::*field,
                                 std::int64_t from, std::int64_t to, std::vector<double>* values,
                                 std::vector<std::size_t>* ends) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  values->clear();
  ends->clear();
  auto series = m_series.begin();  // keys in the map's order: one walk through it
  for (const SeriesKey* key : keys) {
    if (series == m_series.end() || *key < series->first) {
      series = m_series.lower_bound(*key);  // a key out of that order (or past the last): searched
    }
    while (series != m_series.end() && series->first < *key) ++series;
    if (series != m_series.end() && series->first == *key) {
      const auto& points = series->second;
      for (auto pos = firstAtOrAfter(points, from); pos != points.end() && pos->step < to; ++pos) {
        values->push_back(pos->stats.*field);
      }
    }
    ends->push_back(values->size());
  }
}

double BandPoint::furthest() const {
  const int worst = furthestOf(scores);
  return worst < 0 ? std::numeric_limits<double>::quiet_NaN() : scores[std::size_t(worst)];
}

std::vector<BandPoint> CaptureStore::bandPoints(const SeriesKey& key, std::int64_t from, std::int64_t to) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::vector<BandPoint> result;
  const auto it = m_series.find(key);
  if (it == m_series.end()) return result;
  auto pos = firstAtOrAfter(it->second, from);
  const auto end = std::upper_bound(pos, it->second.end(), to, [](std::int64_t s, const SeriesPoint& p) { return s < p.step; });
  result.reserve(std::size_t(end - pos));
  bandLocked(it->second, key.kind, std::size_t(pos - it->second.begin()), std::size_t(end - it->second.begin()));
  for (; pos != end; ++pos) {
    BandPoint point;
    point.step = pos->step;
    point.values = bandedValues(pos->stats, key.kind);
    point.scores = pos->bands;
    point.bandValues = pos->bandValues;
    result.push_back(point);
  }
  return result;
}

bool CaptureStore::pointAt(const SeriesKey& key, std::int64_t step, SeriesPoint* out) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  const auto it = m_series.find(key);
  if (it == m_series.end() || it->second.empty()) return false;
  const SeriesPoint* point = lastAtOrBefore(it->second, step);
  if (!point) return false;
  if (out) *out = *point;
  return true;
}

void CaptureStore::pointsAt(std::int64_t step, std::vector<std::pair<SeriesKey, SeriesPoint>>* out,
                            const std::function<bool(const SeriesKey&)>& withCounts) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  auto& result = *out;
  result.clear();
  result.reserve(m_series.size());
  for (const auto& [key, points] : m_series) {
    if (points.empty()) continue;
    // Live, a series' newest point is the step's: looked at before any search. Else, as
    // pointAt: the last point at or before the step, kept where it is the step's.
    const SeriesPoint* point = points.back().step == step ? &points.back() : lastAtOrBefore(points, step);
    if (!point || point->step != step) continue;
    if (!withCounts || withCounts(key)) {
      result.emplace_back(key, *point);
      continue;
    }
    // Copied without its counts: the stored point's are set aside for the copy, under the lock
    // every reader takes, and put back (the store's own data: it is not a const object).
    auto& counts = const_cast<std::vector<std::int64_t>&>(point->stats.histogram);
    std::vector<std::int64_t> aside;
    aside.swap(counts);
    result.emplace_back(key, *point);
    counts.swap(aside);
  }
}

std::vector<std::string> CaptureStore::scalarNames() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::set<std::string> names;
  for (const auto& entry : m_scalars) names.insert(entry.first.second);
  return {names.begin(), names.end()};
}

std::vector<ScalarPoint> CaptureStore::scalars(const std::string& name, int rank) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  const auto it = m_scalars.find({rank, name});
  return it == m_scalars.end() ? std::vector<ScalarPoint>{} : it->second;
}

std::vector<int> CaptureStore::ranks() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return {m_ranks.begin(), m_ranks.end()};
}

std::int64_t CaptureStore::latestStep() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  const std::int64_t captured = m_stepCaptures.empty() ? -1 : m_stepCaptures.rbegin()->first;
  return std::max(captured, m_latestScalarStep);
}

std::int64_t CaptureStore::stepAtOrBefore(std::int64_t step) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  auto after = m_stepCaptures.upper_bound(step);
  return after == m_stepCaptures.begin() ? -1 : std::prev(after)->first;
}

std::vector<std::int64_t> CaptureStore::steps() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::vector<std::int64_t> result;
  result.reserve(m_stepCaptures.size());
  for (const auto& entry : m_stepCaptures) result.push_back(entry.first);
  return result;
}

std::size_t CaptureStore::captureCount() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_captures;
}

std::size_t CaptureStore::bytesUsed() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_bytes + m_alertBytes;
}

void CaptureStore::setAlertBytes(std::size_t bytes, int rank) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_rankAlertBytes[rank] = bytes;
  m_alertBytes = 0;
  for (const auto& [r, b] : m_rankAlertBytes) m_alertBytes += b;
  if (overCapLocked() && !m_stepCaptures.empty()) thinLocked(m_stepCaptures.rbegin()->first);
  m_version.fetch_add(1, std::memory_order_release);
}

std::size_t CaptureStore::capBytes() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_cap;
}

void CaptureStore::setCapBytes(std::size_t capBytes) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_cap = capBytes;
  if (overCapLocked() && !m_stepCaptures.empty()) thinLocked(m_stepCaptures.rbegin()->first);
  m_version.fetch_add(1, std::memory_order_release);
}

void CaptureStore::recordThinning(const ThinningEvent& event) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_stride = std::max<std::int64_t>(m_stride, event.stride);
  m_thinning.push_back(event);
  forgetBandsLocked();
  m_version.fetch_add(1, std::memory_order_release);
}

std::int64_t CaptureStore::stride() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_stride;
}

std::vector<ThinningEvent> CaptureStore::thinning() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_thinning;
}

void CaptureStore::clear() {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_series.clear();
  m_bands.clear();
  m_scalars.clear();
  m_scalarBands.clear();
  m_ranks.clear();
  m_stepCaptures.clear();
  m_thinning.clear();
  m_bytes = 0;
  m_captures = 0;
  m_stride = 1;
  m_callStride = 1;
  m_alertBytes = 0;
  m_rankAlertBytes.clear();
  m_latestScalarStep = -1;
  m_version.fetch_add(1, std::memory_order_release);
}

} // namespace hookscope
