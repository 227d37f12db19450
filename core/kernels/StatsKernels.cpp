#include "kernels/StatsKernels.h"

#include "kernels/SimdClones.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

// The one-hot histogram below needs AVX-512 intrinsics, compiled for that one function.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HOOKSCOPE_ONE_HOT_KERNEL 1
// GCC 12 warns that its own intrinsics read an uninitialized "don't care" operand
// (_mm512_undefined_*): a false positive, GCC bug 105593.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#define HOOKSCOPE_ONE_HOT_KERNEL 0
#endif

namespace hookscope::kernels {

namespace {


// The careful scan: non-finite values are selected away and counted. Branch-free, with
// reductions that may be reassociated (omp simd, built with -fopenmp-simd).
template <typename T>
void scanRange(const T* data, std::int64_t begin, std::int64_t end, double shift, Partial& p) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  double lo = inf, hi = -inf, s1 = 0, s2 = 0, sq = 0;
  std::int64_t finite = 0, zeros = 0, nans = 0, infs = 0;
#pragma omp simd reduction(min : lo) reduction(max : hi) reduction(+ : s1, s2, sq, finite, zeros, nans, infs)
  for (std::int64_t i = begin; i < end; ++i) {
    const double v = double(data[i]);
    const bool isNan = v != v;
    const bool isInf = std::fabs(v) == inf;
    const bool ok = !isNan && !isInf;
    const double f = ok ? v : 0.0;
    const double d = ok ? v - shift : 0.0;
    lo = std::min(lo, ok ? v : inf);
    hi = std::max(hi, ok ? v : -inf);
    s1 += d;
    s2 += d * d;
    sq += f * f;
    finite += ok;
    zeros += v == 0.0;
    nans += isNan;
    infs += isInf;
  }
  p.min = std::min(p.min, lo);
  p.max = std::max(p.max, hi);
  p.shiftedSum += s1;
  p.shiftedSumSq += s2;
  p.sumSq += sq;
  p.finite += finite;
  p.zeros += zeros;
  p.nans += nans;
  p.infs += infs;
}

// float32 fast path: assumes every value is finite, so it needs no selects and runs several
// times faster than the careful scan. Each quantity is kept in 16 lanes (one AVX-512 or two
// AVX2 registers, written with GCC's vector extensions), so the loop has no horizontal
// reduction. It takes two vectors per iteration into two sets of accumulators, so no
// iteration waits on the previous one's additions. Blocks of 1024 values (64 per lane) are
// summed in float, then their lanes are widened and added to double lanes, all in
// registers. The relative rounding error of a block's sum of squares is below
// 64 * 2^-24 = 4e-6 even in the worst case, inside the 1e-5 parity tolerance, and about
// 1e-8 typically. A NaN or Inf in a block makes its sums or bounds non-finite; that block
// is scanned again carefully.
typedef float FloatLanes __attribute__((vector_size(64)));
typedef std::int32_t IntLanes __attribute__((vector_size(64)));
typedef double DoubleLanes __attribute__((vector_size(64)));  // 8 of them
constexpr int kLanes = 16;
constexpr std::int64_t kScanBlock = 64 * kLanes;
static_assert(kPartAlign % kScanBlock == 0, "parts start on whole scan blocks");

HOOKSCOPE_SIMD_CLONES void scanRangeFast(const float* data, std::int64_t begin, std::int64_t end, double shift, Partial& p) {
  const FloatLanes shifts = FloatLanes{} + float(shift);
  const FloatLanes zero = FloatLanes{};
  FloatLanes lo = FloatLanes{} + std::numeric_limits<float>::infinity();
  FloatLanes hi = -lo;
  IntLanes zeros = IntLanes{};
  // Double lanes 0-7 and 8-15 of the shifted sum, the shifted squares and the squares.
  DoubleLanes s1Low = {}, s1High = {}, s2Low = {}, s2High = {}, sqLow = {}, sqHigh = {};
  std::int64_t fastValues = 0;
  std::int64_t first = begin;
  for (; first + kScanBlock <= end; first += kScanBlock) {
    const float* block = data + first;
    FloatLanes lo0 = lo, hi0 = hi, lo1 = lo, hi1 = hi;
    FloatLanes s10 = zero, s11 = zero, s20 = zero, s21 = zero, sq0 = zero, sq1 = zero;
    IntLanes zeros0 = IntLanes{}, zeros1 = IntLanes{};
    for (std::int64_t j = 0; j < kScanBlock; j += 2 * kLanes) {
      FloatLanes v, w;
      std::memcpy(&v, block + j, sizeof v);  // unaligned loads
      std::memcpy(&w, block + j + kLanes, sizeof w);
      const FloatLanes dv = v - shifts, dw = w - shifts;
      lo0 = v < lo0 ? v : lo0;
      lo1 = w < lo1 ? w : lo1;
      hi0 = v > hi0 ? v : hi0;
      hi1 = w > hi1 ? w : hi1;
      s10 += dv;
      s11 += dw;
      s20 += dv * dv;
      s21 += dw * dw;
      sq0 += v * v;
      sq1 += w * w;
      zeros0 = v == zero ? zeros0 + 1 : zeros0;
      zeros1 = w == zero ? zeros1 + 1 : zeros1;
    }
    const FloatLanes s1 = s10 + s11, s2 = s20 + s21, sq = sq0 + sq1;
    const FloatLanes blockLo = lo0 < lo1 ? lo0 : lo1, blockHi = hi0 > hi1 ? hi0 : hi1;
    // x - x is +0 for finite x, NaN for NaN and Inf: the probe's bits are all zero only when
    // every lane of every quantity is finite. They are OR-folded in registers.
    const FloatLanes probe = (s1 - s1) + (s2 - s2) + (sq - sq) + (blockLo - blockLo) + (blockHi - blockHi);
    // A lane whose float squares sum below 2^-60 while it holds a non-zero value may have lost
    // squares below float's normal range (|v| < 2^-63; 1e-30 values lost 57% of their norm):
    // its bits are set too, so the block is scanned again in double. A block of zeros is not.
    const IntLanes tiny = (sq < FloatLanes{} + 0x1p-60f) &
                        ((zeros0 + zeros1) < IntLanes{} + int(kScanBlock / kLanes));
    const IntLanes bits = IntLanes(probe) | tiny;
    const auto bits8 = __builtin_shufflevector(bits, bits, 0, 1, 2, 3, 4, 5, 6, 7) |
                       __builtin_shufflevector(bits, bits, 8, 9, 10, 11, 12, 13, 14, 15);
    const auto bits4 = __builtin_shufflevector(bits8, bits8, 0, 1, 2, 3) | __builtin_shufflevector(bits8, bits8, 4, 5, 6, 7);
    if ((bits4[0] | bits4[1] | bits4[2] | bits4[3]) != 0) {
      scanRange(data, first, first + kScanBlock, shift, p);
      continue;
    }
    lo = blockLo;
    hi = blockHi;
    zeros += zeros0 + zeros1;
    fastValues += kScanBlock;
    s1Low += __builtin_convertvector(__builtin_shufflevector(s1, s1, 0, 1, 2, 3, 4, 5, 6, 7), DoubleLanes);
    s1High += __builtin_convertvector(__builtin_shufflevector(s1, s1, 8, 9, 10, 11, 12, 13, 14, 15), DoubleLanes);
    s2Low += __builtin_convertvector(__builtin_shufflevector(s2, s2, 0, 1, 2, 3, 4, 5, 6, 7), DoubleLanes);
    s2High += __builtin_convertvector(__builtin_shufflevector(s2, s2, 8, 9, 10, 11, 12, 13, 14, 15), DoubleLanes);
    sqLow += __builtin_convertvector(__builtin_shufflevector(sq, sq, 0, 1, 2, 3, 4, 5, 6, 7), DoubleLanes);
    sqHigh += __builtin_convertvector(__builtin_shufflevector(sq, sq, 8, 9, 10, 11, 12, 13, 14, 15), DoubleLanes);
  }
  for (int k = 0; k < kLanes; ++k) {
    p.min = std::min(p.min, double(lo[k]));
    p.max = std::max(p.max, double(hi[k]));
    p.zeros += zeros[k];
  }
  for (int k = 0; k < kLanes / 2; ++k) {
    p.shiftedSum += s1Low[k] + s1High[k];
    p.shiftedSumSq += s2Low[k] + s2High[k];
    p.sumSq += sqLow[k] + sqHigh[k];
  }
  p.finite += fastValues;
  if (first < end) scanRange(data, first, end, shift, p);  // fewer than one block left
}

// Where a value falls, clamped to [0, top]: written so that NaN lands at 0, never outside.
template <typename T>
inline T binPosition(T v, T low, T scale, T top) {
  T at = (v - low) * scale;
  at = at > T(0) ? at : T(0);
  return at < top ? at : top;
}

// The bin of a value, or `spare` (one past the last bin) for NaN and Inf.
template <typename T>
inline std::int32_t binIndex(T v, T low, T scale, T top, std::int32_t spare) {
  return std::fabs(v) <= std::numeric_limits<T>::max() ? std::int32_t(binPosition(v, low, scale, top)) : spare;
}

// Bin indices are computed branch-free and vectorized in the value's own precision (as
// torch.histc does); non-finite values go to a spare slot past the last bin. Then the
// increments are spread over four copies of the counts, so consecutive increments of one
// bin rarely wait on each other.
template <typename T>
void histogramLanes(const T* data, std::int64_t begin, std::int64_t end, T low, T scale, std::int64_t bins,
                    std::int64_t* counts) {
  constexpr std::int64_t kBlock = 2048;
  const std::int64_t stride = bins + 1;
  std::vector<std::int64_t> lanes(std::size_t(4 * stride), 0);
  std::int32_t index[kBlock];
  const T top = T(bins - 1);
  const auto spare = std::int32_t(bins);
  for (std::int64_t first = begin; first < end; first += kBlock) {
    const std::int64_t n = std::min(kBlock, end - first);
    const T* block = data + first;
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) {
      index[j] = binIndex(block[j], low, scale, top, spare);
    }
    std::int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      ++lanes[std::size_t(index[j])];
      ++lanes[std::size_t(stride + index[j + 1])];
      ++lanes[std::size_t(2 * stride + index[j + 2])];
      ++lanes[std::size_t(3 * stride + index[j + 3])];
    }
    for (; j < n; ++j) ++lanes[std::size_t(index[j])];
  }
  for (std::int64_t b = 0; b < bins; ++b) {
    counts[b] += lanes[std::size_t(b)] + lanes[std::size_t(stride + b)] + lanes[std::size_t(2 * stride + b)] +
                 lanes[std::size_t(3 * stride + b)];
  }
}

// The float32 histogram for up to 64 bins, which is what captures use. The scalar count
// increments are the cost, so each block's value k is paired with value k + half, and one
// increment of a (bin, bin) cell counts both: half the increments, in a table of 65 x 65
// cells (two copies, 33 KB, within L1) whose rows and columns are added into the bin counts
// at the end. The increments read no data, so while they run the next block is prefetched
// into L2: its bin indices are then computed from L2 instead of waiting on memory.
constexpr std::int64_t kPairMaxBins = 64;
constexpr std::int64_t kPairBlock = 4096;

HOOKSCOPE_SIMD_CLONES void histogramPairs(const float* data, std::int64_t begin, std::int64_t end, float low,
                                          float scale, std::int64_t bins, bool allFinite, std::int64_t* counts) {
  constexpr std::int64_t kHalf = kPairBlock / 2;
  constexpr std::int64_t kFlushBlocks = std::int64_t(1) << 20;  // keeps each uint32 cell below 2^30
  constexpr std::int64_t kLine = 64 / sizeof(float);             // values per cache line
  constexpr std::int64_t kPerLine = kHalf / (kPairBlock / kLine);  // increments per prefetched line
  static_assert(kPerLine % 2 == 0, "each prefetch is followed by whole pairs of increments");
  const auto stride = std::int32_t(bins + 1);
  const std::size_t cells = std::size_t(stride) * std::size_t(stride);
  std::vector<std::uint32_t> table(2 * cells, 0);
  alignas(64) std::int32_t pair[kHalf];
  const float top = float(bins - 1);
  const std::int32_t spare = stride - 1;
  // Cell (x, y) counts one value in bin x and one in bin y: row x and column x of both
  // copies add up to bin x's count. One pass in memory order.
  auto fold = [&] {
    std::vector<std::int64_t> rows(std::size_t(stride), 0), columns(std::size_t(stride), 0);
    for (std::size_t x = 0; x < std::size_t(stride); ++x) {
      const std::uint32_t* row = table.data() + x * std::size_t(stride);
      std::int64_t total = 0;
      for (std::size_t y = 0; y < std::size_t(stride); ++y) {
        const std::int64_t both = std::int64_t(row[y]) + row[cells + y];
        total += both;
        columns[y] += both;
      }
      rows[x] = total;
    }
    for (std::int64_t x = 0; x < bins; ++x) counts[x] += rows[std::size_t(x)] + columns[std::size_t(x)];
    std::fill(table.begin(), table.end(), 0u);
  };
  std::int64_t first = begin;
  for (std::int64_t blocks = 1; first + kPairBlock <= end; first += kPairBlock, ++blocks) {
    const float* a = data + first;
    const float* b = a + kHalf;
    if (allFinite) {
      // Every value is finite and at least low, so v - low >= 0 needs no lower clamp.
#pragma omp simd
      for (std::int64_t j = 0; j < kHalf; ++j) {
        pair[j] = std::int32_t(std::min((a[j] - low) * scale, top)) * stride +
                  std::int32_t(std::min((b[j] - low) * scale, top));
      }
    } else {
#pragma omp simd
      for (std::int64_t j = 0; j < kHalf; ++j) {
        pair[j] = binIndex(a[j], low, scale, top, spare) * stride + binIndex(b[j], low, scale, top, spare);
      }
    }
    const float* next = first + 2 * kPairBlock <= end ? a + kPairBlock : a;
    std::uint32_t* second = table.data() + cells;
    for (std::int64_t j = 0; j < kHalf; j += kPerLine) {
      __builtin_prefetch(next + j / kPerLine * kLine, 0, 2);  // into L2
      for (std::int64_t k = j; k < j + kPerLine; k += 2) {
        ++table[std::size_t(pair[k])];
        ++second[pair[k + 1]];
      }
    }
    if (blocks % kFlushBlocks == 0) fold();
  }
  fold();
  if (first < end) histogramLanes(data, first, end, low, scale, bins, counts);
}

#if HOOKSCOPE_ONE_HOT_KERNEL
// The float32 histogram on CPUs with AVX-512, for up to 64 bins when every value is finite.
// No counter is incremented per value. Each value becomes a one-hot word (bit b set for bin
// b, in a second word for bins 32-63), and the words are added up bit by bit: carry-save
// adders (the Harley-Seal method for positional population counts, two three-input logic
// instructions each) fold 16 vectors of words, 256 values, into one vector of "sixteens",
// whose bits are added into 8 bit planes: a binary counter, up to 255, per lane and bin.
// The planes become counts every 255 steps. It is all vector arithmetic, about 0.45 cycles
// per value, where the pair table is bound by one increment (a store) per two values, and
// its cost does not depend on the data: a tensor of equal values makes the pair table's
// increments wait on each other.
#define HOOKSCOPE_AVX512 __attribute__((target("avx512f")))
constexpr std::int64_t kOneHotMaxBins = 64;

struct OneHotConstants {
  __m512 low, scale, top;
  __m512i one, thirtyTwo;
  __m512i absMask, underFrom, underSpan, overFrom, overSpan;  // the low-precision test (PrecisionTest)
};

// The partial sums of one word stream: bit i of `ones` is the 1s digit of lane i's count.
struct BitSums {
  __m512i ones, twos, fours, eights;
};

// high and low become the carry and the sum bits of a + b + c.
HOOKSCOPE_AVX512 inline void carrySave(__m512i& high, __m512i& low, __m512i a, __m512i b, __m512i c) {
  high = _mm512_ternarylogic_epi32(a, b, c, 0xE8);  // majority
  low = _mm512_ternarylogic_epi32(a, b, c, 0x96);   // parity
}

// The one-hot words of 16 values: the shift by idx - 32 gives 0 for idx < 32, as the one by
// idx does for idx >= 32 (AVX-512 variable shifts give 0 past the word). The lanes whose value
// the low-precision counts must see are added to `hits`.
HOOKSCOPE_AVX512 inline void oneHot(const float* p, const OneHotConstants& c, __m512i& below32, __m512i& from32,
                                    __mmask16& hits) {
  const __m512 v = _mm512_loadu_ps(p);
  const __m512i a = _mm512_and_si512(_mm512_castps_si512(v), c.absMask);
  hits |= _mm512_cmplt_epu32_mask(_mm512_sub_epi32(a, c.underFrom), c.underSpan) |
          _mm512_cmplt_epu32_mask(_mm512_sub_epi32(a, c.overFrom), c.overSpan);
  const __m512 at = _mm512_min_ps(_mm512_mul_ps(_mm512_sub_ps(v, c.low), c.scale), c.top);
  const __m512i idx = _mm512_cvttps_epi32(at);
  below32 = _mm512_sllv_epi32(c.one, idx);
  from32 = _mm512_sllv_epi32(c.one, _mm512_sub_epi32(idx, c.thirtyTwo));
}

// Adds 64 values (four vectors per stream) into ones and twos; their fours carry comes out.
HOOKSCOPE_AVX512 inline void addSixtyFour(const float* p, const OneHotConstants& c, BitSums& lo, BitSums& hi,
                                          __m512i& foursLo, __m512i& foursHi, __mmask16& hits) {
  __m512i lo0, hi0, lo1, hi1, twosALo, twosAHi, twosBLo, twosBHi;
  oneHot(p, c, lo0, hi0, hits);
  oneHot(p + 16, c, lo1, hi1, hits);
  carrySave(twosALo, lo.ones, lo.ones, lo0, lo1);
  carrySave(twosAHi, hi.ones, hi.ones, hi0, hi1);
  oneHot(p + 32, c, lo0, hi0, hits);
  oneHot(p + 48, c, lo1, hi1, hits);
  carrySave(twosBLo, lo.ones, lo.ones, lo0, lo1);
  carrySave(twosBHi, hi.ones, hi.ones, hi0, hi1);
  carrySave(foursLo, lo.twos, lo.twos, twosALo, twosBLo);
  carrySave(foursHi, hi.twos, hi.twos, twosAHi, twosBHi);
}

// counts[firstBin + b] += weight for every set bit b of the 16 words.
void addSetBits(const __m512i& words, int firstBin, std::int64_t weight, std::int64_t* counts) {
  std::uint32_t w[16];
  std::memcpy(w, &words, sizeof w);
  for (const std::uint32_t word : w) {
    for (std::uint32_t x = word; x != 0; x &= x - 1) counts[firstBin + __builtin_ctz(x)] += weight;
  }
}

// With `scan`, each value is also tested for the low-precision counts as it is binned, and only
// a step of 256 values with something to count is counted (read again from the L1 cache).
HOOKSCOPE_AVX512 void histogramOneHot(const float* data, std::int64_t begin, std::int64_t end, float low, float scale,
                                      std::int64_t bins, std::int64_t* counts, PrecisionScan<float>* scan) {
  constexpr std::int64_t kStep = 256;
  constexpr int kPlanes = 8;
  constexpr int kStepsPerFlush = (1 << kPlanes) - 1;
  const PrecisionTest test = scan ? precisionTest(*scan) : PrecisionTest{};  // spans of 0: no lane hits
  const OneHotConstants c{_mm512_set1_ps(low),
                          _mm512_set1_ps(scale),
                          _mm512_set1_ps(float(bins - 1)),
                          _mm512_set1_epi32(1),
                          _mm512_set1_epi32(32),
                          _mm512_set1_epi32(int(test.absMask)),
                          _mm512_set1_epi32(int(test.underFrom)),
                          _mm512_set1_epi32(int(test.underSpan)),
                          _mm512_set1_epi32(int(test.overFrom)),
                          _mm512_set1_epi32(int(test.overSpan))};
  const __m512i zero = _mm512_setzero_si512();
  BitSums lo{zero, zero, zero, zero}, hi{zero, zero, zero, zero};
  __m512i planes[2][kPlanes];
  auto clearPlanes = [&] {
    for (auto& stream : planes) std::fill(std::begin(stream), std::end(stream), zero);
  };
  auto flushPlanes = [&] {
    for (int k = 0; k < kPlanes; ++k) {
      addSetBits(planes[0][k], 0, std::int64_t(16) << k, counts);
      addSetBits(planes[1][k], 32, std::int64_t(16) << k, counts);
    }
    clearPlanes();
  };
  clearPlanes();
  int steps = 0;
  std::int64_t first = begin;
  for (; first + kStep <= end; first += kStep) {
    const float* p = data + first;
    __m512i foursALo, foursAHi, foursBLo, foursBHi, eightsALo, eightsAHi, eightsBLo, eightsBHi, sixteensLo, sixteensHi;
    __mmask16 hits = 0;
    addSixtyFour(p, c, lo, hi, foursALo, foursAHi, hits);
    addSixtyFour(p + 64, c, lo, hi, foursBLo, foursBHi, hits);
    carrySave(eightsALo, lo.fours, lo.fours, foursALo, foursBLo);
    carrySave(eightsAHi, hi.fours, hi.fours, foursAHi, foursBHi);
    addSixtyFour(p + 128, c, lo, hi, foursALo, foursAHi, hits);
    addSixtyFour(p + 192, c, lo, hi, foursBLo, foursBHi, hits);
    carrySave(eightsBLo, lo.fours, lo.fours, foursALo, foursBLo);
    carrySave(eightsBHi, hi.fours, hi.fours, foursAHi, foursBHi);
    carrySave(sixteensLo, lo.eights, lo.eights, eightsALo, eightsBLo);
    carrySave(sixteensHi, hi.eights, hi.eights, eightsAHi, eightsBHi);
    __m512i carryLo = sixteensLo, carryHi = sixteensHi;
    for (int k = 0; k < kPlanes; ++k) {
      const __m512i nextLo = _mm512_and_si512(planes[0][k], carryLo);
      const __m512i nextHi = _mm512_and_si512(planes[1][k], carryHi);
      planes[0][k] = _mm512_xor_si512(planes[0][k], carryLo);
      planes[1][k] = _mm512_xor_si512(planes[1][k], carryHi);
      carryLo = nextLo;
      carryHi = nextHi;
    }
    if (hits) countBlock(data, first, first + kStep, *scan);
    if (++steps == kStepsPerFlush) {
      flushPlanes();
      steps = 0;
    }
  }
  flushPlanes();
  const __m512i* digits[2][4] = {{&lo.ones, &lo.twos, &lo.fours, &lo.eights}, {&hi.ones, &hi.twos, &hi.fours, &hi.eights}};
  for (int k = 0; k < 4; ++k) {
    addSetBits(*digits[0][k], 0, std::int64_t(1) << k, counts);
    addSetBits(*digits[1][k], 32, std::int64_t(1) << k, counts);
  }
  if (first < end) {
    histogramLanes(data, first, end, low, scale, bins, counts);
    if (scan) countPrecision(data, first, end, *scan);
  }
}

#endif

} // namespace

bool hasOneHotKernel() {
#if HOOKSCOPE_ONE_HOT_KERNEL
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

BinPlan binPlan(double low, double high, std::int64_t bins, bool floatValues) {
  constexpr double floatMax = std::numeric_limits<float>::max();
  constexpr double doubleMax = std::numeric_limits<double>::max();
  const double span = high - low;
  BinPlan plan;
  if (floatValues) {
    plan.scale = double(bins) / (span > 0 ? span : 1.0);
    plan.own = span <= floatMax && plan.scale <= floatMax && plan.scale >= double(std::numeric_limits<float>::min());
    return plan;
  }
  plan.k = span <= doubleMax ? 1.0 : 0.5;
  plan.own = plan.k == 1.0;
  plan.scale = double(bins) / (span > 0 ? high * plan.k - low * plan.k : 1.0);
  return plan;
}

template <typename T>
void histogramWide(const T* data, std::int64_t begin, std::int64_t end, double low, double scale, double k,
                   std::int64_t bins, std::int64_t* counts) {
  const double top = double(bins - 1);
  const double lowK = low * k;
  for (std::int64_t i = begin; i < end; ++i) {
    const double v = double(data[i]);
    if (std::fabs(v) <= std::numeric_limits<double>::max()) ++counts[std::int64_t(binPosition(v * k, lowK, scale, top))];
  }
}

template <typename T>
void scanValues(const T* data, std::int64_t begin, std::int64_t end, double shift, Partial& p) {
  if constexpr (std::is_same_v<T, float>) {
    scanRangeFast(data, begin, end, shift, p);
  } else {
    scanRange(data, begin, end, shift, p);
  }
}

template <typename T>
void histogramValues(const T* data, std::int64_t begin, std::int64_t end, double low, double scale,
                    std::int64_t bins, bool allFinite, std::int64_t* counts,
                    [[maybe_unused]] HistogramKernel kernel, PrecisionScan<T>* scan) {
  if constexpr (std::is_same_v<T, float>) {
#if HOOKSCOPE_ONE_HOT_KERNEL
    if (kernel == HistogramKernel::Best && allFinite && bins <= kOneHotMaxBins && hasOneHotKernel()) {
      histogramOneHot(data, begin, end, float(low), float(scale), bins, counts, scan);
      return;
    }
#endif
  }
  // Slice by slice, each counted again while it is in the cache.
  const std::int64_t slice = scan ? kCountSlice : end - begin;
  for (std::int64_t first = begin; first < end; first += slice) {
    const std::int64_t last = std::min(end, first + slice);
    if constexpr (std::is_same_v<T, float>) {
      if (bins <= kPairMaxBins && last - first >= 8 * kPairBlock) {
        histogramPairs(data, first, last, float(low), float(scale), bins, allFinite, counts);
      } else {
        histogramLanes(data, first, last, T(low), T(scale), bins, counts);
      }
    } else {
      histogramLanes(data, first, last, T(low), T(scale), bins, counts);
    }
    if (scan) countPrecision(data, first, last, *scan);
  }
}

template void scanValues<float>(const float*, std::int64_t, std::int64_t, double, Partial&);
template void scanValues<double>(const double*, std::int64_t, std::int64_t, double, Partial&);
template void histogramWide<float>(const float*, std::int64_t, std::int64_t, double, double, double, std::int64_t,
                                   std::int64_t*);
template void histogramWide<double>(const double*, std::int64_t, std::int64_t, double, double, double, std::int64_t,
                                    std::int64_t*);
template void histogramValues<float>(const float*, std::int64_t, std::int64_t, double, double, std::int64_t, bool,
                                     std::int64_t*, HistogramKernel, PrecisionScan<float>*);
template void histogramValues<double>(const double*, std::int64_t, std::int64_t, double, double, std::int64_t, bool,
                                      std::int64_t*, HistogramKernel, PrecisionScan<double>*);

} // namespace hookscope::kernels
