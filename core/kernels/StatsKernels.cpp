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

// Where a value falls, clamped to [0, top]: written so that NaN lands at 0, never outside.
template <typename T>
inline T binPosition(T v, T low, T scale, T top) {
  T at = (v - low) * scale;
  at = at > T(0) ? at : T(0);
  return at < top ? at : top;
}

// The bin of a value, or `spare` (one past the last bin) for NaN and Inf. The position is in
// [0, top] for every value, NaN and Inf too, so it is converted whatever the value: a select
// after it, where a conversion under the condition kept the loops from vectorizing (a branch a
// value).
template <typename T>
inline std::int32_t binIndex(T v, T low, T scale, T top, std::int32_t spare) {
  const auto at = std::int32_t(binPosition(v, low, scale, top));
  return std::fabs(v) <= std::numeric_limits<T>::max() ? at : spare;
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
void histogramValues(const T* data, std::int64_t begin, std::int64_t end, double low, double scale,
                    std::int64_t bins, bool allFinite, std::int64_t* counts,
                    [[maybe_unused]] HistogramKernel kernel, PrecisionScan<T>* scan) {
  if constexpr (std::is_same_v<T, float>) {
#if HOOKSCOPE_ONE_HOT_KERNEL
    const bool oneHot = kernel == HistogramKernel::OneHot || (kernel == HistogramKernel::Best && end - begin >= kOneHotMin);
    if (oneHot && allFinite && bins <= kOneHotMaxBins && hasOneHotKernel()) {
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

template void histogramWide<float>(const float*, std::int64_t, std::int64_t, double, double, double, std::int64_t,
                                   std::int64_t*);
template void histogramWide<double>(const double*, std::int64_t, std::int64_t, double, double, double, std::int64_t,
                                    std::int64_t*);
template void histogramValues<float>(const float*, std::int64_t, std::int64_t, double, double, std::int64_t, bool,
                                     std::int64_t*, HistogramKernel, PrecisionScan<float>*);
template void histogramValues<double>(const double*, std::int64_t, std::int64_t, double, double, std::int64_t, bool,
                                      std::int64_t*, HistogramKernel, PrecisionScan<double>*);

} // namespace hookscope::kernels
