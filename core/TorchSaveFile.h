#pragma once
// Internal to core: reading and writing files that Python's torch.load / torch.save use.

#include <ATen/core/ivalue.h>

#include <string>

namespace hookscope {

/// Reads a file written by Python's torch.save (zip or legacy format). Throws
/// std::runtime_error with a short reason when it cannot.
c10::IValue loadTorchSaveFile(const std::string& path);

} // namespace hookscope
