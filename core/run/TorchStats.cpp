#include "run/TorchStats.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>

namespace hookscope {

std::string dtypeName(const at::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kBool: return "bool";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    default: return c10::toString(tensor.scalar_type());
  }
}

TensorStats computeTensorStats(const at::Tensor& tensor, int bins, StatsCores cores) {
  TensorStats s;
  bins = std::max(1, bins);
  s.shape = tensor.sizes().vec();
  s.dtype = dtypeName(tensor);
  s.numel = tensor.numel();
  c10::NoGradGuard noGrad;
  at::Tensor values = tensor.detach();
  if (values.is_complex()) values = values.abs();  // statistics of the magnitudes
  if (values.device().type() != at::kCPU) values = values.cpu();
  if (values.scalar_type() != at::kFloat && values.scalar_type() != at::kDouble) {
    values = values.to(values.is_floating_point() ? at::kFloat : at::kDouble);
  }
  values = values.contiguous();
  if (values.scalar_type() == at::kFloat) {
    computeRawStats(values.data_ptr<float>(), values.numel(), bins, cores, s);
  } else {
    computeRawStats(values.data_ptr<double>(), values.numel(), bins, cores, s);
  }
  return s;
}

} // namespace hookscope
