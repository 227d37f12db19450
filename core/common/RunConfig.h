#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace hookscope {

enum class LossKind { Auto, CrossEntropy, Mse, Mean, Sum };
enum class OptimizerKind { None, Sgd, Adam };

const char* lossKindName(LossKind kind);
std::optional<LossKind> parseLossKind(const std::string& name);
const char* optimizerKindName(OptimizerKind kind);
std::optional<OptimizerKind> parseOptimizerKind(const std::string& name);

/// How the steps of a run are made.
struct RunConfig {
  std::vector<std::string> inputSpecs;  ///< synthetic inputs, one per model input
  std::string dataFile;                 ///< or a torch.save file: {"inputs": ..., "targets": ...}
  std::int64_t batchSize = 0;           ///< 0: the whole data file is one batch
  LossKind loss = LossKind::Auto;
  OptimizerKind optimizer = OptimizerKind::Sgd;
  double lr = 0.01;
  double momentum = 0.0;
  double weightDecay = 0.0;
  bool train = true;    ///< false runs the model in eval mode
  bool noGrad = false;  ///< forward only: no backward, no optimizer, no gradients
  std::uint64_t seed = 0;
  int bins = 64;

  /// A one-line description, e.g. "input 8x1x28x28:float32, loss mean, sgd lr 0.01".
  std::string describe() const;
  /// Every field equal.
  bool operator==(const RunConfig& other) const;
  bool operator!=(const RunConfig& other) const { return !(*this == other); }
};

} // namespace hookscope
