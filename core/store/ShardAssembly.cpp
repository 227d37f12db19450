#include "store/ShardAssembly.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hookscope {

namespace {

// Every part binned between the same edges, of one dtype: else their rows do not add up.
bool partsFit(const std::vector<const TensorStats*>& parts, std::string* why) {
  const TensorStats& first = *parts.front();
  for (const TensorStats* p : parts) {
    if (p->histogram.size() != first.histogram.size() || p->dtype != first.dtype) {
      *why = "its shards' rows differ in bins or dtype";
      return false;
    }
    if (p->histLow != first.histLow || p->histHigh != first.histHigh) {
      *why = "its shards' histograms have different edges";
      return false;
    }
  }
  return true;
}

std::int64_t finiteCount(const TensorStats& s) { return s.numel - s.nanCount - s.infCount; }

} // namespace

bool combineShards(const std::vector<const TensorStats*>& parts, const std::vector<std::int64_t>& shape,
                   TensorStats* whole, std::string* why) {
  if (parts.empty()) {
    *why = "it has no parts";
    return false;
  }
  if (!partsFit(parts, why)) return false;
  std::int64_t numel = 1;
  for (const auto d : shape) numel *= d;
  TensorStats s;
  s.shape = shape;
  s.dtype = parts.front()->dtype;
  s.histLow = parts.front()->histLow;
  s.histHigh = parts.front()->histHigh;
  s.histogram.assign(parts.front()->histogram.size(), 0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  bool precision = true;
  double sum = 0, squares = 0, zeros = 0;
  std::int64_t finite = 0;
  s.min = std::numeric_limits<double>::infinity();
  s.max = -s.min;
  s.amax = 0;
  s.f16Overflow = s.f16Underflow = s.e4m3Underflow = s.e5m2Underflow = 0;
  for (const TensorStats* p : parts) {
    s.numel += p->numel;
    s.nanCount += p->nanCount;
    s.infCount += p->infCount;
    zeros += std::round(p->zeroFraction * double(p->numel));
    for (std::size_t i = 0; i < s.histogram.size(); ++i) s.histogram[i] += p->histogram[i];
    precision = precision && p->hasPrecision();
    s.f16Overflow += p->f16Overflow;
    s.f16Underflow += p->f16Underflow;
    s.e4m3Underflow += p->e4m3Underflow;
    s.e5m2Underflow += p->e5m2Underflow;
    const std::int64_t n = finiteCount(*p);
    if (n == 0) continue;
    finite += n;
    sum += p->mean * double(n);
    squares += p->l2norm * p->l2norm;
    s.min = std::min(s.min, p->min);
    s.max = std::max(s.max, p->max);
    s.amax = std::max(s.amax, p->amax);
  }
  if (s.numel != numel) {
    *why = "its shards hold " + std::to_string(s.numel) + " values of " + std::to_string(numel);
    return false;
  }
  s.zeroFraction = numel ? zeros / double(numel) : 0.0;
  if (finite == 0) {
    s.min = s.max = s.mean = s.amax = nan;
    s.std = s.l2norm = numel ? nan : 0.0;
  } else {
    s.mean = sum / double(finite);
    // Chan et al.: each part's sum of squared differences about its own mean, moved to the whole's.
    double m2 = 0;
    for (const TensorStats* p : parts) {
      const std::int64_t n = finiteCount(*p);
      if (n == 0) continue;
      const double d = p->mean - s.mean;
      m2 += (n > 1 ? p->std * p->std * double(n - 1) : 0.0) + double(n) * d * d;
    }
    s.std = finite > 1 ? std::sqrt(m2 / double(finite - 1)) : 0.0;
    s.l2norm = std::sqrt(squares);
  }
  if (!precision) {
    s.amax = nan;
    s.f16Overflow = s.f16Underflow = s.e4m3Underflow = s.e5m2Underflow = -1;
  }
  *whole = std::move(s);
  return true;
}

bool ShardAssembly::add(std::int64_t step, const SeriesKey& key, const TensorStats& stats, const ShardPart& part,
                        TensorStats* whole) {
  SeriesKey wholeKey = key;
  wholeKey.rank = kWholeRank;
  std::lock_guard<std::mutex> lock(m_mutex);
  m_newest = std::max(m_newest, step);
  while (!m_pending.empty() && m_pending.begin()->first.first < m_newest - kStepsKept) m_pending.erase(m_pending.begin());
  if (step < m_newest - kStepsKept) return false;
  const auto at = std::make_pair(step, wholeKey);
  Pending& pending = m_pending[at];
  if (pending.got.empty()) {
    pending.parts = part.parts;
    pending.shape = part.shape;
  }
  if (pending.parts != part.parts || pending.shape != part.shape) {
    m_problem = key.module + ": its ranks disagree on how many parts it has, or its shape";
    m_pending.erase(at);
    return false;
  }
  pending.got[part.part] = stats;
  if (int(pending.got.size()) < pending.parts) return false;
  std::vector<const TensorStats*> parts;
  for (const auto& [index, s] : pending.got) parts.push_back(&s);
  std::string why;
  const bool made = combineShards(parts, pending.shape, whole, &why);
  if (!made) m_problem = key.module + ": " + why;
  m_pending.erase(at);
  return made;
}

std::string ShardAssembly::lastProblem() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_problem;
}

} // namespace hookscope
