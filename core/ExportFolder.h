#pragma once

#include "CaptureStore.h"
#include "CsvFormat.h"
#include "ExportManifest.h"

#include <memory>
#include <string>
#include <vector>

namespace hookscope {

/// How an export is written.
struct ExportOptions {
  bool overwrite = false;  ///< replace an existing non-empty folder
  /// Fault injection for tests: fail as if the disk failed after this many files (-1: never).
  int failAfterFiles = -1;
  /// More text files to write into the folder (name, contents), e.g. alerts.csv.
  std::vector<std::pair<std::string, std::string>> extraFiles;
};

/// The first line of stats.csv, fixed by the format.
constexpr const char* kStatsCsvHeader =
    "step,module,call,kind,index,shape,dtype,numel,min,max,mean,std,l2norm,zero_frac,nan_count,inf_count";

/// "" when an export may be written to `dir`, else why not and what to do.
std::string checkExportTarget(const std::string& dir, bool overwrite);

/// Writes manifest.json, stats.csv, scalars.csv, histograms.pt and (when given) tensors.pt
/// into a temporary folder beside `dir` and renames it into place when complete, so a
/// failure leaves `dir` as it was. False with a message on failure.
bool writeExport(const std::string& dir, const ExportManifest& manifest, const CaptureStore& store,
                 const std::vector<char>& tensorsPickle, const ExportOptions& options,
                 std::string* error);

/// An export read back: its manifest and a store holding its captures and scalars.
struct ExportData {
  ExportManifest manifest;
  std::shared_ptr<CaptureStore> store;
  bool hasTensors = false;
};

/// Reads an export folder; false with a message when it is missing or damaged.
bool readExport(const std::string& dir, ExportData* data, std::string* error);

} // namespace hookscope
