#pragma once
// Internal to core: the custom TorchScript operators the instrumentation inserts.

#include <ATen/core/interned_strings.h>

namespace hookscope {

/// hookscope::tap_input(Any args, int id) -> (): sees a module call's arguments.
c10::Symbol tapInputSymbol();
/// hookscope::tap_output(Any result, int id) -> (): sees a module call's result.
c10::Symbol tapOutputSymbol();
/// Registers both operators with the JIT once; later calls do nothing.
void registerTapOperators();

} // namespace hookscope
