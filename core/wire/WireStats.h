#pragma once
// Statistics on the wire: how a HookScope engine process (`hookscope-cli serve`), which
// computes them itself with core's kernels, sends a step's captures to the window
// (docs/protocol.md, the `stats` message). No LibTorch here: the fuzzer drives it alone.

#include "kernels/RowLayout.h"
#include "store/CaptureStore.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace hookscope {

/// The largest histogram a `stats` entry may carry.
constexpr std::size_t kMaxWireBins = 4096;

/// One capture's statistics as a JSON object (non-finite numbers as "nan", "inf", "-inf").
nlohmann::json statsToWire(const TensorStats& stats);
/// Reads statsToWire's form back; false with a message when a field is missing, of the wrong
/// type or out of range (counts negative or over numel, a histogram too long, ...).
bool statsFromWire(const nlohmann::json& j, TensorStats* stats, std::string* error);

/// Values in a binary stats row before its bins (kernels/RowLayout.h).
constexpr std::size_t kRowHeader = row::kHeader;
/// Reads a binary stats row (kRowHeader values, then `bins` counts, all float64) into `stats`,
/// whose shape, dtype and numel are already set: the same checks as statsFromWire.
bool statsFromRow(const double* row, std::size_t bins, TensorStats* stats, std::string* error);

/// Reads a tensor shape (`j["shape"]`: at most 64 non-negative sizes whose product fits);
/// `what` names the message in the error ("a capture", "a stats entry").
bool shapeFromWire(const nlohmann::json& j, const char* what, std::vector<std::int64_t>* shape, std::int64_t* numel,
                   std::string* error);

} // namespace hookscope
