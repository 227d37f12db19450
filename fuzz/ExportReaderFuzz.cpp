// libFuzzer target: a HookScope export folder with one of its files replaced by the input
// (first byte: which file; the rest: its contents), read back with readExport.
#include "files/ExportFolder.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace fs = std::filesystem;
using namespace hookscope;

namespace {

const char* const kFiles[] = {"manifest.json", "stats.csv", "scalars.csv", "histograms.pt", "alerts.csv"};

// A small real export, written once: the files the inputs do not replace come from it.
const fs::path& seedExport() {
  static const fs::path dir = [] {
    const fs::path path = fs::temp_directory_path() / ("hookscope-fuzz-seed-" + std::to_string(::getpid()));
    fs::remove_all(path);
    CaptureStore store;
    for (int step = 0; step < 3; ++step) {
      TensorStats s;
      s.shape = {4, 2};
      s.dtype = "float32";
      s.numel = 8;
      s.min = -1;
      s.max = step + 1;
      s.histogram = {1, 2, 3, 2};
      s.histLow = -1;
      s.histHigh = step + 1;
      store.add(step, {"fc", 0, CaptureKind::Activation, 0}, s);
      store.addScalar(step, "loss", 1.0 / (step + 1));
    }
    ExportManifest manifest;
    manifest.modelFile = "m.pt";
    std::string error;
    if (!writeExport(path.string(), manifest, store, {}, {}, &error)) std::abort();
    return path;
  }();
  return dir;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const fs::path work = fs::temp_directory_path() / ("hookscope-fuzz-work-" + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::copy(seedExport(), work, fs::copy_options::recursive);
  const char* name = kFiles[data[0] % (sizeof(kFiles) / sizeof(kFiles[0]))];
  {
    std::ofstream out(work / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + 1), std::streamsize(size - 1));
  }
  ExportData result;
  std::string error;
  readExport(work.string(), &result, &error);
  return 0;
}
