// libFuzzer target: the input as a synthetic input spec (SHAPE[:DTYPE[:LOW:HIGH]]).
#include "common/InputSpec.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  hookscope::InputSpec spec;
  std::string error;
  if (hookscope::InputSpec::parse(std::string(reinterpret_cast<const char*>(data), size), &spec, &error)) {
    // What parses must be makeable: the size bound holds and the text round-trips.
    std::int64_t elements = 1;
    for (const auto d : spec.shape) elements *= d;
    if (elements > hookscope::kMaxInputElements) __builtin_trap();
    hookscope::InputSpec again;
    if (!hookscope::InputSpec::parse(spec.toString(), &again, &error)) __builtin_trap();
  }
  return 0;
}
