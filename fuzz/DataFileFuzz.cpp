// libFuzzer target: the input as a torch.save data file, read as HookScope reads data files.
#include "model/TorchSaveFile.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = (std::filesystem::temp_directory_path() /
                                   ("hookscope-fuzz-data-" + std::to_string(::getpid()) + ".pt")).string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  try {
    hookscope::loadTorchSaveFile(path);
  } catch (const std::exception&) {
    // A clear refusal is the expected outcome for most inputs.
  }
  return 0;
}
