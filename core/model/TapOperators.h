#pragma once
// Internal to core: the custom TorchScript operators the instrumentation inserts, and what
// they report to.

#include <ATen/core/interned_strings.h>
#include <ATen/core/ivalue.h>

namespace hookscope {

/// What the taps on a thread report to (the run room's Recorder): the model room knows only
/// this, so a model can be loaded and instrumented without anything that records.
class TapSink {
public:
  virtual ~TapSink() = default;
  /// Sees a module call's arguments.
  virtual void onInput(int module, const c10::IValue& args) = 0;
  /// Sees a call's result; returns it, or its replacement (an output intervention).
  virtual c10::IValue onOutput(int module, const c10::IValue& result) = 0;
};

/// Makes a sink current on this thread for the scope's lifetime (with none, the taps do nothing).
class TapSinkScope {
public:
  explicit TapSinkScope(TapSink* sink);
  ~TapSinkScope();
  TapSinkScope(const TapSinkScope&) = delete;
  TapSinkScope& operator=(const TapSinkScope&) = delete;

private:
  TapSink* m_previous;
};

/// hookscope::tap_input(Any args, int id) -> (): sees a module call's arguments.
c10::Symbol tapInputSymbol();
/// hookscope::tap_output(t result, int id) -> t: sees a module call's result and returns it,
/// or what an output intervention puts in its place; the graph uses what it returns.
c10::Symbol tapOutputSymbol();
/// Registers both operators with the JIT once; later calls do nothing.
void registerTapOperators();

} // namespace hookscope
