// libFuzzer target: telling a model file's kind from its contents (ModelFileKind), which reads a
// zip's directory, walks a torch.save pickle's opcodes and looks at a safetensors header before
// any engine sees the file. First byte even: the rest as a pickle for pickleGlobals; odd: the
// rest as a whole file for identifyModelFile.
#include "files/ModelFileKind.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    // Any bytes: the names it imports, or false, never a crash or a read past the end.
    std::vector<std::string> globals;
    hookscope::pickleGlobals(rest, &globals);
    return 0;
  }
  static const std::string path = "/tmp/hookscope-fuzz-modelfile-" + std::to_string(::getpid());
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(rest.data(), 1, rest.size(), f);
    std::fclose(f);
  }
  hookscope::ModelFileInfo info;
  std::string error;
  hookscope::identifyModelFile(path, &info, &error);
  return 0;
}
