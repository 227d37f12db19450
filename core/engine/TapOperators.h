#pragma once
// Internal to core: the custom TorchScript operators the instrumentation inserts.

#include <ATen/core/interned_strings.h>

namespace hookscope {

/// hookscope::tap_input(Any args, int id) -> (): sees a module call's arguments.
c10::Symbol tapInputSymbol();
/// hookscope::tap_output(t result, int id) -> t: sees a module call's result and returns it,
/// or what an output intervention puts in its place; the graph uses what it returns.
c10::Symbol tapOutputSymbol();
/// Registers both operators with the JIT once; later calls do nothing.
void registerTapOperators();

} // namespace hookscope
