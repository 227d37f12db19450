#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace hookscope {

/// Summary of one captured tensor. Moments, min, max and the norm are over the finite
/// values; NaN and Inf are counted, never folded in or dropped silently.
struct TensorStats {
  std::vector<std::int64_t> shape;
  std::string dtype;            ///< "float32", "int64", "bool", ...
  std::int64_t numel = 0;
  double min = 0;               ///< NaN when no value is finite
  double max = 0;
  double mean = 0;
  double std = 0;               ///< sample standard deviation (n-1), as torch.std(); 0 below two finite
                                ///< values, NaN when there are values and none is finite
  double l2norm = 0;            ///< NaN when there are values and none is finite
  double zeroFraction = 0;      ///< exact zeros over numel
  std::int64_t nanCount = 0;
  std::int64_t infCount = 0;
  std::vector<std::int64_t> histogram;  ///< counts of finite values in equal bins
  double histLow = 0;           ///< left edge of the first bin
  double histHigh = 0;          ///< right edge of the last bin
  /// The largest finite |value| (NaN when none is finite), and the finite values that float16
  /// and fp8 would lose (docs/export-format.md): float16 overflow (|v| > 65504) and underflow
  /// (0 < |v| < 2^-24), E4M3 and E5M2 underflow after scaling the tensor's amax to the format's
  /// largest value. -1: the source did not measure them (an older script or export).
  double amax = std::numeric_limits<double>::quiet_NaN();
  std::int64_t f16Overflow = -1;
  std::int64_t f16Underflow = -1;
  std::int64_t e4m3Underflow = -1;
  std::int64_t e5m2Underflow = -1;

  /// bins + 1 bin edges from histLow to histHigh.
  std::vector<double> edges() const;
  /// Shape written as "8x3x32x32" ("" for a scalar).
  std::string shapeString() const;
  /// Bytes this value occupies in memory, for the store's cap.
  std::size_t memoryBytes() const;
  /// True when the tensor held NaN or Inf.
  bool hasNonFinite() const { return nanCount > 0 || infCount > 0; }
  /// True when the low-precision counts were measured.
  bool hasPrecision() const { return f16Overflow >= 0; }
};

/// One of the low-precision counts: its name in exports and on the wire, a short label for a
/// narrow column, and what it counts.
struct PrecisionCount {
  const char* name;
  const char* label;
  const char* meaning;
  std::int64_t TensorStats::*field;
};

/// The low-precision counts, in the order of the export's columns.
inline constexpr std::array<PrecisionCount, 4> kPrecisionCounts = {{
    {"f16_overflow", "f16 over", "finite values past float16's largest, 65504", &TensorStats::f16Overflow},
    {"f16_underflow", "f16 flush", "non-zero values float16 flushes to zero (below 2^-24)", &TensorStats::f16Underflow},
    {"e4m3_underflow", "E4M3 flush", "non-zero values fp8 E4M3 flushes to zero after per-tensor amax scaling",
     &TensorStats::e4m3Underflow},
    {"e5m2_underflow", "E5M2 flush", "non-zero values fp8 E5M2 flushes to zero after per-tensor amax scaling",
     &TensorStats::e5m2Underflow},
}};

/// The fraction of a tensor's values that a count holds; NaN when it was not measured or the
/// tensor is empty.
inline double precisionFraction(const TensorStats& s, const PrecisionCount& count) {
  const std::int64_t n = s.*count.field;
  return n < 0 || s.numel <= 0 ? std::nan("") : double(n) / double(s.numel);
}

} // namespace hookscope
