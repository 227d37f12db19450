#include "store/RankSpread.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace hookscope {

std::vector<RankSpreadPoint> rankSpread(const std::vector<std::vector<ScalarPoint>>& perRank, std::int64_t lastStep) {
  std::map<std::int64_t, std::vector<double>> byStep;
  for (const auto& points : perRank) {
    for (const auto& p : points) {
      if (lastStep >= 0 && p.step > lastStep) break;  // points ascend by step
      byStep[p.step].push_back(p.value);
    }
  }
  std::vector<RankSpreadPoint> out;
  out.reserve(byStep.size());
  for (auto& [step, values] : byStep) {
    RankSpreadPoint point;
    point.step = step;
    point.ranks = int(values.size());
    if (std::any_of(values.begin(), values.end(), [](double v) { return !std::isfinite(v); })) {
      point.median = point.low = point.high = std::numeric_limits<double>::quiet_NaN();
    } else {
      std::sort(values.begin(), values.end());
      const std::size_t n = values.size();
      point.median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
      point.low = values.front();
      point.high = values.back();
    }
    out.push_back(point);
  }
  return out;
}

} // namespace hookscope
