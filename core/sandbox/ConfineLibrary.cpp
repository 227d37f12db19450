// libhookscope_confine.so: confineProcess() behind one C function, which HookScope's Python
// engine (python -m hookscope.engine) loads with ctypes to confine itself before it opens a model
// file, as the C++ engine does. No LibTorch: nothing is compiled against the Python's PyTorch.

#include "sandbox/Confinement.h"

#include <cstdio>
#include <string>
#include <vector>

extern "C" {

/// Confines the calling process for good (Confinement.h), files beneath `writable` (a private
/// temporary folder, or null) excepted; writes what was put in place, or why it could not be,
/// into `text`. 0 when confined, 1 when the kernel refused.
__attribute__((visibility("default"))) int hookscope_confine(const char* writable, char* text, unsigned long size) {
  hookscope::Confinement done;
  std::string error;
  std::vector<std::string> folders;
  if (writable && *writable) folders.push_back(writable);
  const bool ok = hookscope::confineProcess(&done, &error, folders);
  if (text && size) std::snprintf(text, size, "%s", (ok ? done.describe() : error).c_str());
  return ok ? 0 : 1;
}

}
