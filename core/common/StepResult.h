#pragma once
// What one step did, as a plain value: the engine's step runner fills it, the window and the
// command line show it.

#include <cstdint>

namespace hookscope {

/// What one step did and how long its parts took.
struct StepResult {
  std::int64_t step = 0;
  double loss = 0;
  bool lossFinite = true;
  double forwardMs = 0;
  double backwardMs = 0;
  double optimizerMs = 0;
  double captureMs = 0;  ///< time spent computing statistics, inside the other parts
  double totalMs = 0;
  int capturesCopied = 0;  ///< captured tensors copied for the statistics thread
  int capturesShared = 0;  ///< and read in place, since no in-place op touches them
};

} // namespace hookscope
