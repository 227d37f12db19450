#pragma once
// How a value spreads across the ranks of a job at each step: median, lowest and highest. What
// the window draws for "all ranks" when lines per rank would be too many. No LibTorch here.

#include "store/CaptureStore.h"

#include <cstdint>
#include <vector>

namespace hookscope {

struct RankSpreadPoint {
  std::int64_t step = 0;
  double median = 0;  ///< of the ranks that have the step (mean of the middle two for an even count)
  double low = 0;
  double high = 0;
  int ranks = 0;      ///< how many ranks have the step
};

/// Per step held by any rank, ascending, up to `lastStep` (-1: all). A step where a rank's
/// value is NaN or infinite spreads to NaN: the problem shows as a gap, not as a calm median.
std::vector<RankSpreadPoint> rankSpread(const std::vector<std::vector<ScalarPoint>>& perRank, std::int64_t lastStep = -1);

} // namespace hookscope
