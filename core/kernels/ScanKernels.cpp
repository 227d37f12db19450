// The statistics' first pass: min, max, the shifted moments and the counts of a range of
// values (scanValues), a careful scan for any values and a fast one for finite float32 blocks.

#include "kernels/StatsKernels.h"

#include "kernels/SimdClones.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

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
// times faster than the careful scan. Each quantity is kept in 16 lanes, so the loop has no
// horizontal reduction: one AVX-512 register, two AVX2 or four SSE2 ones (W lanes each,
// written with GCC's vector extensions). A vector wider than the machine's registers is not
// split by GCC 12 but done value by value through the stack (20 times slower on a CPU without
// AVX-512), so the 16 lanes are 16 / W vectors of the width each instruction set has, and
// every lane adds the same values in the same order whichever it is. It takes two sets of 16
// values per iteration into two sets of accumulators, so no iteration waits on the previous
// one's additions. Blocks of 1024 values (64 per lane) are summed in float, then their lanes
// are widened and added to double lanes, all in registers. The relative rounding error of a
// block's sum of squares is below 64 * 2^-24 = 4e-6 even in the worst case, inside the 1e-5
// parity tolerance, and about 1e-8 typically. A NaN or Inf in a block makes its sums or bounds
// non-finite; that block is scanned again carefully.
constexpr int kLanes = 16;
constexpr std::int64_t kScanBlock = 64 * kLanes;
constexpr std::int64_t kFastTailMin = 128;  // below it, padding a block costs more than the careful scan
static_assert(kPartAlign % kScanBlock == 0, "parts start on whole scan blocks");

template <int W>
struct Lanes {
  static constexpr int kParts = kLanes / W;
  typedef float F __attribute__((vector_size(4 * W)));
  typedef std::int32_t I __attribute__((vector_size(4 * W)));
  typedef float Half __attribute__((vector_size(2 * W)));
  typedef double D __attribute__((vector_size(4 * W)));  // W / 2 of them
};

// Adds a float vector's lanes, widened, to two double vectors (its low and its high half).
template <int W>
[[gnu::always_inline]] inline void widenAdd(const typename Lanes<W>::F& v, typename Lanes<W>::D& low,
                                            typename Lanes<W>::D& high) {
  typename Lanes<W>::Half a, b;
  std::memcpy(&a, &v, sizeof a);
  std::memcpy(&b, reinterpret_cast<const char*>(&v) + sizeof a, sizeof b);
  low += __builtin_convertvector(a, typename Lanes<W>::D);
  high += __builtin_convertvector(b, typename Lanes<W>::D);
}

// The scan's running lanes: 16 of each quantity in P vectors; the sums' double lanes are each
// vector's low and high halves.
template <int W>
struct ScanLanes {
  static constexpr int P = Lanes<W>::kParts;
  typename Lanes<W>::F lo[P], hi[P];
  typename Lanes<W>::I zeros[P];
  typename Lanes<W>::D s1Low[P], s1High[P], s2Low[P], s2High[P], sqLow[P], sqHigh[P];

  ScanLanes() {
    for (int q = 0; q < P; ++q) {
      lo[q] = typename Lanes<W>::F{} + std::numeric_limits<float>::infinity();
      hi[q] = -lo[q];
      zeros[q] = typename Lanes<W>::I{};
      s1Low[q] = s1High[q] = s2Low[q] = s2High[q] = sqLow[q] = sqHigh[q] = typename Lanes<W>::D{};
    }
  }
};

// One block of kScanBlock values into `lanes`; false, leaving them as they were, where the block
// holds a NaN or Inf or may have lost squares (it is then scanned carefully).
// How many of vector q's lanes' positions in a block are padding past `count` values: lane k
// holds positions k, k + 16, k + 32, ...
template <int W>
[[gnu::always_inline]] inline void countPadding(typename Lanes<W>::I& padding, int q, std::int64_t count) {
  for (int i = 0; i < W; ++i) {
    const std::int64_t lane = q * W + i;
    padding[i] = std::int32_t(kScanBlock / kLanes - (count > lane ? (count - lane + kLanes - 1) / kLanes : 0));
  }
}

// Tail: the block holds `count` values (fewer than kScanBlock) and, past them, copies of the shift;
// keep[i] is -1 for a value and 0 for padding (a tensor too small for a whole block is read as
// fast as one: a capture of 512 values took twice as long in the careful scan). A padding value
// adds nothing to the shifted sums and lies between the tensor's min and max (the shift is one of
// its values); its square and its place in the zero count are masked away, and the test of lost
// squares counts it as a zero (a lane of zeros and padding is not scanned again).
template <int W, bool Tail = false>
[[gnu::always_inline]] inline bool scanBlock(const float* block, float shift, ScanLanes<W>& lanes,
                                             const std::int32_t* keep = nullptr, std::int64_t count = kScanBlock) {
  using F = typename Lanes<W>::F;
  using I = typename Lanes<W>::I;
  constexpr int P = Lanes<W>::kParts;
  const F shifts = F{} + shift;
  const F zero = F{};
  F lo0[P], hi0[P], lo1[P], hi1[P], s10[P], s11[P], s20[P], s21[P], sq0[P], sq1[P];
  I zeros0[P], zeros1[P];
  for (int q = 0; q < P; ++q) {
    lo0[q] = lo1[q] = lanes.lo[q];
    hi0[q] = hi1[q] = lanes.hi[q];
    s10[q] = s11[q] = s20[q] = s21[q] = sq0[q] = sq1[q] = zero;
    zeros0[q] = zeros1[q] = I{};
  }
  for (std::int64_t j = 0; j < kScanBlock; j += 2 * kLanes) {
    for (int q = 0; q < P; ++q) {
      F v, w;
      std::memcpy(&v, block + j + q * W, sizeof v);  // unaligned loads
      std::memcpy(&w, block + j + kLanes + q * W, sizeof w);
      const F dv = v - shifts, dw = w - shifts;
      lo0[q] = v < lo0[q] ? v : lo0[q];
      lo1[q] = w < lo1[q] ? w : lo1[q];
      hi0[q] = v > hi0[q] ? v : hi0[q];
      hi1[q] = w > hi1[q] ? w : hi1[q];
      s10[q] += dv;
      s11[q] += dw;
      s20[q] += dv * dv;
      s21[q] += dw * dw;
      if constexpr (Tail) {
        // Masks read from memory: GCC 12 made a mask computed here (a comparison of positions)
        // value by value, slower than the careful scan.
        I keepV, keepW;
        std::memcpy(&keepV, keep + j + q * W, sizeof keepV);
        std::memcpy(&keepW, keep + j + kLanes + q * W, sizeof keepW);
        sq0[q] += F(I(v * v) & keepV);
        sq1[q] += F(I(w * w) & keepW);
        zeros0[q] = v == zero ? zeros0[q] - keepV : zeros0[q];
        zeros1[q] = w == zero ? zeros1[q] - keepW : zeros1[q];
      } else {
        sq0[q] += v * v;
        sq1[q] += w * w;
        zeros0[q] = v == zero ? zeros0[q] + 1 : zeros0[q];
        zeros1[q] = w == zero ? zeros1[q] + 1 : zeros1[q];
      }
    }
  }
  F s1[P], s2[P], sq[P], blockLo[P], blockHi[P];
  I bits = I{};
  for (int q = 0; q < P; ++q) {
    s1[q] = s10[q] + s11[q];
    s2[q] = s20[q] + s21[q];
    sq[q] = sq0[q] + sq1[q];
    blockLo[q] = lo0[q] < lo1[q] ? lo0[q] : lo1[q];
    blockHi[q] = hi0[q] > hi1[q] ? hi0[q] : hi1[q];
    // x - x is +0 for finite x, NaN for NaN and Inf: the probe's bits are all zero only when
    // every lane of every quantity is finite. They are OR-folded in registers.
    const F probe = (s1[q] - s1[q]) + (s2[q] - s2[q]) + (sq[q] - sq[q]) + (blockLo[q] - blockLo[q]) +
                    (blockHi[q] - blockHi[q]);
    // A lane whose float squares sum below 2^-60 while it holds a non-zero value may have lost
    // squares below float's normal range (|v| < 2^-63; 1e-30 values lost 57% of their norm):
    // its bits are set too, so the block is scanned again in double. A block of zeros is not.
    I padding{};
    if constexpr (Tail) countPadding<W>(padding, q, count);
    const I tiny = (sq[q] < F{} + 0x1p-60f) & ((zeros0[q] + zeros1[q] + padding) < I{} + int(kScanBlock / kLanes));
    bits |= I(probe) | tiny;
  }
  std::int32_t any = 0;
  for (int k = 0; k < W; ++k) any |= bits[k];
  if (any != 0) return false;
  for (int q = 0; q < P; ++q) {
    lanes.lo[q] = blockLo[q];
    lanes.hi[q] = blockHi[q];
    lanes.zeros[q] += zeros0[q] + zeros1[q];
    widenAdd<W>(s1[q], lanes.s1Low[q], lanes.s1High[q]);
    widenAdd<W>(s2[q], lanes.s2Low[q], lanes.s2High[q]);
    widenAdd<W>(sq[q], lanes.sqLow[q], lanes.sqHigh[q]);
  }
  return true;
}

// The lanes into p, lane by lane in the order of 16 lanes (lane k is vector k / W's lane k % W).
template <int W>
[[gnu::always_inline]] inline void foldLanes(const ScanLanes<W>& lanes, Partial& p) {
  double s1[kLanes], s2[kLanes], sq[kLanes];
  for (int k = 0; k < kLanes; ++k) {
    const int q = k / W, i = k % W;
    p.min = std::min(p.min, double(lanes.lo[q][i]));
    p.max = std::max(p.max, double(lanes.hi[q][i]));
    p.zeros += lanes.zeros[q][i];
    const bool low = i < W / 2;
    s1[k] = low ? lanes.s1Low[q][i] : lanes.s1High[q][i - W / 2];
    s2[k] = low ? lanes.s2Low[q][i] : lanes.s2High[q][i - W / 2];
    sq[k] = low ? lanes.sqLow[q][i] : lanes.sqHigh[q][i - W / 2];
  }
  for (int k = 0; k < kLanes / 2; ++k) {
    p.shiftedSum += s1[k] + s1[k + kLanes / 2];
    p.shiftedSumSq += s2[k] + s2[k + kLanes / 2];
    p.sumSq += sq[k] + sq[k + kLanes / 2];
  }
}

template <int W>
[[gnu::always_inline]] inline void scanBlocks(const float* data, std::int64_t begin, std::int64_t end, double shift,
                                              Partial& p) {
  ScanLanes<W> lanes;
  std::int64_t fastValues = 0;
  std::int64_t first = begin;
  for (; first + kScanBlock <= end; first += kScanBlock) {
    if (scanBlock<W>(data + first, float(shift), lanes)) {
      fastValues += kScanBlock;
    } else {
      scanRange(data, first, first + kScanBlock, shift, p);
    }
  }
  // Fewer than one block left: read as one (padded), unless so few that the careful scan is quicker.
  bool tailFast = false;
  if (end - first >= kFastTailMin) {
    alignas(64) float tail[kScanBlock];
    alignas(64) std::int32_t keep[kScanBlock];
    const std::int64_t count = end - first;
    std::memcpy(tail, data + first, std::size_t(count) * sizeof(float));
    std::fill(tail + count, tail + kScanBlock, float(shift));
    std::fill(keep, keep + count, -1);
    std::fill(keep + count, keep + kScanBlock, 0);
    tailFast = scanBlock<W, true>(tail, float(shift), lanes, keep, count);
    if (tailFast) fastValues += count;
  }
  foldLanes<W>(lanes, p);
  p.finite += fastValues;
  if (first < end && !tailFast) scanRange(data, first, end, shift, p);
}

#if HOOKSCOPE_LANE_DISPATCH
// Each instruction set's registers, chosen once by what the CPU has (as target_clones would,
// but with a lane width of its own).
[[gnu::target("arch=x86-64-v4")]] void scanBlocks512(const float* data, std::int64_t begin, std::int64_t end,
                                                    double shift, Partial& p) {
  scanBlocks<16>(data, begin, end, shift, p);
}
[[gnu::target("arch=x86-64-v3")]] void scanBlocks256(const float* data, std::int64_t begin, std::int64_t end,
                                                    double shift, Partial& p) {
  scanBlocks<8>(data, begin, end, shift, p);
}
void scanBlocks128(const float* data, std::int64_t begin, std::int64_t end, double shift, Partial& p) {
  scanBlocks<4>(data, begin, end, shift, p);
}

using ScanFn = void (*)(const float*, std::int64_t, std::int64_t, double, Partial&);

ScanFn chooseScan() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return scanBlocks512;
  if (__builtin_cpu_supports("x86-64-v3")) return scanBlocks256;
  return scanBlocks128;
}

// The one chosen for this CPU (chosen at the first call).
ScanFn chosenScan() {
  static const ScanFn scan = chooseScan();
  return scan;
}

void scanRangeFast(const float* data, std::int64_t begin, std::int64_t end, double shift, Partial& p) {
  chosenScan()(data, begin, end, shift, p);
}
#else
void scanRangeFast(const float* data, std::int64_t begin, std::int64_t end, double shift, Partial& p) {
  scanBlocks<kLanes>(data, begin, end, shift, p);
}
#endif

} // namespace

const char* scanRegisters() {
#if HOOKSCOPE_LANE_DISPATCH
  const ScanFn scan = chosenScan();
  return scan == scanBlocks512 ? "AVX-512" : scan == scanBlocks256 ? "AVX2" : "SSE2";
#else
  return "generic";
#endif
}

template <typename T>
void scanValues(const T* data, std::int64_t begin, std::int64_t end, double shift, Partial& p) {
  if constexpr (std::is_same_v<T, float>) {
    scanRangeFast(data, begin, end, shift, p);
  } else {
    scanRange(data, begin, end, shift, p);
  }
}

template void scanValues<float>(const float*, std::int64_t, std::int64_t, double, Partial&);
template void scanValues<double>(const double*, std::int64_t, std::int64_t, double, Partial&);

} // namespace hookscope::kernels
