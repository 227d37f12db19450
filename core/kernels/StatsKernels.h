#pragma once
// Internal to core: the loops that compute a capture's statistics over a range of float32 or
// float64 values. Plain C++ on raw pointers, no LibTorch: TorchStats cuts a tensor
// into parts, runs these on the idle cores and merges the parts.

#include "kernels/PrecisionKernels.h"

#include <cstdint>
#include <limits>

namespace hookscope::kernels {

/// Values a part's statistics are merged from.
struct Partial {
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double shiftedSum = 0;    // sum of (x - shift)
  double shiftedSumSq = 0;  // sum of (x - shift)^2, for a stable variance
  double sumSq = 0;         // sum of x^2, for the norm
  std::int64_t finite = 0;
  std::int64_t zeros = 0;
  std::int64_t nans = 0;
  std::int64_t infs = 0;
};

/// Parts start on multiples of this many values, so float block sums group values the same
/// whichever way a tensor is cut.
constexpr std::int64_t kPartAlign = 4096;

/// Adds the range's min, max, sums, zeros and non-finite counts to p. shift is subtracted
/// before the sums of squares, for a stable variance (any value near the data will do).
template <typename T>
void scanValues(const T* data, std::int64_t begin, std::int64_t end, double shift, Partial& p);

/// How values become bins between low and high, the same in every backend (docs/export-format.md).
struct BinPlan {
  bool own = true;  ///< bin = (v - low) * scale in the values' own precision (histogramValues)
  double k = 1;     ///< else bin = (v * k - low * k) * scale in double (histogramWide)
  double scale = 1;
};

/// The plan for values in float32 (floatValues) or float64: float32 values are binned in float32
/// only where the span and the scale are normal float32 numbers; float64 values whose span is
/// past float64's range are halved first (k = 0.5).
BinPlan binPlan(double low, double high, std::int64_t bins, bool floatValues);

/// Adds the range's finite values to counts[0, bins) by a plan that is not the values' own:
/// bin = min(max((v * k - low * k) * scale, 0), bins - 1) in double (a NaN position is bin 0).
template <typename T>
void histogramWide(const T* data, std::int64_t begin, std::int64_t end, double low, double scale, double k,
                   std::int64_t bins, std::int64_t* counts);

/// Which histogram loop to use: Portable is the one any CPU runs, for tests to compare with;
/// OneHot is the AVX-512 one whatever the range's length (where the CPU has it), for tests too.
enum class HistogramKernel { Best, Portable, OneHot };

/// Ranges shorter than this are binned by the portable loop even where the one-hot kernel runs:
/// its final sum of bit planes costs about as much as counting 512 values one by one.
constexpr std::int64_t kOneHotMin = 2048;

/// Whether this CPU runs the one-hot histogram (AVX-512), which Best picks for float32 with
/// every value finite, at most 64 bins and at least kOneHotMin values.
bool hasOneHotKernel();

/// The registers the float32 scan runs in on this CPU: "AVX-512", "AVX2", "SSE2" (x86-64 with
/// GCC), or "generic" (vectors of 16 lanes, as the compiler splits them).
const char* scanRegisters();

/// Adds the range's finite values to counts[0, bins): bin = min((v - low) * scale, bins - 1)
/// in the values' precision, clamped at 0. allFinite promises the range has no NaN or Inf
/// and no value below low.
/// With `scan`, also adds the range's low-precision counts to it: the one-hot kernel tests each
/// value as it bins it, the others count each slice of kCountSlice values after binning it.
template <typename T>
void histogramValues(const T* data, std::int64_t begin, std::int64_t end, double low, double scale,
                     std::int64_t bins, bool allFinite, std::int64_t* counts,
                     HistogramKernel kernel = HistogramKernel::Best, PrecisionScan<T>* scan = nullptr);

} // namespace hookscope::kernels
