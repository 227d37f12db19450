#pragma once

#include "TensorStats.h"

namespace at {
class Tensor;
}

namespace hookscope {

constexpr int kDefaultHistogramBins = 64;

/// Computes a capture's statistics in one fused pass plus one histogram pass, without
/// copying float32/float64 contiguous tensors; other dtypes are converted first.
TensorStats computeTensorStats(const at::Tensor& tensor, int bins = kDefaultHistogramBins);

/// The dtype's name as PyTorch prints it without the "torch." prefix ("float32", "int64").
std::string dtypeName(const at::Tensor& tensor);

} // namespace hookscope
