// The CUDA statistics kernels (python/hookscope/stats_kernels.cu), their own source compiled as
// host C++ against CudaEmulation.h, against HookScope's CPU kernel (min, max, amax, counts,
// histogram: exactly) and float64 sums (moments); and the one-read decisions: a series binned
// between its previous edges where this step's values allow it, read again where not.

#include "CudaEmulation.h"

#include "hookscope/stats_kernels.cu"

#include "kernels/RawStats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

namespace {

using hookscope::SharedRange;
using hookscope::TensorStats;

constexpr int kBins = 64;
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

template <typename IN>
using Work = std::conditional_t<std::is_same_v<IN, hs_bf16> || std::is_same_v<IN, hs_half> ||
                                    std::is_same_v<IN, float>,
                                float, double>;

// One stream's scratch, reused by every capture as on a GPU.
struct Stream {
  std::vector<hs_u64> scratch = std::vector<hs_u64>(HS_SCRATCH_WORDS, 0);
};

struct Outcome {
  std::vector<double> row;
  bool reread = false;
};

// Moments summed in float64 throughout (a read with no forecast, a re-read, float64 and integer
// values), and from float32 sums per load (the common path of a one-read row of float16, bfloat16
// and float32 values; docs/export-format.md), which the CPU kernel's float blocks are held to too.
constexpr long double kFloat64Sums = 1e-9L, kFloat32Sums = 1e-6L;

void expectClose(double got, long double want, long double scale, const char* what, long double tolerance = kFloat64Sums) {
  EXPECT_LE(std::fabs((long double)got - want), tolerance * scale + 1e-300L) << what << ": " << got << " vs " << double(want);
}

// The kernels as _cuda_stats.py launches them (fewer threads a block, for speed), both ways: the
// read, then the re-read (which returns at once unless the read asked for it); and the read alone
// in one launch that reads again itself where needed (its blocks all running at once, as in a
// cooperative launch; not for one-byte values). Both are run on copies of the stream and slot:
// rows, slots and scratch must come out the same (the moments to float64's rounding, their sums
// folded over other grids), and the two-launch outcome is returned.
template <typename IN>
Outcome runOneWay(Stream& stream, const IN* x, std::int64_t n, double* slot, unsigned threads, unsigned blocks,
                  int bins, bool oneLaunch) {
  Outcome out;
  out.row.assign(std::size_t(HS_HEADER + bins), -7.0);
  const int copies = std::max(1, std::min(int(threads / 32), 40960 / (4 * (bins + 1))));
  const std::size_t shared = 32 * HS_FIELDS * 8 + 16 + std::size_t(copies) * std::size_t(bins + 1) * 4;
  double* row = out.row.data();
  hs_u64* scratch = stream.scratch.data();
  const int wait = oneLaunch ? 1 : 0;
  hs_emulation::launch(
      blocks, threads, shared, [&] { hs_read<IN, Work<IN>>(x, n, bins, copies, row, slot, scratch, wait); }, oneLaunch);
  out.reread = oneLaunch ? stream.scratch[HS_READS_TWO] != 0 : stream.scratch[HS_REREAD] != 0;
  if (oneLaunch) return out;
  // The re-read's grid is smaller (two blocks a multiprocessor, not three), as _cuda_stats launches it.
  hs_emulation::launch(std::max(1u, blocks - 1), threads, shared,
                       [&] { hs_reread<IN, Work<IN>>(x, n, bins, copies, row, scratch); });
  return out;
}

template <typename IN>
Outcome run(Stream& stream, const IN* x, std::int64_t n, double* slot, unsigned threads = 64, unsigned blocks = 3,
            int bins = kBins) {
  if (sizeof(IN) == 1) return runOneWay(stream, x, n, slot, threads, blocks, bins, false);  // always two launches
  std::vector<double> slotCopy;
  if (slot) slotCopy.assign(slot, slot + HS_SLOT_WORDS);
  Stream alone = stream;
  alone.scratch[HS_READS_ONE] = alone.scratch[HS_READS_TWO] = 0;
  const Outcome out = runOneWay(stream, x, n, slot, threads, blocks, bins, false);
  const Outcome once = runOneWay(alone, x, n, slot ? slotCopy.data() : nullptr, threads, blocks, bins, true);
  EXPECT_EQ(once.reread, out.reread) << "one launch and two disagree on reading again";
  for (std::size_t i = 0; i < out.row.size(); ++i) {
    if ((std::isnan(out.row[i]) && std::isnan(once.row[i])) || once.row[i] == out.row[i]) continue;
    if (i == HS_ROW_MEAN || i == HS_ROW_STD || i == HS_ROW_L2) {
      // A re-read in the read's launch has the read's grid, more blocks than a re-read launch: its
      // float64 sums are folded in another order.
      const double scale = i == HS_ROW_MEAN ? std::max(std::fabs(out.row[i]), out.row[HS_ROW_STD]) : std::fabs(out.row[i]);
      expectClose(once.row[i], out.row[i], scale, "one launch's moments");
    } else {
      EXPECT_EQ(once.row[i], out.row[i]) << "row field " << i;
    }
  }
  for (int i = 0; slot && i < HS_SLOT_WORDS; ++i) EXPECT_EQ(slotCopy[std::size_t(i)], slot[i]) << "slot word " << i;
  for (int i = 0; i < HS_HIST + bins; ++i) {
    if (i != HS_READS_ONE && i != HS_READS_TWO && i != HS_REREAD) {
      EXPECT_EQ(alone.scratch[std::size_t(i)], 0u) << "scratch word " << i << " after one launch";
    }
  }
  return out;
}

// The CPU kernel's statistics of the same values (in the same working precision).
template <typename W>
TensorStats reference(const std::vector<W>& values, const SharedRange* range = nullptr, int bins = kBins) {
  TensorStats s;
  if (range) {
    hookscope::computeRawStatsInRange(values.data(), std::int64_t(values.size()), bins, hookscope::StatsCores::One,
                                      *range, s);
  } else {
    hookscope::computeRawStats(values.data(), std::int64_t(values.size()), bins, hookscope::StatsCores::One, s);
  }
  return s;
}

void expectSame(double got, double want, const char* what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": " << got;
  } else {
    EXPECT_EQ(got, want) << what;
  }
}

// Mean, std (n-1) and L2 of the finite values, in long double.
struct Moments {
  long double mean = 0, std = 0, l2 = 0;
  std::int64_t finite = 0;
};
template <typename W>
Moments exactMoments(const std::vector<W>& values) {
  Moments m;
  long double sum = 0, squares = 0;
  for (W v : values) {
    if (!std::isfinite(double(v))) continue;
    sum += v;
    squares += (long double)v * v;
    ++m.finite;
  }
  if (!m.finite) return m;
  m.mean = sum / m.finite;
  long double centred = 0;
  for (W v : values) {
    if (std::isfinite(double(v))) centred += ((long double)v - m.mean) * ((long double)v - m.mean);
  }
  m.std = m.finite > 1 ? std::sqrt(centred / (m.finite - 1)) : 0;
  m.l2 = std::sqrt(squares);
  return m;
}


// Every field of a row against the CPU kernel's statistics and the exact moments.
// moments false: values whose squares are past float64's range, where no backend's moments mean
// anything (only the bin plan is under test).
template <typename W>
void expectRow(const std::vector<double>& row, const std::vector<W>& values, const TensorStats& s,
               bool moments = true, long double tolerance = kFloat64Sums) {
  expectSame(row[0], s.min, "min");
  expectSame(row[1], s.max, "max");
  expectSame(row[10], s.amax, "amax");
  expectSame(row[5], s.zeroFraction, "zero fraction");
  EXPECT_EQ(row[6], double(s.nanCount));
  EXPECT_EQ(row[7], double(s.infCount));
  EXPECT_EQ(row[8], s.histLow);
  EXPECT_EQ(row[9], s.histHigh);
  EXPECT_EQ(row[11], double(s.f16Overflow));
  EXPECT_EQ(row[12], double(s.f16Underflow));
  EXPECT_EQ(row[13], double(s.e4m3Underflow));
  EXPECT_EQ(row[14], double(s.e5m2Underflow));
  for (std::size_t b = 0; b < s.histogram.size(); ++b) EXPECT_EQ(row[HS_HEADER + b], double(s.histogram[b])) << "bin " << b;
  const Moments m = exactMoments(values);
  if (!moments) return;
  if (m.finite == 0) {
    expectSame(row[2], s.mean, "mean");
    expectSame(row[3], s.std, "std");
    expectSame(row[4], s.l2norm, "l2");
    return;
  }
  const long double scale = std::max(std::fabs(m.mean), m.std);
  expectClose(row[2], m.mean, scale, "mean", tolerance);
  expectClose(row[3], m.std, m.std, "std", tolerance);
  expectClose(row[4], m.l2, m.l2, "l2", tolerance);
}

void expectScratchLeftClean(const Stream& stream, int bins = kBins) {
  for (int i = 0; i < HS_HIST + bins; ++i) {
    if (i == HS_READS_ONE || i == HS_READS_TWO) continue;  // counters, never reset
    EXPECT_EQ(stream.scratch[std::size_t(i)], 0u) << "scratch word " << i;
  }
}

// The values in the working precision, as the reference reads them.
template <typename IN>
std::vector<Work<IN>> widened(const std::vector<IN>& in) {
  std::vector<Work<IN>> out;
  for (const IN& v : in) out.push_back(hs_value<IN, Work<IN>>(v));
  return out;
}

// A first capture (no forecast): the row equals the CPU kernel's, and no state is left behind.
template <typename IN>
void expectFirstCapture(const std::vector<IN>& values, unsigned threads = 64, bool moments = true) {
  Stream stream;
  const Outcome out = run(stream, values.data(), std::int64_t(values.size()), nullptr, threads);
  const auto work = widened(values);
  expectRow(out.row, work, reference(work), moments);
  expectScratchLeftClean(stream);
}

std::vector<float> normal(std::size_t n, float scale, float shift, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = shift + scale * dist(rng);
  return v;
}

hs_bf16 bf16(float f) {  // round to nearest even, as torch does
  unsigned int bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return hs_bf16{0x7fc0};
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return hs_bf16{(unsigned short)(bits >> 16)};
}

TEST(CudaKernelsTest, FloatValuesWithNanAndInfEqualTheCpuKernel) {
  auto v = normal(10007, 2.0f, 0.5f, 1);
  for (std::size_t i = 0; i < v.size(); i += 97) v[i] = float(kNaN);
  v[5] = float(kInf);
  v[6] = -float(kInf);
  v[7] = 0.0f;
  expectFirstCapture(v);
}

TEST(CudaKernelsTest, EveryCaseOfTheTritonTestsEqualsTheCpuKernel) {
  expectFirstCapture(std::vector<float>(100, float(kNaN)));
  expectFirstCapture(std::vector<float>{float(kInf), -float(kInf), float(kInf)});
  expectFirstCapture(std::vector<float>{});
  expectFirstCapture(std::vector<float>{-3.25f});
  expectFirstCapture(std::vector<float>(1000, 3.5f));
  expectFirstCapture(normal(5000, 1e-4f, 1000.0f, 2));                       // a tiny range far from zero
  expectFirstCapture(std::vector<float>{3e38f, -3e38f, 1.0f, 0.0f, -3.4e38f}); // a span past float32's range
  std::vector<double> wide = {1.7e308, -1.7e308, 0.0, 1e-300, 4.9e-324};      // float64's, past its range
  expectFirstCapture(wide, 64, false);
  std::vector<double> mixed(3000);
  std::mt19937 rng(3);
  for (auto& x : mixed) x = std::ldexp(double(rng() % 1000) - 500.0, int(rng() % 60) - 30);
  mixed[10] = kNaN;
  expectFirstCapture(mixed);
}

TEST(CudaKernelsTest, HalfAndBfloat16ExtremesAndSubnormalsEqualTheCpuKernel) {
  std::vector<hs_half> half;
  for (unsigned short bits : {0x0001, 0x0002, 0x03ff, 0x0400, 0x3c00, 0x7bff, 0xfbff, 0x8001, 0x0000, 0x8000, 0x7c00,
                              0x7e00, 0x5640, 0x1234})
    half.push_back(hs_half{bits});
  for (unsigned int i = 0; i < 5000; ++i) half.push_back(hs_half{(unsigned short)((i * 40503u) & 0xffffu)});
  expectFirstCapture(half);
  std::vector<hs_bf16> brain;
  for (float f : normal(9001, 3.0f, -1.0f, 4)) brain.push_back(bf16(f));
  brain.push_back(hs_bf16{0x0001});   // a bfloat16 subnormal
  brain.push_back(hs_bf16{0x7f7f});   // its largest
  brain.push_back(hs_bf16{0x7fc0});   // NaN
  expectFirstCapture(brain);
}

TEST(CudaKernelsTest, IntegerAndBoolValuesEqualTheCpuKernel) {
  std::mt19937 rng(5);
  std::vector<signed char> i8(4099);
  std::vector<unsigned char> u8(4099), flags(3001);
  std::vector<short> i16(2049);
  std::vector<int> i32(2051);
  std::vector<long long> i64(1025);
  for (auto& v : i8) v = (signed char)(rng() & 0xff);
  for (auto& v : u8) v = (unsigned char)(rng() & 0xff);
  for (auto& v : flags) v = (unsigned char)(rng() & 1);
  for (auto& v : i16) v = (short)(rng() & 0xffff);
  for (auto& v : i32) v = int(rng());
  for (auto& v : i64) v = (long long)(((unsigned long long)rng() << 32) | rng());
  i64[0] = std::numeric_limits<long long>::min();
  i64[1] = std::numeric_limits<long long>::max();
  expectFirstCapture(i8);
  expectFirstCapture(u8);
  expectFirstCapture(flags);
  expectFirstCapture(i16);
  expectFirstCapture(i32);
  expectFirstCapture(i64);
}

TEST(CudaKernelsTest, UnalignedStartsAndTailsAndFullBlocksEqualTheCpuKernel) {
  const auto v = normal(4103, 1.0f, 0.0f, 6);
  for (std::size_t offset : {1u, 2u, 3u}) {
    std::vector<float> part(v.begin() + std::ptrdiff_t(offset), v.end());
    Stream stream;
    const Outcome out = run(stream, v.data() + offset, std::int64_t(part.size()), nullptr);
    expectRow(out.row, part, reference(part));
  }
  expectFirstCapture(normal(70001, 1.0f, 0.0f, 7), 256);  // the launch's own 256 threads a block
}

TEST(CudaKernelsTest, OffsetsPast2To31ValuesAreRead) {
  // 2^31 + 4099 bytes: the values past 2^31 (the only non-zero ones) are found, counted and binned.
  const std::int64_t n = (std::int64_t(1) << 31) + 4099;
  std::vector<unsigned char> values(std::size_t(n), 0);
  values[std::size_t(n - 1)] = 200;
  values[std::size_t((std::int64_t(1) << 31) + 7)] = 3;
  Stream stream;
  const Outcome out = run(stream, values.data(), n, nullptr, 64, 4);
  EXPECT_EQ(out.row[HS_ROW_MIN], 0.0);
  EXPECT_EQ(out.row[HS_ROW_MAX], 200.0);
  EXPECT_EQ(out.row[HS_ROW_ZEROS], double(n - 2) / double(n));
  EXPECT_EQ(out.row[HS_HEADER + kBins - 1], 1.0);  // 200 in the last bin
  EXPECT_EQ(out.row[HS_HEADER], double(n - 1));    // 0 and 3 in the first
  expectClose(out.row[HS_ROW_L2], std::sqrt(200.0L * 200.0L + 9.0L), 200.0L, "l2");
}

// A series' slot after one capture, and the stream it shares.
struct Series {
  Stream stream;
  std::vector<double> slot = std::vector<double>(HS_SLOT_WORDS, 0.0);
  template <typename W>
  Outcome capture(const std::vector<W>& values) {
    return run(stream, values.data(), std::int64_t(values.size()), slot.data());
  }
};

// A one-read row: the histogram between the forecast's edges, everything else the tensor's own.
template <typename W>
void expectOneRead(const Outcome& out, const std::vector<W>& values, double low, double high) {
  EXPECT_FALSE(out.reread);
  const TensorStats own = reference(values);
  const SharedRange range{low, high, own.amax};
  TensorStats binned = reference(values, &range);
  EXPECT_LE(own.histHigh - own.histLow, high - low);
  EXPECT_GE(own.max - own.min, 0.5 * (high - low));
  expectRow(out.row, values, binned, true, std::is_same_v<W, float> ? kFloat32Sums : kFloat64Sums);
}

TEST(CudaKernelsTest, AnyCountOfBinsAndHistogramCopiesEqualsTheCpuKernel) {
  const auto values = normal(30000, 2.0f, 1.0f, 21);
  for (int bins : {65, 200, 63, 1}) {
    Stream stream;
    const Outcome out = run(stream, values.data(), std::int64_t(values.size()), nullptr, 64, 3, bins);
    expectRow(out.row, values, reference(values, nullptr, bins));
    expectScratchLeftClean(stream, bins);
  }
}

TEST(CudaKernelsTest, ASeriesInsideItsEdgesIsReadOnce) {
  Series series;
  const Outcome first = series.capture(normal(20000, 1.0f, 0.0f, 8));
  EXPECT_TRUE(first.reread);  // the first capture of a series is two reads
  EXPECT_EQ(series.slot[0], 1.0);
  const double span = first.row[9] - first.row[8];
  EXPECT_DOUBLE_EQ(series.slot[1], first.row[8] - HS_MARGIN * span);
  EXPECT_DOUBLE_EQ(series.slot[2], first.row[9] + HS_MARGIN * span);
  for (unsigned seed = 9; seed < 13; ++seed) {
    const double low = series.slot[1], high = series.slot[2];
    const auto next = normal(20000, 1.0f, 0.0f, seed);
    const Outcome out = series.capture(next);
    expectOneRead(out, next, low, high);
    expectScratchLeftClean(series.stream);
  }
  EXPECT_EQ(series.stream.scratch[HS_READS_ONE], 4u);  // what the step message reports
  EXPECT_EQ(series.stream.scratch[HS_READS_TWO], 1u);
}

TEST(CudaKernelsTest, ValuesOutsideTheEdgesOrFillingLessThanHalfAreReadAgain) {
  const struct {
    float scale, shift;
  } cases[] = {{3.0f, 0.0f}, {0.2f, 0.0f}, {1.0f, 100.0f}, {1.0f, -3.0f}, {1.0f, 3.0f}};
  for (const auto& c : cases) {
    Series series;
    series.capture(normal(8000, 1.0f, 0.0f, 14));
    const auto next = normal(8000, c.scale, c.shift, 15);
    const Outcome out = series.capture(next);
    EXPECT_TRUE(out.reread) << c.scale << " " << c.shift;
    expectRow(out.row, next, reference(next));
    expectScratchLeftClean(series.stream);
  }
}

TEST(CudaKernelsTest, Fp8CountsAreExactFromTheBandOrReadAgainWhenItOverflows) {
  // Many values near where E4M3's underflow begins (amax 1: about 4.4e-6): counted exactly
  // from the band's kept values, or read again where more than the band holds.
  for (const std::size_t near : {std::size_t(2000), std::size_t(HS_BAND_CAPACITY + 4000)}) {
    std::mt19937 rng(16);
    std::uniform_real_distribution<float> tiny(1e-6f, 1e-5f), body(-1.0f, 1.0f);
    auto values = [&] {
      std::vector<float> v;
      for (std::size_t i = 0; i < near; ++i) v.push_back(tiny(rng) * (i % 2 ? 1.0f : -1.0f));
      for (int i = 0; i < 6000; ++i) v.push_back(body(rng));
      v.push_back(1.0f);
      v.push_back(-1.0f);
      return v;
    };
    Series series;
    series.capture(values());
    const double low = series.slot[1], high = series.slot[2];
    const auto next = values();
    const Outcome out = series.capture(next);
    const TensorStats own = reference(next);
    EXPECT_GT(own.e4m3Underflow, 0);
    if (near > HS_BAND_CAPACITY) {
      EXPECT_TRUE(out.reread);
      expectRow(out.row, next, own);
    } else {
      expectOneRead(out, next, low, high);
    }
    expectScratchLeftClean(series.stream);
  }
}

TEST(CudaKernelsTest, ASeriesOfOneValueKeepsItsEdgesAndIntegerSeriesAreReadOnce) {
  Series flat;
  flat.capture(std::vector<float>(3000, 3.5f));
  const std::vector<float> same(3000, 3.5f);
  const Outcome out = flat.capture(same);
  EXPECT_FALSE(out.reread);
  expectRow(out.row, same, reference(same));

  std::mt19937 rng(17);
  auto ints = [&] {
    std::vector<double> v(5000);
    for (auto& x : v) x = double(int(rng() % 2001) - 1000);
    return v;
  };
  Series series;
  series.capture(ints());
  const double low = series.slot[1], high = series.slot[2];
  const auto next = ints();
  expectOneRead(series.capture(next), next, low, high);
}

TEST(CudaKernelsTest, ResultsDoNotDependOnWhatTheStreamRanBefore) {
  const auto v = normal(30000, 1.5f, 0.25f, 18);
  Stream fresh, used;
  run(used, normal(5000, 9.0f, 3.0f, 19).data(), 5000, nullptr);
  const Outcome a = run(fresh, v.data(), std::int64_t(v.size()), nullptr);
  const Outcome b = run(used, v.data(), std::int64_t(v.size()), nullptr);
  for (std::size_t i = 0; i < a.row.size(); ++i) EXPECT_EQ(a.row[i], b.row[i]) << "field " << i;
}

TEST(CudaKernelsTest, OneBlockReadsAgainInItsOwnLaunch) {
  // A small tensor's launch is one block: it decides and reads again itself (run() compares it
  // with the two launches; here against the CPU kernel too).
  Stream stream;
  std::vector<double> slot(HS_SLOT_WORDS, 0.0);
  const auto first = normal(3000, 1.0f, 0.0f, 50);
  const Outcome a = run(stream, first.data(), std::int64_t(first.size()), slot.data(), 64, 1);
  EXPECT_TRUE(a.reread);
  expectRow(a.row, first, reference(first));
  const double low = slot[1], high = slot[2];
  const auto next = normal(3000, 1.0f, 0.0f, 51);
  expectOneRead(run(stream, next.data(), std::int64_t(next.size()), slot.data(), 64, 1), next, low, high);
  expectScratchLeftClean(stream);
}

TEST(CudaKernelsTest, AGroupsDriftScalesTheNextSeriesForecast) {
  // Five series of activations (group 1) and one with no group, on one stream: a step at scale 1,
  // another (each series' forecast now its own), then every value 1.8 times larger. The first
  // series of the group read twice (outside their edges) and teach the group the change; the last
  // ones are read once between their edges scaled by the drift; the series with no group is not.
  Stream stream;
  std::vector<std::vector<double>> slots(6, std::vector<double>(HS_SLOT_WORDS, 0.0));
  for (int i = 0; i < 5; ++i) slots[std::size_t(i)][HS_SLOT_GROUP] = 1.0;
  auto values = [](int series, float scale, unsigned step) {  // from -scale to scale exactly, in an order of their own
    std::vector<float> v(6000);
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = scale * (float(k) / 2999.5f - 1.0f);
    std::shuffle(v.begin(), v.end(), std::mt19937(100u * step + unsigned(series)));
    v.front() = -scale;
    v.back() = scale;
    return v;
  };
  for (unsigned step = 0; step < 2; ++step) {
    for (int i = 0; i < 6; ++i) {
      const auto v = values(i, 1.0f, step);
      run(stream, v.data(), std::int64_t(v.size()), slots[std::size_t(i)].data());
    }
  }
  std::vector<bool> reread;
  for (int i = 0; i < 6; ++i) {
    std::vector<double>& slot = slots[std::size_t(i)];
    const hs_forecast<float> f = hs_read_slot<float>(slot.data(), kBins, stream.scratch.data());
    const double drift = __longlong_as_double((hs_i64)stream.scratch[HS_DRIFT]);
    if (i < 5) {
      EXPECT_EQ(f.low, slot[1] * (drift > 0 ? drift : 1.0));  // the forecast is the slot's edges scaled
      EXPECT_EQ(f.high, slot[2] * (drift > 0 ? drift : 1.0));
    } else {
      EXPECT_EQ(f.low, slot[1]);
    }
    const auto v = values(i, 1.8f, 2);
    const Outcome out = run(stream, v.data(), std::int64_t(v.size()), slot.data());
    reread.push_back(out.reread);
    if (!out.reread) expectOneRead(out, v, f.low, f.high);
  }
  EXPECT_EQ(reread, (std::vector<bool>{true, true, false, false, false, true}));
  const double drift = __longlong_as_double((hs_i64)stream.scratch[HS_DRIFT]);
  EXPECT_NEAR(drift, std::pow(1.8, 1.0 - std::pow(0.75, 5.0)), 1e-3);  // 1.8^(1 - 0.75^5): five changes of 1.8
  EXPECT_EQ(stream.scratch[HS_DRIFT + 1], 0u);  // gradients' drift untouched
}

// The common path (stats_kernels.cu, hs_fast_*): one test a 16-byte load sends every value that
// the exact per-value code would count or keep (NaN, Inf, past float16's range, under float16's
// smallest subnormal, under either fp8 band's upper edge) to that code, and no other.

// Whether the exact code must see v in a read with forecast f: anything but a 0 or a finite value
// within float16's range at or above every threshold that counts.
bool needsExactCode(float v, const hs_forecast<float>& f) {
  const float m = std::fabs(v);
  if (!std::isfinite(v) || m > 65504.0f) return true;
  if (m == 0.0f) return false;
  if (m < 5.9604644775390625e-08f) return true;
  return m < f.band_high[0] || m < f.band_high[1];
}

// The previous amax values the test runs with: every third power of two of float32's range, its
// edges and 200 drawn at random over it (309 in all).
std::vector<double> previousAmaxes() {
  std::vector<double> out = {0.0, 1.4e-45, 65504.0, 65536.0, 448.0, 57344.0, 3.4e38};
  for (int e = -149; e <= 127; e += 3) out.push_back(std::ldexp(1.0, e));
  std::mt19937 rng(31);
  while (out.size() < 309) out.push_back(std::ldexp(1.0 + double(rng() % 1000) / 1000.0, int(rng() % 270) - 145));
  return out;
}

hs_forecast<float> forecastWithAmax(double amax) {
  const double slot[HS_SLOT_WORDS] = {1.0, -4.0, 4.0, amax, 0.25, 0, 0, 0};
  const std::vector<hs_u64> scratch(HS_SCRATCH_WORDS, 0);
  return hs_read_slot<float>(slot, kBins, scratch.data());
}

template <typename IN>
void expectLaneTestExact() {
  unsigned int hist[kBins + 1] = {};
  long long plans = 0, mismatches = 0;
  for (const double amax : previousAmaxes()) {
    const hs_forecast<float> f = forecastWithAmax(amax);
    const hs_fast p = hs_fast_plan<IN, float>(f, hist);
    if (!p.on) continue;  // every value under the edge: the exact code reads them all
    ++plans;
    const hs_lane_test test = hs_lane_test::make<IN>(p.edge);
    for (unsigned int bits = 0; bits < 0x10000u; ++bits) {
      const float v = hs_pair<IN>::low(bits);
      for (const uint4 u : {uint4{bits, 0, 0, 0}, uint4{0, 0, 0, bits << 16}}) {
        unsigned int r[4];
        const bool common = test.common(u, r);
        mismatches += common == needsExactCode(v, f);
        if (common) mismatches += hs_lane_test::nonzero_bits(r) != (v != 0.0f ? 4u : 0u);
      }
    }
  }
  EXPECT_GT(plans, 200);
  EXPECT_EQ(mismatches, 0);
}

TEST(CudaKernelsTest, TheCommonPathTestOfBfloat16AndFloat16LoadsIsExactForEveryValue) {
  expectLaneTestExact<hs_bf16>();
  expectLaneTestExact<hs_half>();
}

TEST(CudaKernelsTest, TheCommonPathTestOfFloat32LoadsIsExactAtEveryEdge) {
  unsigned int hist[kBins + 1] = {};
  std::mt19937 rng(32);
  long long plans = 0, mismatches = 0;
  for (const double amax : previousAmaxes()) {
    const hs_forecast<float> f = forecastWithAmax(amax);
    const hs_fast p = hs_fast_plan<float, float>(f, hist);
    if (!p.on) continue;
    ++plans;
    std::vector<unsigned int> patterns = {0u, 1u, 0x007fffffu, 0x00800000u, 0x33800000u, 0x477fe000u, 0x477fe001u,
                                          0x7f7fffffu, 0x7f800000u, 0x7f800001u, 0x7fc00000u, 0x7fffffffu};
    for (unsigned int around : {p.edge, 0x477fe000u, __float_as_uint(f.band_high[0]), __float_as_uint(f.band_high[1])})
      for (unsigned int d = 0; d < 5; ++d) patterns.push_back(around + d - 2u);
    for (int i = 0; i < 2000; ++i) patterns.push_back((unsigned int)rng());
    for (const unsigned int magnitude : patterns) {
      for (const unsigned int bits : {magnitude, magnitude ^ 0x80000000u}) {
        const float v = __uint_as_float(bits);
        for (const uint4 u : {uint4{bits, 0, 0, 0}, uint4{0, 0x80000000u, 0, bits}}) {  // beside zeros
          unsigned int zeros = 0;
          const bool common = hs_fast_floats_common(u, p.edge, zeros);
          mismatches += common == needsExactCode(v, f);
          if (common) mismatches += zeros != (v == 0.0f ? 4u : 3u);
        }
      }
    }
  }
  EXPECT_GT(plans, 200);
  EXPECT_EQ(mismatches, 0);
}

hs_half half(float f) {  // round to nearest even, as torch does (no _Float16: clang 14 lacks it on x86)
  const unsigned int bits = __float_as_uint(f);
  const unsigned int sign = (bits >> 16) & 0x8000u, magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return hs_half{(unsigned short)(sign | 0x7e00u)};   // NaN
  if (magnitude >= 0x477ff000u) return hs_half{(unsigned short)(sign | 0x7c00u)};  // 65520 and up: infinity
  if (magnitude < 0x38800000u) {  // under 2^-14: a subnormal (or 0), in units of 2^-24
    const float units = std::nearbyint(std::fabs(f) * 16777216.0f);
    return hs_half{(unsigned short)(sign | (unsigned int)units)};
  }
  unsigned int h = (magnitude - 0x38000000u) >> 13;  // the exponent rebiased, ten bits of mantissa
  const unsigned int rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return hs_half{(unsigned short)(sign | h)};
}

// Values as a layer's output with dropout: normal, a third of them 0, and now and then one the
// exact code must see (under float16's range, in E4M3's underflow, NaN, Inf).
std::vector<float> droppedOut(std::size_t n, unsigned seed) {
  std::vector<float> v = normal(n, 1.0f, 0.1f, seed);
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < n; ++i) {
    if (rng() % 3 == 0) v[i] = 0.0f;
    if (i % 701 == 5) v[i] = 5e-6f;   // under E4M3's edge (2e-5 for an amax about 4.5), a float16 subnormal
    if (i % 997 == 6) v[i] = -2e-8f;  // under float16's smallest subnormal (0 in float16)
  }
  v[11] = float(kNaN);
  v[12] = float(kInf);
  return v;
}

template <typename IN>
void expectCommonPathSeries(IN (*convert)(float)) {
  auto as = [&](const std::vector<float>& f) {
    std::vector<IN> out;
    for (float x : f) out.push_back(convert(x));
    return out;
  };
  Series series;
  series.capture(as(droppedOut(24000, 40)));
  for (unsigned seed = 41; seed < 44; ++seed) {
    const double low = series.slot[1], high = series.slot[2];
    const auto next = as(droppedOut(24000, seed));
    const long long before = hs_emulation::commonLoads;
    const Outcome out = series.capture(next);
    const long long common = hs_emulation::commonLoads - before;
    // Most loads take the common path; the rare ones (about 1 in 40 here) were read value by value.
    EXPECT_GT(common * 10, 9 * std::int64_t(next.size() * sizeof(IN) / 16)) << common;
    const auto work = widened(next);
    if (!std::is_same_v<IN, hs_half>) {
      EXPECT_GT(reference(work).f16Underflow, 0);
    }
    EXPECT_GT(reference(work).e4m3Underflow, 0);
    expectOneRead(out, work, low, high);
    expectScratchLeftClean(series.stream);
  }
}

TEST(CudaKernelsTest, Bfloat16Float16AndFloat32SeriesReadOnceThroughTheCommonPathEqualTheCpuKernel) {
  expectCommonPathSeries<hs_bf16>(bf16);
  expectCommonPathSeries<hs_half>(half);
  expectCommonPathSeries<float>([](float f) { return f; });
}

} // namespace
