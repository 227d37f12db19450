#pragma once
// Internal to core: reading and writing files that Python's torch.load / torch.save use.

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace hookscope {

/// Reads a file written by Python's torch.save (its zip format) from disk, refusing an archive
/// that inflates far beyond its size and tensors that reach outside their storage. Throws
/// std::runtime_error with a short reason when it cannot.
c10::IValue loadTorchSaveFile(const std::string& path);

/// "" when every tensor inside `value` (tuples, lists, dicts, nested) has non-negative sizes
/// and strides and fits its storage; else what is wrong. Run before any op touches them.
std::string checkTensorsInside(const c10::IValue& value);

/// The bytes of a torch.save file holding `value` (dicts, lists, tensors, numbers, strings),
/// which Python's torch.load reads with its default weights_only=True: containers are written
/// as plain pickle, without TorchScript's type tags (which that loader refuses).
std::vector<char> saveTorchFile(const c10::IValue& value);

} // namespace hookscope
