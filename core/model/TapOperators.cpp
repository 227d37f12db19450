#include "model/TapOperators.h"

#include <torch/csrc/jit/runtime/custom_operator.h>

#include <mutex>

namespace hookscope {

namespace {

thread_local TapSink* t_current = nullptr;

// Stack on entry: [args, id]. Both are consumed; nothing is returned.
void runInputTap(torch::jit::Stack& stack) {
  const auto id = stack.back().toInt();
  if (TapSink* sink = t_current) sink->onInput(int(id), stack[stack.size() - 2]);
  torch::jit::drop(stack, 2);
}

// Stack on entry: [result, id]; on exit: [result, or its replacement].
void runOutputTap(torch::jit::Stack& stack) {
  const auto id = stack.back().toInt();
  stack.pop_back();
  if (TapSink* sink = t_current) stack.back() = sink->onOutput(int(id), stack.back());
}

} // namespace

TapSinkScope::TapSinkScope(TapSink* sink) : m_previous(t_current) { t_current = sink; }
TapSinkScope::~TapSinkScope() { t_current = m_previous; }

c10::Symbol tapInputSymbol() { return c10::Symbol::fromQualString("hookscope::tap_input"); }
c10::Symbol tapOutputSymbol() { return c10::Symbol::fromQualString("hookscope::tap_output"); }

void registerTapOperators() {
  static std::once_flag once;
  std::call_once(once, [] {
    // CONSERVATIVE alias analysis: the op is assumed to have side effects, so dead-code
    // elimination keeps it even though it returns nothing.
    torch::jit::RegisterOperators registration({
        torch::jit::Operator("hookscope::tap_input(Any args, int id) -> ()", runInputTap,
                             c10::AliasAnalysisKind::CONSERVATIVE),
        torch::jit::Operator("hookscope::tap_output(t result, int id) -> t", runOutputTap,
                             c10::AliasAnalysisKind::CONSERVATIVE),
    });
  });
}

} // namespace hookscope
