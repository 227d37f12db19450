#pragma once
// An export's histograms.pt without LibTorch: the small subset of torch.save's format it uses
// (a zip of stored records; a protocol-2 pickle of dicts of int64 and float64 tensors), written
// so that torch.load(path, weights_only=True) reads it, and read back with every bound checked
// (each storage against the real size of its record, not the pickle's claim).

#include "kernels/TensorStats.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace hookscope {

/// One series' histograms over steps: row i is step steps[i].
struct HistogramTable {
  std::vector<std::int64_t> steps;
  std::int64_t bins = 0;
  std::vector<std::int64_t> counts;  ///< steps.size() x bins, row-major
  std::vector<double> edges;         ///< steps.size() x (bins + 1), row-major
  /// Per step (written; the reader takes them from stats.csv): amax (NaN where not measured) and
  /// the counts of kPrecisionCounts (-1 where not measured). Empty: not measured at all.
  std::vector<double> amax;
  std::array<std::vector<std::int64_t>, 4> precision;
};

using HistogramTables = std::vector<std::pair<std::string, HistogramTable>>;

/// Writes {name: {"steps": int64[S], "counts": int64[S, bins], "edges": float64[S, bins + 1],
/// "amax": float64[S], "f16_overflow": int64[S], ... (kPrecisionCounts)}} to `path` in
/// torch.save's zip format; false with a message when the file cannot be written.
bool writeHistogramsFile(const std::string& path, const HistogramTables& tables, std::string* error);

/// What the file says of one series before its values: its name, rows (steps) and bins.
struct HistogramShape {
  std::string name;
  std::int64_t rows = 0;
  std::int64_t bins = 0;
};

/// The same, one series at a time: `fill(i, &table)` gives series i's values while the file is
/// written, with the rows and bins shapes[i] says, so that a store's histograms are never all
/// copied at once. A fill that returns false (with `error` set) fails the write.
bool writeHistogramsFile(const std::string& path, const std::vector<HistogramShape>& shapes,
                         const std::function<bool(std::size_t, HistogramTable*, std::string*)>& fill,
                         std::string* error);

/// Takes one series' table as it is read: "" to go on, else what is wrong (the read stops there
/// and fails with it). The table is gone once it returns: a file's tables are never all held.
using HistogramTableReader = std::function<std::string(const std::string& name, const HistogramTable& table)>;

/// Reads what writeHistogramsFile writes (or PyTorch's own torch.save of the same dict, or an
/// export of an earlier HookScope), giving `each` one table after the other. False with what is
/// wrong when the file is anything else: not a zip, a record that inflates too far, a pickle of
/// other things, a tensor of the wrong type or shape, or a storage that claims more bytes than
/// its record holds.
bool readHistogramsFile(const std::string& path, const HistogramTableReader& each, std::string* error);

/// readHistogramsFile on bytes in memory.
bool readHistogramsBytes(const std::string& bytes, const HistogramTableReader& each, std::string* error);

/// The same, every table kept in `tables` (for small files: tests, the fuzzer).
bool readHistogramsFile(const std::string& path, HistogramTables* tables, std::string* error);
bool readHistogramsBytes(const std::string& bytes, HistogramTables* tables, std::string* error);

} // namespace hookscope
