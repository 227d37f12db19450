#include "rules/RankDivergence.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace hookscope {

double printDifference(const std::array<double, 2>& a, const std::array<double, 2>& b) {
  for (int i = 0; i < 2; ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      if (!(std::isnan(a[i]) && std::isnan(b[i])) && a[i] != b[i]) return std::numeric_limits<double>::infinity();
    }
  }
  if (std::isnan(a[0]) || std::isnan(a[1]) || !std::isfinite(a[0]) || !std::isfinite(a[1])) return 0;  // equal non-finite
  const double difference = std::max(std::fabs(a[0] - b[0]), std::fabs(a[1] - b[1]));
  if (difference == 0) return 0;
  const double scale = std::max(std::fabs(a[1]), std::fabs(b[1]));
  return scale > 0 ? difference / scale : std::numeric_limits<double>::infinity();
}

namespace {

std::string number(double v) {
  std::ostringstream out;
  out.precision(3);
  out << v;
  return out.str();
}

} // namespace

std::vector<Alert> rankDivergence(std::int64_t step, const std::vector<std::string>& names,
                                  const std::map<int, RankPrints>& ranks, double threshold) {
  std::vector<Alert> fired;
  for (const bool gradients : {false, true}) {
    auto printsOf = [&](const RankPrints& p) -> const std::vector<std::array<double, 2>>& {
      return gradients ? p.gradients : p.parameters;
    };
    const RankPrints* reference = nullptr;
    int referenceRank = 0;
    std::vector<std::pair<int, const RankPrints*>> others;
    for (const auto& [rank, prints] : ranks) {
      if (printsOf(prints).size() != names.size() || names.empty()) continue;
      if (!reference) {
        reference = &prints;
        referenceRank = rank;
      } else {
        others.emplace_back(rank, &prints);
      }
    }
    if (!reference || others.empty()) continue;
    for (std::size_t i = 0; i < names.size(); ++i) {
      std::vector<int> differing;
      double largest = 0;
      for (const auto& [rank, prints] : others) {
        const double d = printDifference(printsOf(*reference)[i], printsOf(*prints)[i]);
        if (d > threshold) {
          differing.push_back(rank);
          largest = std::max(largest, d);
        }
      }
      if (differing.empty()) continue;
      std::string which;
      for (std::size_t k = 0; k < differing.size(); ++k) which += (k ? ", " : "") + std::to_string(differing[k]);
      Alert alert;
      alert.step = step;
      alert.module = names[i];
      alert.kind = gradients ? CaptureKind::ParamGrad : CaptureKind::Param;
      alert.rule = RuleKind::RankDivergence;
      alert.value = largest;
      alert.rank = differing.front();
      alert.message = std::string(gradients ? "the gradient of '" : "'") + names[i] + "' " +
                      (gradients ? "after the all-reduce" : "after the optimizer step") + " differs on rank" +
                      (differing.size() > 1 ? "s " : " ") + which + " from rank " + std::to_string(referenceRank) +
                      " (relative difference " + number(largest) + ", above " + number(threshold) +
                      "): DDP keeps it equal on every rank";
      fired.push_back(std::move(alert));
      break;
    }
  }
  return fired;
}

} // namespace hookscope
