#include "TapOperators.h"

#include "Recorder.h"

#include <torch/csrc/jit/runtime/custom_operator.h>

#include <mutex>

namespace hookscope {

namespace {

// Stack on entry: [value, id]. Both are consumed; nothing is returned.
template <bool IsInput>
void runTap(torch::jit::Stack& stack) {
  const auto id = stack.back().toInt();
  Recorder* recorder = Recorder::current();
  if (recorder) {
    const c10::IValue& value = stack[stack.size() - 2];
    if (IsInput) {
      recorder->onInput(int(id), value);
    } else {
      recorder->onOutput(int(id), value);
    }
  }
  torch::jit::drop(stack, 2);
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
        torch::jit::Operator("hookscope::tap_input(Any args, int id) -> ()", runTap<true>,
                             c10::AliasAnalysisKind::CONSERVATIVE),
        torch::jit::Operator("hookscope::tap_output(Any result, int id) -> ()", runTap<false>,
                             c10::AliasAnalysisKind::CONSERVATIVE),
    });
  });
}

} // namespace hookscope
