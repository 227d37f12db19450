// A small operator library, as a user's TORCH_LIBRARY build would be: the fixture script
// scripts a model that calls hookscope_test::scale, and the tests load it with --load-library.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace {

at::Tensor scale(const at::Tensor& x, double factor) { return x * factor; }

} // namespace

// A catch-all kernel made of ATen ops: autograd differentiates through it.
TORCH_LIBRARY(hookscope_test, m) { m.def("scale(Tensor x, float factor) -> Tensor", &scale); }
