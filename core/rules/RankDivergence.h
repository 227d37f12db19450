#pragma once
// rank_divergence: values that DistributedDataParallel keeps equal on every rank (parameters
// after the optimizer step, gradients after the all-reduce) compared across ranks. No LibTorch.

#include "rules/RuleEvaluator.h"

#include <array>
#include <map>
#include <string>
#include <vector>

namespace hookscope {

/// What one rank sent at a step's end: (sum, L2 norm) per parameter, of its values and of its
/// gradient (NaN for a parameter without a gradient).
struct RankPrints {
  std::vector<std::array<double, 2>> parameters;
  std::vector<std::array<double, 2>> gradients;
};

/// The relative difference of two prints: max(|sum a - sum b|, |norm a - norm b|) over the larger
/// norm; 0 when equal, infinite when one is finite and the other is not.
double printDifference(const std::array<double, 2>& a, const std::array<double, 2>& b);

/// Compares the ranks' prints of `step` against the lowest rank's. For parameters, then for
/// gradients, the first parameter (in `names` order) where some rank differs by more than
/// `threshold` gives one alert naming it and every rank that differs. Ranks whose lists do not
/// match `names` are left out.
std::vector<Alert> rankDivergence(std::int64_t step, const std::vector<std::string>& names,
                                  const std::map<int, RankPrints>& ranks, double threshold);

} // namespace hookscope
