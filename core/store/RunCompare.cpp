#include "store/RunCompare.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace hookscope {

namespace {

/// A series' place in a step: forward (a module's inputs when its call begins, its outputs
/// when it returns, after its children's), then backward (gradients in the reverse order of
/// the outputs), then the parameter kinds by module.
struct StepPlace {
  int phase = 0;
  int time = 0;
  SeriesKey key;
  bool operator<(const StepPlace& o) const {
    // Last the name: a module's parameters tie on all else (std::sort would leave them in any
    // order past 16 series: explain named conv1.weight where hookscope.bands named conv1.bias).
    return std::tie(phase, time, key.call, key.kind, key.index, key.rank, key.module) <
           std::tie(o.phase, o.time, o.key.call, o.key.kind, o.key.index, o.key.rank, o.key.module);
  }
};

bool isAncestor(const std::string& ancestor, const std::string& path) {
  return ancestor.empty() ? !path.empty() : path.size() > ancestor.size() && path.compare(0, ancestor.size(), ancestor) == 0 &&
                                                path[ancestor.size()] == '.';
}

/// When each module's call begins and returns, walking the modules in the model's order (a
/// parent before its children): a parent returns after its last child.
void callTimes(const std::vector<std::string>& order, std::map<std::string, int>& begins, std::map<std::string, int>& returns) {
  std::vector<std::string> open;
  int clock = 0;
  for (const auto& path : order) {
    if (begins.count(path)) continue;
    while (!open.empty() && !isAncestor(open.back(), path)) {
      returns[open.back()] = clock++;
      open.pop_back();
    }
    begins[path] = clock++;
    open.push_back(path);
  }
  while (!open.empty()) {
    returns[open.back()] = clock++;
    open.pop_back();
  }
}

} // namespace

std::vector<SeriesKey> inStepOrder(const std::vector<SeriesKey>& keys, const std::vector<std::string>& moduleOrder) {
  // Modules the order does not list come after it, by name.
  std::vector<std::string> order = moduleOrder;
  std::set<std::string> listed(order.begin(), order.end()), unlisted;
  for (const auto& key : keys) {
    if (!listed.count(ownerModule(key))) unlisted.insert(ownerModule(key));
  }
  order.insert(order.end(), unlisted.begin(), unlisted.end());
  std::map<std::string, int> begins, returns;
  callTimes(order, begins, returns);
  std::vector<StepPlace> places;
  for (const auto& key : keys) {
    StepPlace place;
    place.key = key;
    const std::string owner = ownerModule(key);
    if (key.kind == CaptureKind::Input) {
      place.time = begins.at(owner);
    } else if (key.kind == CaptureKind::Activation) {
      place.time = returns.at(owner);
    } else if (key.kind == CaptureKind::Gradient) {
      place.phase = 1;
      place.time = -returns.at(owner);
    } else {
      place.phase = 2;
      place.time = begins.at(owner);
    }
    places.push_back(place);
  }
  std::sort(places.begin(), places.end());
  std::vector<SeriesKey> ordered;
  for (const auto& place : places) ordered.push_back(place.key);
  return ordered;
}

namespace {

/// The first statistic of `x` and `y` that differs, or nullptr.
const char* firstDifference(const TensorStats& x, const TensorStats& y, double tolerance, double* a, double* b) {
  // A mean is measured against the spread too: 1e-9 against 2e-9 with a std of 1 is the same run.
  const double scale = std::max({std::abs(x.std), std::abs(y.std)});
  const auto meanDiffers = [&] {
    if (!std::isfinite(x.mean) || !std::isfinite(y.mean) || !std::isfinite(scale)) return differs(x.mean, y.mean, tolerance);
    return std::abs(x.mean - y.mean) > tolerance * std::max({std::abs(x.mean), std::abs(y.mean), scale});
  };
  const std::pair<const char*, std::pair<double, double>> candidates[] = {
      {"nan", {double(x.nanCount), double(y.nanCount)}},
      {"inf", {double(x.infCount), double(y.infCount)}},
      {"mean", {x.mean, y.mean}},
      {"std", {x.std, y.std}},
      {"l2norm", {x.l2norm, y.l2norm}}};
  for (const auto& [name, values] : candidates) {
    const bool different = std::string(name) == "mean" ? meanDiffers() : differs(values.first, values.second, tolerance);
    if (different) {
      *a = values.first;
      *b = values.second;
      return name;
    }
  }
  return nullptr;
}

std::vector<std::int64_t> commonSteps(const CaptureStore& a, const CaptureStore& b, RunComparison& result) {
  const auto stepsA = a.steps(), stepsB = b.steps();
  std::vector<std::int64_t> common;
  std::set_intersection(stepsA.begin(), stepsA.end(), stepsB.begin(), stepsB.end(), std::back_inserter(common));
  if (common.size() != stepsA.size() || common.size() != stepsB.size()) {
    result.notes.push_back("the runs kept different steps (" + std::to_string(stepsA.size()) + " and " +
                           std::to_string(stepsB.size()) + ": thinning, or runs of different lengths); compared on the " +
                           std::to_string(common.size()) + " both kept");
  }
  if (a.ranks() != b.ranks()) {
    result.notes.push_back("the runs have different ranks (" + std::to_string(a.ranks().size()) + " and " +
                           std::to_string(b.ranks().size()) + "); compared rank by rank on those both have");
  }
  return common;
}

} // namespace

bool differs(double a, double b, double tolerance) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) != std::isnan(b);
  if (a == b) return false;  // equal infinities too
  if (!std::isfinite(a) || !std::isfinite(b)) return true;
  return std::abs(a - b) > tolerance * std::max(std::abs(a), std::abs(b));
}

std::string describeSeries(const SeriesKey& key) {
  std::string text = std::string(captureKindName(key.kind)) + " " + (key.module.empty() ? "(root)" : key.module);
  if (key.call > 0) text += " [call " + std::to_string(key.call) + "]";
  if (key.index > 0) text += " [tensor " + std::to_string(key.index) + "]";
  if (key.rank > 0) text += " [rank " + std::to_string(key.rank) + "]";
  if (key.rank == kWholeRank) text += " [whole]";
  return text;
}

std::string describeDifference(const SeriesDifference& d) {
  std::ostringstream out;
  out << std::setprecision(7) << "step " << d.step << ", " << describeSeries(d.key) << " (" << d.statistic << " " << d.a
      << " vs " << d.b << ")";
  return out.str();
}

RunComparison compareRuns(const CaptureStore& a, const CaptureStore& b, double tolerance,
                          const std::vector<std::string>& moduleOrder) {
  RunComparison result;
  const auto keysA = a.seriesKeys(), keysB = b.seriesKeys();
  std::vector<SeriesKey> both, shared;
  std::set_intersection(keysA.begin(), keysA.end(), keysB.begin(), keysB.end(), std::back_inserter(both));
  // Tensors of other shapes are other tensors (another model's layer of the same name): never
  // compared, said with both shapes.
  for (const auto& key : both) {
    const auto first = a.series(key), second = b.series(key);
    if (!first.empty() && !second.empty() && first.front().stats.shape != second.front().stats.shape) {
      result.shapesDiffer.push_back(describeSeries(key) + ": " + first.front().stats.shapeString() + " vs " +
                                    second.front().stats.shapeString());
    } else {
      shared.push_back(key);
    }
  }
  for (const auto& key : keysA) {
    if (!std::binary_search(keysB.begin(), keysB.end(), key)) result.onlyInA.push_back(describeSeries(key));
  }
  for (const auto& key : keysB) {
    if (!std::binary_search(keysA.begin(), keysA.end(), key)) result.onlyInB.push_back(describeSeries(key));
  }
  const auto steps = commonSteps(a, b, result);
  const std::set<std::int64_t> compared(steps.begin(), steps.end());
  result.stepsCompared = std::int64_t(steps.size());
  result.seriesCompared = shared.size();
  std::map<std::int64_t, SeriesDifference> firstAtStep;  // the first in step order wins: keys come in that order
  std::map<std::string, std::int64_t> moduleFirst;
  bool binsNoted = false;
  for (const auto& key : inStepOrder(shared, moduleOrder)) {
    const auto pointsA = a.series(key), pointsB = b.series(key);
    auto j = pointsB.begin();
    for (const auto& p : pointsA) {
      while (j != pointsB.end() && j->step < p.step) ++j;
      if (j == pointsB.end()) break;
      if (j->step != p.step || !compared.count(p.step)) continue;
      if (!binsNoted && p.stats.histogram.size() != j->stats.histogram.size()) {
        result.notes.push_back("the runs' histograms have different bins (" + std::to_string(p.stats.histogram.size()) +
                               " and " + std::to_string(j->stats.histogram.size()) +
                               "): their statistics are compared, their histograms are not");
        binsNoted = true;
      }
      double x = 0, y = 0;
      const char* statistic = firstDifference(p.stats, j->stats, tolerance, &x, &y);
      if (!statistic) continue;
      firstAtStep.emplace(p.step, SeriesDifference{key, p.step, statistic, x, y});
      auto& first = moduleFirst.emplace(ownerModule(key), p.step).first->second;
      first = std::min(first, p.step);
    }
  }
  for (const auto& [step, difference] : firstAtStep) result.steps.push_back(difference);
  if (!result.steps.empty()) result.first = result.steps.front();
  result.moduleFirstStep.assign(moduleFirst.begin(), moduleFirst.end());
  return result;
}

} // namespace hookscope
