#pragma once
// Internal to core: the IR pass that puts taps into a loaded TorchScript module.

#include <torch/script.h>

#include <vector>

namespace hookscope {

/// Attribute that holds each module instance's id, read by the taps at run time.
constexpr const char* kModuleIdAttribute = "_hookscope_id";

/// Gives instances[i] the id i and taps the inputs and output of every submodule call in
/// every method graph (nested blocks included); returns the number of call sites tapped.
/// Must run before the module's first forward: the executor caches its plan then.
int instrumentModule(torch::jit::Module& root, std::vector<torch::jit::Module>& instances);

/// True for the method names through which TorchScript calls a submodule's forward:
/// forward, forward1 (traced repeat calls) and forward__0 (scripted overloads).
bool isModuleCallMethod(const std::string& name);

} // namespace hookscope
