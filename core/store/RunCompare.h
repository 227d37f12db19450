#pragma once
// Two runs' captures side by side: where they first differ, step by step, and what only one
// of them holds. Read from two stores (two exports, or a live run and an export).

#include "store/CaptureStore.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hookscope {

/// `keys` in the order a step makes them: inputs as a module's call begins, outputs as it
/// returns (after its children's), then gradients backward, then the parameter kinds by module;
/// modules `moduleOrder` (the model's, in order) does not list come after it, by name.
std::vector<SeriesKey> inStepOrder(const std::vector<SeriesKey>& keys, const std::vector<std::string>& moduleOrder);

/// One series that differs between the runs at one step.
struct SeriesDifference {
  SeriesKey key;
  std::int64_t step = -1;
  std::string statistic;  ///< the first that differs: "mean", "std", "l2norm", "nan", "inf"
  double a = 0, b = 0;    ///< its value in each run
};

struct RunComparison {
  /// The earliest step where a series differs, and the first such series in that step's order
  /// (activations and inputs in forward order, then gradients in backward order, then the
  /// parameter kinds); step -1 when none differs.
  SeriesDifference first;
  /// Per step that has a difference, its first differing series, in step order.
  std::vector<SeriesDifference> steps;
  /// Per module (owner module path), the first step where any of its series differs.
  std::vector<std::pair<std::string, std::int64_t>> moduleFirstStep;
  std::int64_t stepsCompared = 0;
  std::size_t seriesCompared = 0;
  /// Series only one run holds (module, kind, call, index, rank), named as "activation fc1 [call 1] [rank 2]".
  std::vector<std::string> onlyInA, onlyInB;
  /// Series both runs hold whose tensors have other shapes: not compared, named with both
  /// shapes ("activation (root): 16x3 vs 8x10").
  std::vector<std::string> shapesDiffer;
  /// What could not be aligned and how it was handled: steps one run kept and the other did
  /// not, different histogram bins, different ranks.
  std::vector<std::string> notes;

  bool diverged() const { return first.step >= 0; }
};

/// Whether two values differ beyond `tolerance`, relative to the larger of them (NaN equals
/// NaN; a NaN against a number differs).
bool differs(double a, double b, double tolerance);

/// Compares the series both stores hold at the steps both kept. `moduleOrder` lists module
/// paths in the model's order (forward order for most models); modules not in it come after,
/// by name.
RunComparison compareRuns(const CaptureStore& a, const CaptureStore& b, double tolerance,
                          const std::vector<std::string>& moduleOrder);

/// "activation fc1 [call 1] [rank 2]" (a sharded tensor's whole: "[whole]"): a series as the
/// comparison names it.
std::string describeSeries(const SeriesKey& key);
/// "step 1, activation conv1 (std 0.5935955 vs 0.5937674)": a difference as the comparison says it.
std::string describeDifference(const SeriesDifference& difference);

} // namespace hookscope
