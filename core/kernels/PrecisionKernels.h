#pragma once
// Internal to core: the low-precision counts of a range of float32 or float64 values (what
// float16 would overflow or flush, what fp8 would flush after amax scaling), counted in the
// histogram's pass (StatsKernels).

#include <cstdint>
#include <cstring>
#include <limits>

namespace hookscope::kernels {

/// The finite values a low-precision format would lose (counted in the histogram's pass).
struct PrecisionCounts {
  std::int64_t f16Overflow = 0;    // |v| > 65504
  std::int64_t f16Underflow = 0;   // 0 < |v| < 2^-24
  std::int64_t e4m3Underflow = 0;  // 0 < |v| < e4m3Below
  std::int64_t e5m2Underflow = 0;  // 0 < |v| < e5m2Below
};

/// The largest value of an fp8 format and its smallest subnormal, for flushBelow.
struct Fp8Format {
  double largest;
  double smallestSubnormal;
};
constexpr Fp8Format kE4M3{448.0, 0x1p-9};
constexpr Fp8Format kE5M2{57344.0, 0x1p-16};

/// Where a format's underflow begins once a tensor is scaled so that its amax becomes the
/// format's largest value: the smallest T w with fl64(w * largest) >= fl64(amax * smallestSubnormal),
/// so that a value counts when |v| < w, i.e. when |v| * largest < amax * smallestSubnormal in
/// float64 (exactly so for float32 values). 0 (nothing counts) for an amax of 0 or NaN.
template <typename T>
T flushBelow(double amax, Fp8Format format);

/// What the histogram's pass counts besides the histogram: the thresholds (flushBelow), the
/// tensor's amax (nothing overflows float16 below 65504, so that test is skipped) and the
/// counts so far.
template <typename T>
struct PrecisionScan {
  T e4m3Below = T(0);
  T e5m2Below = T(0);
  double amax = 0;
  PrecisionCounts counts;
};

/// Adds the range's values to the low-precision counts (NaN and Inf count nowhere). Blocks with
/// nothing to count are passed over after one test a value (PrecisionTest, on the bits).
template <typename T>
void countPrecision(const T* data, std::int64_t begin, std::int64_t end, PrecisionScan<T>& scan);

/// How many values the histogram's pass reads before counting them again (512 KiB of float32,
/// within a core's L2 cache), when its kernel does not count as it bins: so that the values
/// come from memory once. Shorter slices cost more in the kernels' start and end than the
/// re-read saves (measured). A whole number of the pair histogram's blocks.
constexpr std::int64_t kCountSlice = std::int64_t(1) << 17;

/// The test a histogram kernel makes on each float32 value's bits, as it bins it, to find the
/// blocks with something to count: 0 < |v| < the largest threshold, or (when amax allows one)
/// 65504 < |v| < Inf, each as one unsigned comparison (|bits| - from < span).
struct PrecisionTest {
  std::uint32_t absMask = 0x7fffffffu;
  std::uint32_t underFrom = 1, underSpan = 0;
  std::uint32_t overFrom = 0, overSpan = 0;  ///< span 0: no overflow can be (amax <= 65504)
};
PrecisionTest precisionTest(const PrecisionScan<float>& scan);

/// Counts every value of [first, last) into scan.counts: for a block a test found something in.
/// True when it counted any.
template <typename T>
bool countBlock(const T* data, std::int64_t first, std::int64_t last, PrecisionScan<T>& scan);

} // namespace hookscope::kernels
