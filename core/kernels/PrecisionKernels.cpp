#include "kernels/PrecisionKernels.h"

#include "kernels/SimdClones.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace hookscope::kernels {

template <typename T>
T flushBelow(double amax, Fp8Format format) {
  const double edge = amax * format.smallestSubnormal;
  if (!(edge > 0)) return T(0);
  const auto reaches = [&](T w) { return double(w) * format.largest >= edge; };
  // The quotient rounded to T is within two units in the last place of the answer.
  T w = T(edge / format.largest);
  while (w > T(0) && reaches(std::nextafter(w, T(0)))) w = std::nextafter(w, T(0));
  while (!reaches(w)) w = std::nextafter(w, std::numeric_limits<T>::infinity());
  return w;
}

namespace {

template <typename T>
struct BitsOf;
template <>
struct BitsOf<float> {
  using type = std::uint32_t;
};
template <>
struct BitsOf<double> {
  using type = std::uint64_t;
};

template <typename T>
typename BitsOf<T>::type bitsOf(T v) {
  typename BitsOf<T>::type bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

// The test on the bits of |v| (see PrecisionTest), in T's width.
template <typename T>
struct BitsTest {
  using Bits = typename BitsOf<T>::type;
  static constexpr Bits absMask = std::numeric_limits<Bits>::max() >> 1;
  Bits underFrom = 1, underSpan = 0, overFrom = 0, overSpan = 0;

  explicit BitsTest(const PrecisionScan<T>& scan) {
    // 0 < |v| < below: |v| - 1 < below - 1, unsigned (0 wraps round to the largest).
    underSpan = bitsOf(std::max({T(0x1p-24), scan.e4m3Below, scan.e5m2Below})) - 1;
    if (!(scan.amax <= 65504.0)) {  // else no finite value is past float16's largest
      overFrom = bitsOf(T(65504)) + 1;
      overSpan = bitsOf(std::numeric_limits<T>::infinity()) - overFrom;
    }
  }
};

// Every count of a range: comparisons of |v| only, branch-free (`&`, not `&&`, and 32-bit sums:
// each made the loop several times slower); NaN compares false everywhere.
template <typename T>
[[gnu::always_inline]] inline bool countEvery(const T* data, std::int64_t first, std::int64_t last,
                                              PrecisionScan<T>& scan) {
  constexpr T f16Largest = T(65504), f16Subnormal = T(0x1p-24), inf = std::numeric_limits<T>::infinity();
  const T e4m3Below = scan.e4m3Below, e5m2Below = scan.e5m2Below;
  std::int32_t over = 0, under = 0, e4m3 = 0, e5m2 = 0;
#pragma omp simd reduction(+ : over, under, e4m3, e5m2)
  for (std::int64_t i = first; i < last; ++i) {
    const T a = std::fabs(data[i]);
    const bool nonzero = a > T(0);
    over += (a > f16Largest) & (a < inf);
    under += nonzero & (a < f16Subnormal);
    e4m3 += nonzero & (a < e4m3Below);
    e5m2 += nonzero & (a < e5m2Below);
  }
  scan.counts.f16Overflow += over;
  scan.counts.f16Underflow += under;
  scan.counts.e4m3Underflow += e4m3;
  scan.counts.e5m2Underflow += e5m2;
  return (over | under | e4m3 | e5m2) != 0;
}

// Most blocks hold nothing to count: one test a value on the bits of |v| finds them, and only a
// block with something is counted. After such a block the next is counted at once, so a tensor
// full of tiny values pays little for the tests.
template <typename T>
[[gnu::always_inline]] inline void countPrecisionLoop(const T* data, std::int64_t begin, std::int64_t end,
                                                      PrecisionScan<T>& scan) {
  using Bits = typename BitsOf<T>::type;
  constexpr std::int64_t kBlock = 256;  // also keeps each block's 32-bit sums far from overflowing
  const BitsTest<T> test(scan);
  bool dense = false;
  for (std::int64_t first = begin; first < end; first += kBlock) {
    const std::int64_t last = std::min(end, first + kBlock);
    if (!dense) {
      Bits hit = 0;
#pragma omp simd reduction(| : hit)
      for (std::int64_t i = first; i < last; ++i) {
        Bits a;
        std::memcpy(&a, data + i, sizeof a);  // the value's bits (a load: no aliasing of T by Bits)
        a &= BitsTest<T>::absMask;
        hit |= Bits((a - test.underFrom) < test.underSpan) | Bits((a - test.overFrom) < test.overSpan);
      }
      if (!hit) continue;
    }
    dense = countEvery(data, first, last, scan);
  }
}

HOOKSCOPE_SIMD_CLONES void countPrecisionFloat(const float* data, std::int64_t begin, std::int64_t end,
                                               PrecisionScan<float>& scan) {
  countPrecisionLoop(data, begin, end, scan);
}

HOOKSCOPE_SIMD_CLONES void countPrecisionDouble(const double* data, std::int64_t begin, std::int64_t end,
                                                PrecisionScan<double>& scan) {
  countPrecisionLoop(data, begin, end, scan);
}

} // namespace

template <typename T>
void countPrecision(const T* data, std::int64_t begin, std::int64_t end, PrecisionScan<T>& scan) {
  if constexpr (std::is_same_v<T, float>) {
    countPrecisionFloat(data, begin, end, scan);
  } else {
    countPrecisionDouble(data, begin, end, scan);
  }
}

PrecisionTest precisionTest(const PrecisionScan<float>& scan) {
  const BitsTest<float> bits(scan);
  PrecisionTest test;
  test.underFrom = bits.underFrom;
  test.underSpan = bits.underSpan;
  test.overFrom = bits.overFrom;
  test.overSpan = bits.overSpan;
  return test;
}

template <typename T>
bool countBlock(const T* data, std::int64_t first, std::int64_t last, PrecisionScan<T>& scan) {
  return countEvery(data, first, last, scan);
}

template float flushBelow<float>(double, Fp8Format);
template double flushBelow<double>(double, Fp8Format);
template void countPrecision<float>(const float*, std::int64_t, std::int64_t, PrecisionScan<float>&);
template void countPrecision<double>(const double*, std::int64_t, std::int64_t, PrecisionScan<double>&);
template bool countBlock<float>(const float*, std::int64_t, std::int64_t, PrecisionScan<float>&);
template bool countBlock<double>(const double*, std::int64_t, std::int64_t, PrecisionScan<double>&);

} // namespace hookscope::kernels
