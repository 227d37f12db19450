// libFuzzer target: the input as a model file, scanned as HookScope scans one before LibTorch
// loads it (the archive's records, their sizes, the TorchScript source). The first byte
// chooses: odd scans the rest as one code record's text, even writes it out as the archive.
#include "model/ModelArchiveScan.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1) {
    const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
    for (const auto& finding : hookscope::scanModelCode("code/__torch__.py", text)) {
      if (finding.line < 1) __builtin_trap();
    }
    return 0;
  }
  static const std::string path = (std::filesystem::temp_directory_path() /
                                   ("hookscope-fuzz-model-" + std::to_string(::getpid()) + ".pt")).string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + 1), std::streamsize(size - 1));
  }
  std::vector<hookscope::ArchiveFinding> findings;
  std::string error;
  hookscope::scanModelArchive(path, &findings, &error);
  return 0;
}
