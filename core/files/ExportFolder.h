#pragma once

#include "store/CaptureStore.h"
#include "common/CsvFormat.h"
#include "files/ExportManifest.h"
#include "rules/RuleEvaluator.h"
#include "files/ExportTarget.h"

#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace hookscope {

/// How an export is written.
struct ExportOptions {
  bool overwrite = false;  ///< replace an existing HookScope export
  bool lockHeld = false;   ///< the caller holds the folder's ExportLock (taken before its run)
  /// Fault injection for tests: fail as if the disk failed after this many files (-1: never).
  int failAfterFiles = -1;
  /// More text files to write into the folder (name, contents), e.g. alerts.csv.
  std::vector<std::pair<std::string, std::string>> extraFiles;
};

/// The first line of stats.csv, fixed by the format (version 3).
constexpr const char* kStatsCsvHeader =
    "step,rank,module,call,kind,index,shape,dtype,numel,min,max,mean,std,l2norm,zero_frac,nan_count,inf_count,"
    "amax,f16_overflow,f16_underflow,e4m3_underflow,e5m2_underflow";
/// The same in version 2, before the low-precision columns; still read.
constexpr const char* kStatsCsvHeaderV2 =
    "step,rank,module,call,kind,index,shape,dtype,numel,min,max,mean,std,l2norm,zero_frac,nan_count,inf_count";
/// The same in version 1, which had no rank column; still read.
constexpr const char* kStatsCsvHeaderV1 =
    "step,module,call,kind,index,shape,dtype,numel,min,max,mean,std,l2norm,zero_frac,nan_count,inf_count";

/// Writes manifest.json, stats.csv, scalars.csv, histograms.pt and (when given) tensors.pt
/// into a temporary folder beside `dir` and moves it into place when complete (swapped
/// atomically with an earlier export), so a failure or a kill leaves `dir` as it was; what an
/// interrupted earlier write left beside `dir` is tidied first. False with a message on failure.
bool writeExport(const std::string& dir, const ExportManifest& manifest, const CaptureStore& store,
                 const std::vector<char>& tensorsPickle, const ExportOptions& options,
                 std::string* error);

/// An export read back: its manifest and a store holding its captures and scalars.
struct ExportData {
  ExportManifest manifest;
  std::shared_ptr<CaptureStore> store;
  bool hasTensors = false;
  std::vector<Alert> alerts;  ///< alerts.csv, when the export has one
};

/// Reads an export folder; false with a message when it is missing or damaged. capBytes: the
/// memory its captures may take in the store (the window's cap). An export that would take more
/// is read at the steps a thinning would keep (the first, every k-th after it, the newest; k the
/// least doubling of its steps' spacing that fits), recorded in the store's thinning: what is
/// held while reading stays near the cap, where reading it whole and thinning after held it all.
bool readExport(const std::string& dir, ExportData* data, std::string* error,
                std::size_t capBytes = std::numeric_limits<std::size_t>::max());

/// The memory a reader outside the window (hookscope-cli's commands, the report) gives an export's
/// captures: `mib` MiB (its --memory-cap) where > 0, else half of the memory available now
/// (MemAvailable of /proc/meminfo; 4 GiB where that cannot be read), never under 512 MiB: an
/// export larger than that in memory is read at every k-th step rather than the process killed.
std::size_t readingCapBytes(std::int64_t mib);

/// Where readExport kept only every k-th step of `dir` (read into `store` under `capBytes`): "DIR
/// was read at 1 step in K (N of its M steps): all of them would take about X MiB, over the Y MiB
/// memory cap"; "" where it was read whole.
std::string thinnedReadText(const std::string& dir, const CaptureStore& store, std::size_t capBytes);

} // namespace hookscope
