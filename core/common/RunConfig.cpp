#include "common/RunConfig.h"

#include <sstream>

namespace hookscope {

const char* lossKindName(LossKind kind) {
  switch (kind) {
    case LossKind::Auto: return "auto";
    case LossKind::CrossEntropy: return "cross_entropy";
    case LossKind::Mse: return "mse";
    case LossKind::Mean: return "mean";
    case LossKind::Sum: return "sum";
  }
  return "auto";
}

std::optional<LossKind> parseLossKind(const std::string& name) {
  for (auto kind : {LossKind::Auto, LossKind::CrossEntropy, LossKind::Mse, LossKind::Mean,
                    LossKind::Sum}) {
    if (name == lossKindName(kind)) return kind;
  }
  return std::nullopt;
}

const char* optimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::None: return "none";
    case OptimizerKind::Sgd: return "sgd";
    case OptimizerKind::Adam: return "adam";
  }
  return "none";
}

std::optional<OptimizerKind> parseOptimizerKind(const std::string& name) {
  for (auto kind : {OptimizerKind::None, OptimizerKind::Sgd, OptimizerKind::Adam}) {
    if (name == optimizerKindName(kind)) return kind;
  }
  return std::nullopt;
}

bool RunConfig::operator==(const RunConfig& o) const {
  return std::tie(inputSpecs, dataFile, batchSize, loss, optimizer, lr, momentum, weightDecay, train, noGrad, seed, bins) ==
         std::tie(o.inputSpecs, o.dataFile, o.batchSize, o.loss, o.optimizer, o.lr, o.momentum, o.weightDecay, o.train,
                  o.noGrad, o.seed, o.bins);
}

std::string RunConfig::describe() const {
  std::ostringstream out;
  if (!dataFile.empty()) {
    out << "data " << dataFile;
    if (batchSize > 0) out << " (batch " << batchSize << ")";
  } else {
    out << "input";
    for (const auto& spec : inputSpecs) out << ' ' << spec;
  }
  out << ", loss " << lossKindName(loss) << ", optimizer " << optimizerKindName(optimizer)
      << " lr " << lr << (train ? ", train" : ", eval") << (noGrad ? ", no grad" : "");
  return out.str();
}

} // namespace hookscope
