#pragma once
// Internal to core: reading and writing files that Python's torch.load / torch.save use.

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace hookscope {

/// Reads a file written by Python's torch.save (zip or legacy format). Throws
/// std::runtime_error with a short reason when it cannot.
c10::IValue loadTorchSaveFile(const std::string& path);

/// The bytes of a torch.save file holding `value` (dicts, lists, tensors, numbers, strings),
/// which Python's torch.load reads with its default weights_only=True: containers are written
/// as plain pickle, without TorchScript's type tags (which that loader refuses).
std::vector<char> saveTorchFile(const c10::IValue& value);

} // namespace hookscope
