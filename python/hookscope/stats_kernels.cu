// HookScope's statistics of a captured tensor on an NVIDIA GPU: CUDA C compiled at first use by
// NVRTC (_cuda_stats.py) and launched through the driver API. The row's meanings are _stats's
// (docs/export-format.md); its layout is RowLayout.h's (row_layout in the package).
//
// Two kernels a capture, both queued, with no host synchronisation:
// - hs_read_*: one read of the values. Per thread, in registers: the finite min and max, the sum
//   and sum of squares of (v - shift) and of v (float64), the zero, NaN and Inf counts and the
//   float16 counts; per warp, a histogram in shared memory between edges known before the read
//   (the same series' previous range, widened: its "slot"), and the values below where the fp8
//   underflow can begin given the previous amax (plus those in the band where it may, kept in a
//   small buffer). Warp shuffles at the end, one partial a block, one global atomic per bin per
//   block. The last block folds the partials in a fixed order and decides: where every finite
//   value fell inside the edges, filled at least half their span, the fp8 thresholds of this
//   step's amax fall in the band and the shift was near the mean, the row is complete (one read);
//   else it writes this step's edges and sets the re-read flag. It writes the series' next slot.
// - hs_reread_*: returns at once unless the flag is set; else reads again: the histogram between
//   this step's finite min and max, the second moment about the mean (corrected two-pass), the
//   fp8 counts by this step's amax.
// Compiled as host C++ too (HS_EMULATION, tests/core/kernels/CudaEmulation.h), so the arithmetic
// is tested on machines with no GPU.

#ifdef HS_EMULATION
#define HS_DEV inline
#define HS_NOINLINE inline
#define HS_GLOBAL inline void
#define HS_GLOBAL_REREAD inline void
#define HS_SHARED_BYTES(name) unsigned char* name = hs_emulation::sharedMemory()
#define HS_UNROLL
#else
#define HS_DEV __device__ __forceinline__
#define HS_NOINLINE __device__ __noinline__
// Three blocks of 256 threads a multiprocessor for the read (no spills on sm_80 to sm_12x); two
// for the re-read, which runs only where the read could not complete a row.
#define HS_GLOBAL extern "C" __global__ void __launch_bounds__(256, 3)
#define HS_GLOBAL_REREAD extern "C" __global__ void __launch_bounds__(256, 2)
#define HS_SHARED_BYTES(name) extern __shared__ __align__(16) unsigned char name[]
#define HS_UNROLL _Pragma("unroll")
#endif

typedef unsigned long long hs_u64;
typedef long long hs_i64;

// The row (core/kernels/RowLayout.h): its header's fields, then the bins' counts from HS_HEADER on.
#define HS_ROW_MIN 0
#define HS_ROW_MAX 1
#define HS_ROW_MEAN 2
#define HS_ROW_STD 3
#define HS_ROW_L2 4
#define HS_ROW_ZEROS 5
#define HS_ROW_NAN 6
#define HS_ROW_INF 7
#define HS_ROW_LO 8
#define HS_ROW_HI 9
#define HS_ROW_AMAX 10
#define HS_ROW_F16_OVERFLOW 11
#define HS_ROW_F16_UNDERFLOW 12
#define HS_ROW_E4M3_UNDERFLOW 13
#define HS_ROW_E5M2_UNDERFLOW 14
#define HS_HEADER 15
// The scratch (64-bit words) a device and stream share between captures: tickets, the re-read
// flag, the fp8 band counts, the histogram's global counters, each block's partials, the bands.
#define HS_TICKET_READ 0
#define HS_TICKET_REREAD 1
#define HS_REREAD 2
#define HS_BAND_COUNT 3  // and 4: E4M3's, E5M2's
#define HS_READS_ONE 5   // captures completed in one read, and in two: counted, never reset
#define HS_READS_TWO 6
#define HS_HIST 8
#define HS_MAX_BINS 4096
#define HS_PARTIALS (HS_HIST + HS_MAX_BINS)
#define HS_MAX_BLOCKS 2048
#define HS_FIELDS 16     // a block's partial: see the P_ names below
#define HS_BANDS (HS_PARTIALS + HS_MAX_BLOCKS * HS_FIELDS)
#define HS_BAND_CAPACITY 8192
#define HS_SCRATCH_WORDS (HS_BANDS + 2 * HS_BAND_CAPACITY)
// A series' slot (float64): valid, low, high, amax, shift (the previous mean).
#define HS_SLOT_WORDS 8
// The next step's edges: this step's range widened by this much of its span on each side. A
// range symmetric about zero that is scaled by 0.71 to 1.41 (1 / sqrt 2 to sqrt 2) then still
// fits and fills half the edges: one read for a tensor whose scale drifts either way alike.
#define HS_MARGIN 0.2
// A shift this many standard deviations from the mean, squared, makes the one-read variance
// lose digits: read again about the mean.
#define HS_SHIFT_LIMIT 1e6

enum {
  P_MIN, P_MAX, P_S1, P_S2, P_ZERO, P_NAN, P_INF, P_F16O, P_F16U, P_E4, P_E5, P_COUNT
};

struct hs_bf16 { unsigned short bits; };
struct hs_half { unsigned short bits; };

#ifdef HS_EMULATION
HS_DEV float __uint_as_float(unsigned int b) { float f; memcpy(&f, &b, 4); return f; }
HS_DEV unsigned int __float_as_uint(float f) { unsigned int b; memcpy(&b, &f, 4); return b; }
HS_DEV double __longlong_as_double(hs_i64 b) { double d; memcpy(&d, &b, 8); return d; }
HS_DEV hs_i64 __double_as_longlong(double d) { hs_i64 b; memcpy(&b, &d, 8); return b; }
#endif
HS_DEV float hs_as_float(unsigned int bits) { return __uint_as_float(bits); }

// Exact float16 to float32 (the hardware's conversion on a GPU).
HS_DEV float hs_half_to_float(unsigned short h) {
#ifdef HS_EMULATION
  const unsigned int sign = (unsigned int)(h & 0x8000u) << 16;
  const unsigned int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return hs_as_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = (float)mantissa * 5.9604644775390625e-08f;  // 2^-24
    return sign ? -magnitude : magnitude;
  }
  return hs_as_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
#else
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#endif
}

template <typename IN, typename W> HS_DEV W hs_value(IN v) { return (W)v; }
template <> HS_DEV float hs_value<hs_bf16, float>(hs_bf16 v) { return hs_as_float((unsigned int)v.bits << 16); }
template <> HS_DEV float hs_value<hs_half, float>(hs_half v) { return hs_half_to_float(v.bits); }

template <typename W> struct hs_limits;
template <> struct hs_limits<float> {
  typedef unsigned int bits;
  static HS_DEV float largest() { return 3.4028234663852886e38f; }
  static HS_DEV float infinity() { return __uint_as_float(0x7f800000u); }
  static HS_DEV unsigned int to_bits(float v) { return __float_as_uint(v); }
  static HS_DEV float from_bits(unsigned int b) { return __uint_as_float(b); }
};
template <> struct hs_limits<double> {
  typedef hs_u64 bits;
  static HS_DEV double largest() { return 1.7976931348623157e308; }
  static HS_DEV double infinity() { return __longlong_as_double(0x7ff0000000000000ll); }
  static HS_DEV hs_u64 to_bits(double v) { return (hs_u64)__double_as_longlong(v); }
  static HS_DEV double from_bits(hs_u64 b) { return __longlong_as_double((hs_i64)b); }
};

template <typename W> HS_DEV bool hs_finite(W v) { return (v < 0 ? -v : v) <= hs_limits<W>::largest(); }
template <typename W> HS_DEV W hs_abs(W v) { return v < 0 ? -v : v; }

// _stats.flush_below: the smallest W value w with fl64(w * largest) >= fl64(amax * smallest),
// so that a finite value counts when 0 < |v| < w; 0 for an amax of 0 or NaN.
template <typename W>
HS_DEV W hs_flush_below(double amax, double largest, double smallest) {
  const double edge = amax * smallest;
  if (!(edge > 0)) return W(0);
  typedef hs_limits<W> L;
  W w = (W)(edge / largest);
  while (w > W(0) && (double)L::from_bits(L::to_bits(w) - 1) * largest >= edge) w = L::from_bits(L::to_bits(w) - 1);
  while (!((double)w * largest >= edge)) w = L::from_bits(L::to_bits(w) + 1);
  return w;
}

// How values become bins between low and high (docs/export-format.md, _stats.bin_plan): in
// float32 where the values are float32 and the span and scale are normal float32 numbers,
// else (v * k - low * k) * scale in float64, k halving a span past float64's range.
struct hs_plan {
  bool narrow;
  float low_f, scale_f, top_f;
  double low_k, k, scale, top;
};

template <typename W>
HS_DEV hs_plan hs_make_plan(double low, double high, int bins) {
  hs_plan p;
  const double span = high - low;
  const bool work_float = sizeof(W) == 4;
  p.k = (work_float || span <= 1.7976931348623157e308) ? 1.0 : 0.5;
  p.scale = work_float ? (double)bins / (span > 0 ? span : 1.0)
                       : (double)bins / (span > 0 ? __dsub_rn(__dmul_rn(high, p.k), __dmul_rn(low, p.k)) : 1.0);
  p.narrow = work_float && span <= 3.4028234663852886e38 && p.scale <= 3.4028234663852886e38 &&
             p.scale >= 1.1754943508222875e-38;
  p.low_f = (float)low;
  p.scale_f = (float)p.scale;
  p.top_f = (float)(bins - 1);
  p.low_k = __dmul_rn(low, p.k);
  p.top = (double)(bins - 1);
  return p;
}

// A finite value's bin, clamped to [0, bins - 1] (a NaN position to 0); no contraction into FMA.
template <typename W>
HS_DEV int hs_bin(W v, const hs_plan& p) {
  if (sizeof(W) == 4 && p.narrow) {
    float at = __fmul_rn(__fsub_rn((float)v, p.low_f), p.scale_f);
    at = at > 0.0f ? at : 0.0f;
    return (int)(at < p.top_f ? at : p.top_f);
  }
  double at = __dmul_rn(__dsub_rn(__dmul_rn((double)v, p.k), p.low_k), p.scale);
  at = at > 0.0 ? at : 0.0;
  return (int)(at < p.top ? at : p.top);
}

// What the first read knows before it starts: the slot's edges and shift, the bin plan, the fp8
// band (the thresholds of half and twice the previous amax).
template <typename W>
struct hs_forecast {
  bool predicted;
  double low, high, shift, amax;
  hs_plan plan;
  W band_low[2], band_high[2];
};

template <typename W>
HS_DEV hs_forecast<W> hs_read_slot(const double* slot, int bins) {
  hs_forecast<W> f;
  f.predicted = slot != 0 && slot[0] == 1.0;
  f.shift = f.predicted ? slot[4] : 0.0;
  f.low = f.predicted ? slot[1] : 0.0;
  f.high = f.predicted ? slot[2] : 1.0;
  f.amax = f.predicted ? slot[3] : 0.0;
  f.plan = hs_make_plan<W>(f.low, f.high, bins);
  f.band_low[0] = hs_flush_below<W>(f.amax * 0.5, 448.0, 0x1p-9);
  f.band_high[0] = hs_flush_below<W>(f.amax * 2.0, 448.0, 0x1p-9);
  f.band_low[1] = hs_flush_below<W>(f.amax * 0.5, 57344.0, 0x1p-16);
  f.band_high[1] = hs_flush_below<W>(f.amax * 2.0, 57344.0, 0x1p-16);
  return f;
}

// One thread's running statistics.
template <typename W>
struct hs_acc {
  W lo, hi;
  double s1, s2;
  unsigned int count[P_COUNT];  // P_ZERO .. P_E5 used
};

template <typename W>
HS_DEV void hs_acc_init(hs_acc<W>& a) {
  a.lo = hs_limits<W>::infinity();
  a.hi = -hs_limits<W>::infinity();
  a.s1 = a.s2 = 0;
HS_UNROLL
  for (int i = 0; i < P_COUNT; ++i) a.count[i] = 0;
}

// The first read's work on one value.
template <typename W>
HS_DEV void hs_take(W v, hs_acc<W>& a, const hs_forecast<W>& f, unsigned int* hist, hs_u64* scratch) {
  if (!hs_finite(v)) {
    if (v != v) {
      ++a.count[P_NAN];
    } else {
      ++a.count[P_INF];
    }
    return;
  }
  a.lo = v < a.lo ? v : a.lo;
  a.hi = v > a.hi ? v : a.hi;
  const double d = (double)v - f.shift;
  a.s1 += d;
  a.s2 += d * d;
  const W m = hs_abs(v);
  a.count[P_ZERO] += v == W(0);
  a.count[P_F16O] += m > W(65504);
  if (m > W(0)) {
    a.count[P_F16U] += m < W(5.9604644775390625e-08);
    if (f.predicted) {
HS_UNROLL
      for (int k = 0; k < 2; ++k) {
        if (m < f.band_low[k]) {
          ++a.count[P_E4 + k];
        } else if (m < f.band_high[k]) {  // rare: kept for the last block to count exactly
          const hs_u64 at = atomicAdd(&scratch[HS_BAND_COUNT + k], 1ull);
          if (at < HS_BAND_CAPACITY) reinterpret_cast<double*>(scratch)[HS_BANDS + k * HS_BAND_CAPACITY + at] = (double)m;
        }
      }
    }
  }
  if (f.predicted) atomicAdd(&hist[hs_bin(v, f.plan)], 1u);
}

// Reads the values [0, n) as 16-byte vectors where aligned, calling take(value) for each
// value this thread owns (a grid-stride loop; the unaligned head and the tail one at a time).
template <typename IN, typename W, typename Take>
HS_DEV void hs_each_value(const IN* x, hs_i64 n, Take& take) {
  const int per_vector = 16 / (int)sizeof(IN);
  const hs_i64 thread = (hs_i64)blockIdx.x * blockDim.x + threadIdx.x;
  const hs_i64 threads = (hs_i64)gridDim.x * blockDim.x;
  const hs_u64 address = (hs_u64)(const void*)x;
  hs_i64 head = (hs_i64)(((16 - (address & 15)) & 15) / sizeof(IN));
  if (address % sizeof(IN) != 0) head = n;  // never for a tensor's storage: read one at a time
  head = head < n ? head : n;
  for (hs_i64 i = thread; i < head; i += threads) take(hs_value<IN, W>(x[i]));
  const hs_i64 vectors = (n - head) / per_vector;
  const uint4* body = reinterpret_cast<const uint4*>(x + head);
  for (hs_i64 i = thread; i < vectors; i += threads) {
    union {
      uint4 raw;
      IN v[16 / sizeof(IN)];
    } u;
    u.raw = body[i];
    HS_UNROLL
    for (int j = 0; j < per_vector; ++j) take(hs_value<IN, W>(u.v[j]));
  }
  for (hs_i64 i = head + vectors * per_vector + thread; i < n; i += threads) take(hs_value<IN, W>(x[i]));
}

HS_DEV double hs_fold(int field, double a, double b) {
  if (field == P_MIN) return a < b ? a : b;
  if (field == P_MAX) return a > b ? a : b;
  return a + b;
}

// The block's values of `fields` fields (fields[i] for this thread) folded in a fixed order into
// out[0, fields) (thread 0's), through warp shuffles and `red` (shared, warps * HS_FIELDS).
HS_DEV void hs_block_fold(const double* mine, int fields, double* red, double* out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
HS_UNROLL
  for (int f = 0; f < fields; ++f) {
    double v = mine[f];
    for (int offset = 16; offset > 0; offset >>= 1) v = hs_fold(f, v, __shfl_down_sync(0xffffffffu, v, offset));
    if (lane == 0) red[warp * HS_FIELDS + f] = v;
  }
  __syncthreads();
  if (threadIdx.x < (unsigned)fields) {
    const int f = threadIdx.x;
    double v = red[f];
    for (int w = 1; w < warps; ++w) v = hs_fold(f, v, red[w * HS_FIELDS + f]);
    out[f] = v;
  }
  __syncthreads();
}

// In the last block: every block's partials folded, field by field, in a fixed order
// (lane l takes blocks l, l + 32, ..., then a shuffle tree), into total[0, fields).
HS_DEV void hs_fold_blocks(const double* partials, int fields, double* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const volatile double* parts = partials;
  for (int f = warp; f < fields; f += warps) {
    const double inf = hs_limits<double>::infinity();
    double v = f == P_MIN ? inf : (f == P_MAX ? -inf : 0.0);
    for (unsigned int b = lane; b < gridDim.x; b += 32) v = hs_fold(f, v, parts[b * HS_FIELDS + f]);
    for (int offset = 16; offset > 0; offset >>= 1) v = hs_fold(f, v, __shfl_down_sync(0xffffffffu, v, offset));
    if (lane == 0) total[f] = v;
  }
  __syncthreads();
}

// True in every thread of the block that finished last (its partials and global atomics are
// then visible to it).
HS_DEV bool hs_last_block(hs_u64* ticket, bool* flag) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    *flag = atomicAdd(ticket, 1ull) == (hs_u64)gridDim.x - 1;
  }
  __syncthreads();
  const bool last = *flag;
  if (last) __threadfence();
  return last;
}

// The shared memory: the fold's room, a flag, then `copies` histograms of bins + 1 counters.
HS_DEV void hs_shared_layout(unsigned char* smem, int bins, int copies, double** red, bool** flag,
                             unsigned int** hist) {
  *red = reinterpret_cast<double*>(smem);
  *flag = reinterpret_cast<bool*>(smem + 32 * HS_FIELDS * 8);
  *hist = reinterpret_cast<unsigned int*>(smem + 32 * HS_FIELDS * 8 + 16);
  for (int i = threadIdx.x; i < copies * (bins + 1); i += blockDim.x) (*hist)[i] = 0;
  __syncthreads();
}

// The block's shared histograms added to the global counters: one atomic per non-empty bin.
HS_DEV void hs_flush_histogram(const unsigned int* hist, int bins, int copies, hs_u64* global) {
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    hs_u64 c = 0;
    for (int k = 0; k < copies; ++k) c += hist[k * (bins + 1) + b];
    if (c) atomicAdd(&global[b], c);
  }
}

// In the last block: how many of the fp8 band's kept values lie below w (a shared counter).
template <typename W>
HS_DEV hs_u64 hs_count_band(const hs_u64* scratch, int k, hs_u64 kept, W w, unsigned int* counter) {
  if (threadIdx.x == 0) *counter = 0;
  __syncthreads();
  const volatile double* band = reinterpret_cast<const double*>(scratch) + HS_BANDS + k * HS_BAND_CAPACITY;
  unsigned int mine = 0;
  for (hs_u64 i = threadIdx.x; i < kept; i += blockDim.x) mine += band[i] < (double)w;
  if (mine) atomicAdd(counter, mine);
  __syncthreads();
  const hs_u64 below = *counter;
  __syncthreads();  // every thread has read it before a next call resets it (racecheck's hazard)
  return below;
}

// The row's edges for this step's finite min and max: widened around a single value.
HS_DEV void hs_own_edges(double lo, double hi, double* low, double* high) {
  *low = lo;
  *high = hi;
  if (hi <= lo) {
    const double magnitude = lo < 0 ? -lo : lo;
    const double pad = magnitude * 1e-6 > 0.5 ? magnitude * 1e-6 : 0.5;
    *low = lo - pad;
    *high = hi + pad;
  }
}

// The last block of the first read: the row's head, the decision, the next slot. Not inlined:
// its registers are not the read loop's. The forecast is read again from the slot (before
// thread 0 writes the next one), t is the block's folded totals (shared memory).
template <typename W>
HS_NOINLINE void hs_finish_read(hs_i64 n, int bins, double* row, double* slot, hs_u64* scratch, const double* t,
                                unsigned int* counter) {
  const hs_forecast<W> f = hs_read_slot<W>(slot, bins);
  __syncthreads();
  const double nan = __longlong_as_double(0x7ff8000000000000ll), count = (double)n - t[P_NAN] - t[P_INF];
  const bool some = count > 0;
  double low = 0, high = 0;
  if (some) hs_own_edges(t[P_MIN], t[P_MAX], &low, &high);
  const double amax = some ? (hs_abs(t[P_MIN]) > hs_abs(t[P_MAX]) ? hs_abs(t[P_MIN]) : hs_abs(t[P_MAX])) : nan;
  const double shifted_mean = t[P_S1] / count;
  const double var = count > 1 ? (t[P_S2] - t[P_S1] * shifted_mean) / (count - 1) : 0.0;
  const double mean = f.shift + shifted_mean;
  bool one = some && f.predicted && t[P_MIN] >= f.low && t[P_MAX] <= f.high &&
             ((t[P_MAX] - t[P_MIN]) >= 0.5 * (f.high - f.low) || (low == f.low && high == f.high)) &&
             (mean - f.shift) * (mean - f.shift) <= HS_SHIFT_LIMIT * (var > 0 ? var : 0.0);
  double fp8[2] = {0, 0};
  const volatile hs_u64* bands = scratch + HS_BAND_COUNT;
  const hs_u64 kept[2] = {bands[0], bands[1]};
HS_UNROLL
  for (int k = 0; k < 2; ++k) {
    if (!one) break;
    const W w = k == 0 ? hs_flush_below<W>(amax, 448.0, 0x1p-9) : hs_flush_below<W>(amax, 57344.0, 0x1p-16);
    one = kept[k] <= HS_BAND_CAPACITY && w >= f.band_low[k] && w <= f.band_high[k];
    if (one) fp8[k] = t[P_E4 + k] + (double)hs_count_band<W>(scratch, k, kept[k], w, counter);
  }
  hs_u64* hist = scratch + HS_HIST;
  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    const hs_u64 c = atomicExch(&hist[b], 0ull);
    if (one || !some) row[HS_HEADER + b] = (double)c;
  }
  __syncthreads();  // every thread has read the scratch and the slot before thread 0 resets them
  if (threadIdx.x != 0) return;
  row[HS_ROW_MIN] = some ? t[P_MIN] : nan;
  row[HS_ROW_MAX] = some ? t[P_MAX] : nan;
  row[HS_ROW_MEAN] = some ? mean : nan;
  row[HS_ROW_STD] = some ? __dsqrt_rn(var > 0 ? var : 0.0) : (n > 0 ? nan : 0.0);
  // The sum of squares from the shifted sums (no cancellation worth a digit while the shift is
  // near the mean; a re-read sums the squares themselves).
  const double squares = t[P_S2] + 2.0 * f.shift * t[P_S1] + count * f.shift * f.shift;
  row[HS_ROW_L2] = some ? __dsqrt_rn(squares > 0 ? squares : 0.0) : (n > 0 ? nan : 0.0);
  row[HS_ROW_ZEROS] = n > 0 ? t[P_ZERO] / (double)n : 0.0;
  row[HS_ROW_NAN] = t[P_NAN];
  row[HS_ROW_INF] = t[P_INF];
  row[HS_ROW_LO] = one ? f.low : low;
  row[HS_ROW_HI] = one ? f.high : high;
  row[HS_ROW_AMAX] = amax;
  row[HS_ROW_F16_OVERFLOW] = t[P_F16O];
  row[HS_ROW_F16_UNDERFLOW] = t[P_F16U];
  row[HS_ROW_E4M3_UNDERFLOW] = fp8[0];
  row[HS_ROW_E5M2_UNDERFLOW] = fp8[1];
  if (slot != 0 && some) {  // the next step's forecast
    const double margin = high > low && t[P_MAX] > t[P_MIN] ? HS_MARGIN * (high - low) : 0.0;
    const double next_low = low - margin, next_high = high + margin;
    slot[0] = hs_finite(next_low) && hs_finite(next_high) && hs_finite(next_high - next_low) ? 1.0 : 0.0;
    slot[1] = next_low;
    slot[2] = next_high;
    slot[3] = amax;
    slot[4] = hs_finite(mean) ? mean : 0.0;
  }
  scratch[HS_REREAD] = some && !one ? 1ull : 0ull;
  scratch[some && !one ? HS_READS_TWO : HS_READS_ONE] += 1;
  scratch[HS_BAND_COUNT] = scratch[HS_BAND_COUNT + 1] = 0;
  scratch[HS_TICKET_READ] = 0;
}

template <typename IN, typename W>
HS_DEV void hs_read(const IN* x, hs_i64 n, int bins, int copies, double* row, double* slot, hs_u64* scratch) {
  HS_SHARED_BYTES(smem);
  double* red;
  bool* flag;
  unsigned int* hist;
  hs_shared_layout(smem, bins, copies, &red, &flag, &hist);
  const hs_forecast<W> f = hs_read_slot<W>(slot, bins);
  unsigned int* my_hist = hist + ((threadIdx.x >> 5) % copies) * (bins + 1);
  hs_acc<W> a;
  hs_acc_init(a);
  auto take = [&](W v) { hs_take(v, a, f, my_hist, scratch); };
  hs_each_value<IN, W>(x, n, take);
  double mine[P_COUNT];
  mine[P_MIN] = (double)a.lo;
  mine[P_MAX] = (double)a.hi;
  mine[P_S1] = a.s1;
  mine[P_S2] = a.s2;
HS_UNROLL
  for (int i = P_ZERO; i < P_COUNT; ++i) mine[i] = (double)a.count[i];
  double* partials = reinterpret_cast<double*>(scratch) + HS_PARTIALS;
  hs_block_fold(mine, P_COUNT, red, partials + blockIdx.x * HS_FIELDS);
  if (f.predicted) hs_flush_histogram(hist, bins, copies, scratch + HS_HIST);
  if (!hs_last_block(&scratch[HS_TICKET_READ], flag)) return;
  hs_fold_blocks(partials, P_COUNT, red);
  hs_finish_read<W>(n, bins, row, slot, scratch, red, hist);
}

// The second read, where the first could not complete the row.
template <typename IN, typename W>
HS_DEV void hs_reread(const IN* x, hs_i64 n, int bins, int copies, double* row, hs_u64* scratch) {
  if (reinterpret_cast<volatile hs_u64*>(scratch)[HS_REREAD] == 0) return;
  HS_SHARED_BYTES(smem);
  double* red;
  bool* flag;
  unsigned int* hist;
  hs_shared_layout(smem, bins, copies, &red, &flag, &hist);
  const double mean = row[HS_ROW_MEAN], amax = row[HS_ROW_AMAX];
  const hs_plan plan = hs_make_plan<W>(row[HS_ROW_LO], row[HS_ROW_HI], bins);
  const W below[2] = {hs_flush_below<W>(amax, 448.0, 0x1p-9), hs_flush_below<W>(amax, 57344.0, 0x1p-16)};
  unsigned int* my_hist = hist + ((threadIdx.x >> 5) % copies) * (bins + 1);
  double m2 = 0, residual = 0, squares = 0;
  unsigned int fp8[2] = {0, 0};
  auto take = [&](W v) {
    if (!hs_finite(v)) return;
    const double d = (double)v - mean;
    residual += d;
    m2 += d * d;
    squares += (double)v * (double)v;
    const W m = hs_abs(v);
    fp8[0] += m > W(0) && m < below[0];
    fp8[1] += m > W(0) && m < below[1];
    atomicAdd(&my_hist[hs_bin(v, plan)], 1u);
  };
  hs_each_value<IN, W>(x, n, take);
  double* partials = reinterpret_cast<double*>(scratch) + HS_PARTIALS;
  // Fields 2..6 of the fold's order are sums (P_S1 .. P_INF): the same fold serves.
  const double mine[P_INF + 1] = {0, 0, m2, residual, (double)fp8[0], (double)fp8[1], squares};
  hs_block_fold(mine, P_INF + 1, red, partials + blockIdx.x * HS_FIELDS);
  hs_flush_histogram(hist, bins, copies, scratch + HS_HIST);
  if (!hs_last_block(&scratch[HS_TICKET_REREAD], flag)) return;
  hs_fold_blocks(partials, P_INF + 1, red);
  const double t_m2 = red[2], t_residual = red[3], t_e4 = red[4], t_e5 = red[5], t_squares = red[6];
  __syncthreads();
  hs_u64* global = scratch + HS_HIST;
  for (int b = threadIdx.x; b < bins; b += blockDim.x) row[HS_HEADER + b] = (double)atomicExch(&global[b], 0ull);
  if (threadIdx.x != 0) return;
  const double count = (double)n - row[HS_ROW_NAN] - row[HS_ROW_INF];
  // The corrected two-pass algorithm: the differences' own sum says what the mean is off by.
  const double shift = t_residual / count;
  double centred = t_m2 - shift * t_residual;
  centred = centred > 0 ? centred : 0.0;
  row[HS_ROW_MEAN] = mean + shift;
  row[HS_ROW_STD] = count > 1 ? __dsqrt_rn(centred / (count - 1)) : 0.0;
  row[HS_ROW_L2] = __dsqrt_rn(t_squares);
  row[HS_ROW_E4M3_UNDERFLOW] = t_e4;
  row[HS_ROW_E5M2_UNDERFLOW] = t_e5;
  scratch[HS_REREAD] = 0;
  scratch[HS_TICKET_REREAD] = 0;
}

// The kernels by the values' type (the names _cuda_stats.py launches).
#define HS_KERNELS(NAME, IN, W)                                                                              \
  HS_GLOBAL hs_read_##NAME(const IN* x, hs_i64 n, int bins, int copies, double* row, double* slot,          \
                           hs_u64* scratch) {                                                               \
    hs_read<IN, W>(x, n, bins, copies, row, slot, scratch);                                                  \
  }                                                                                                          \
  HS_GLOBAL_REREAD hs_reread_##NAME(const IN* x, hs_i64 n, int bins, int copies, double* row, hs_u64* scratch) {    \
    hs_reread<IN, W>(x, n, bins, copies, row, scratch);                                                      \
  }

HS_KERNELS(bf16, hs_bf16, float)
HS_KERNELS(f16, hs_half, float)
HS_KERNELS(f32, float, float)
HS_KERNELS(f64, double, double)
HS_KERNELS(i8, signed char, double)
HS_KERNELS(u8, unsigned char, double)
HS_KERNELS(i16, short, double)
HS_KERNELS(i32, int, double)
HS_KERNELS(i64, long long, double)
