#pragma once
// Internal to core: the LibTorch objects behind a Model. Never include from gui/.

#include <torch/script.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace hookscope {

struct ModelImpl {
  torch::jit::Module module;
  /// Module instances by id; id 0 is the root. Same order as Model::modules().
  std::vector<torch::jit::Module> instances;
  /// Dotted path of each instance ("" for the root).
  std::vector<std::string> instancePaths;
  /// Each instance's own parameters (not its children's), with full dotted names.
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> ownParams;
  /// Per-instance hook flags, one bit per CaptureKind; read by the taps on every call.
  std::unique_ptr<std::atomic<std::uint8_t>[]> flags;
  /// Per-instance gradient interventions (GradientIntervention::Kind and its value).
  std::unique_ptr<std::atomic<std::uint8_t>[]> interventionKinds;
  std::unique_ptr<std::atomic<double>[]> interventionValues;
  /// Per-instance output interventions (OutputIntervention::Kind).
  std::unique_ptr<std::atomic<std::uint8_t>[]> outputInterventions;
  bool instrumented = false;
  int tapSites = 0;
};

} // namespace hookscope
