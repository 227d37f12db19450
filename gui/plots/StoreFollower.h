#pragma once

#include "store/CaptureStore.h"

#include <cstddef>
#include <cstdint>
#include <vector>

/// Lets a plot read only the steps that are new since its last frame. Between thinnings the
/// store only appends, except that the newest step of the previous frame is dropped when it
/// is off the kept grid; a thinning, or another store, means reading everything again.
class StoreFollower {
public:
  /// True when what the plot holds no longer matches `store`, so it must clear and read all.
  bool mustReload(const hookscope::CaptureStore* store) {
    const std::size_t thinnings = store ? store->thinning().size() : 0;
    const bool reload = store != m_store || thinnings != m_thinnings;
    m_store = store;
    m_thinnings = thinnings;
    return reload;
  }
  /// The store last followed; nullptr after forget().
  const hookscope::CaptureStore* store() const { return m_store; }
  void forget() { m_store = nullptr; }

  /// `fresh` was read from `shown` on, the newest step the plot holds: the index of its first
  /// new point. Sets *dropShown when the store no longer holds `shown`.
  template <typename Point>
  static std::size_t firstNew(const std::vector<Point>& fresh, std::int64_t shown, bool* dropShown) {
    *dropShown = fresh.empty() || fresh.front().step != shown;
    return *dropShown ? 0 : 1;
  }

private:
  const hookscope::CaptureStore* m_store = nullptr;
  std::size_t m_thinnings = 0;
};

/// One series' points as a plot holds them, brought up to date with only what is new: the
/// heatmap and the precision page of the selected series.
class SeriesFollower {
public:
  /// The selected series' points up to the store's newest step; true when they changed since
  /// the last call (another store or series, or new steps). Reads everything again after a
  /// thinning or when the selection changed.
  bool update(const hookscope::CaptureStore& store, const hookscope::SeriesKey& selected) {
    if (m_follower.mustReload(&store) || !(selected == m_key)) m_points.clear();
    const bool changed = m_version != store.version() || !(selected == m_key) || m_points.empty();
    m_key = selected;
    m_version = store.version();
    if (!changed) return false;
    if (m_points.empty()) {
      m_points = store.series(selected);
      return true;
    }
    auto fresh = store.series(selected, m_points.back().step);
    bool dropShown = false;
    std::size_t next = StoreFollower::firstNew(fresh, m_points.back().step, &dropShown);
    if (dropShown) m_points.pop_back();
    for (; next < fresh.size(); ++next) m_points.push_back(std::move(fresh[next]));
    return true;
  }
  /// Nothing held: the next update reads everything.
  void clear() {
    m_points.clear();
    m_follower.forget();
    m_version = 0;
  }
  const std::vector<hookscope::SeriesPoint>& points() const { return m_points; }
  const hookscope::SeriesKey& key() const { return m_key; }
  const hookscope::CaptureStore* store() const { return m_follower.store(); }

private:
  StoreFollower m_follower;
  hookscope::SeriesKey m_key;
  std::uint64_t m_version = 0;
  std::vector<hookscope::SeriesPoint> m_points;
};
