#pragma once

#include "kernels/RawStats.h"

namespace at {
class Tensor;
}

namespace hookscope {

/// Computes a capture's statistics in one fused pass plus one histogram pass, without
/// copying float32/float64 contiguous tensors; other dtypes are converted first. Tensors of
/// 2^18 elements and more are split over the idle cores (whether a core was free does
/// not change the result).
TensorStats computeTensorStats(const at::Tensor& tensor, int bins = kDefaultHistogramBins,
                               StatsCores cores = StatsCores::Idle);

/// The dtype's name as PyTorch prints it without the "torch." prefix ("float32", "int64").
std::string dtypeName(const at::Tensor& tensor);

} // namespace hookscope
