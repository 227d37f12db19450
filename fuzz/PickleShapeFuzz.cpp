// libFuzzer target: the input as a data file's data.pkl, measured before LibTorch unpickles it.
#include "files/PickleShape.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Any bytes: a verdict, never a crash, a hang or a read past the end. A shallow limit makes
  // the depth checks fire on small inputs too.
  const std::string verdict = hookscope::checkPickleShape(reinterpret_cast<const char*>(data), size, 8);
  if (verdict.empty() && size == 0) __builtin_trap();  // an empty pickle has no STOP
  return 0;
}
