#pragma once

#include "store/CaptureStore.h"

#include <memory>
#include <string>
#include <vector>

/// What the plots show: one store, the selected series, and the step being looked at.
struct ViewState {
  std::shared_ptr<hookscope::CaptureStore> store;
  /// A run compared with this one (File > Compare with run…): drawn over it, dashed or outlined.
  std::shared_ptr<hookscope::CaptureStore> compared;
  hookscope::SeriesKey selected;  ///< module, call, kind, index of the selected series
  bool hasSelection = false;
  std::uint8_t selectedHooks = 0; ///< what is ticked on the selected layer (CaptureKind bits)
  std::string selectedType;       ///< the selected module's class ("ModuleList"), "" if not known
  std::int64_t step = -1;         ///< the step shown; -1 when nothing ran yet
  std::int64_t latestStep = -1;
  std::vector<int> ranks;         ///< ranks in the store, ascending (one, 0, unless a job's)
  int rank = -1;                  ///< the rank chosen; -1: all ranks

  /// The rank whose series the histogram, heatmap and tree show: the chosen one, or the lowest.
  int shownRank() const { return rank >= 0 ? rank : ranks.empty() ? 0 : ranks.front(); }
  /// With all ranks, up to this many ranks get a line each in the plots over steps; more get
  /// the median over ranks and a min–max band.
  static constexpr std::size_t kMaxRankLines = 4;
  /// Whether the plots over steps draw every rank.
  bool allRanks() const { return rank < 0 && ranks.size() > 1; }
  /// Whether they draw every rank as the median over ranks and a band (too many for a line each).
  bool drawsMedian() const { return allRanks() && ranks.size() > kMaxRankLines; }
};

/// The same tensor of a module, whatever rank it came from.
inline bool sameTensor(const hookscope::SeriesKey& a, const hookscope::SeriesKey& b) {
  return a.module == b.module && a.call == b.call && a.kind == b.kind && a.index == b.index;
}
