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
