#pragma once
// Internal to core: LibTorch error text made fit for one line of a message.

#include <exception>
#include <string>

namespace hookscope {

/// The line of a LibTorch/TorchScript exception a user needs: the final "RuntimeError: ..."
/// of a TorchScript traceback, else the first non-empty line, without the C++ backtrace.
/// With `withClass`, the exception's class stays in front ("ValueError: ..."), as Python says it.
std::string summarizeTorchError(const std::exception& e, bool withClass = false);

} // namespace hookscope
