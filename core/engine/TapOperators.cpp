#include "engine/TapOperators.h"

#include "engine/Recorder.h"

#include <torch/csrc/jit/runtime/custom_operator.h>

#include <mutex>

namespace hookscope {

namespace {

// Stack on entry: [args, id]. Both are consumed; nothing is returned.
void runInputTap(torch::jit::Stack& stack) {
  const auto id = stack.back().toInt();
  if (Recorder* recorder = Recorder::current()) recorder->onInput(int(id), stack[stack.size() - 2]);
  torch::jit::drop(stack, 2);
}

// Stack on entry: [result, id]; on exit: [result, or its replacement].
void runOutputTap(torch::jit::Stack& stack) {
  const auto id = stack.back().toInt();
  stack.pop_back();
  if (Recorder* recorder = Recorder::current()) stack.back() = recorder->onOutput(int(id), stack.back());
}

} // namespace

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
