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
#define HS_GLOBAL_WIDE inline void
#define HS_SHARED_BYTES(name) unsigned char* name = hs_emulation::sharedMemory()
#define HS_UNROLL
#else
#define HS_DEV __device__ __forceinline__
#define HS_NOINLINE __device__ __noinline__
// Three blocks of 256 threads a multiprocessor for the read (no spills on sm_80 to sm_12x); two
// for the re-read, which runs only where the read could not complete a row.
#define HS_GLOBAL extern "C" __global__ void __launch_bounds__(256, 3)
#define HS_GLOBAL_REREAD extern "C" __global__ void __launch_bounds__(256, 2)
// The read of values worked in float64 (float64 and integers: rarer, and more registers a value):
// two blocks a multiprocessor, as _cuda_stats.READ_BLOCKS_PER_SM says.
#define HS_GLOBAL_WIDE extern "C" __global__ void __launch_bounds__(256, 2)
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
// Up to this many bins, each thread counts in shared memory of its own (two 16-bit counters a
// word, a word's bank its thread's: no atomics, no conflicts), spilled to the block's histogram
// before a counter could wrap; past it, per-warp histograms take shared atomics.
#define HS_OWN_BINS 64
#define HS_OWN_LIMIT 65535
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

// hs_bin where the plan is narrow (float32 values, a normal float32 span and scale).
HS_DEV int hs_bin_narrow(float v, const hs_plan& p) {
  float at = __fmul_rn(__fsub_rn(v, p.low_f), p.scale_f);
  at = at > 0.0f ? at : 0.0f;
  at = at < p.top_f ? at : p.top_f;
#ifdef HS_EMULATION
  return (int)at;
#else
  // Truncation of 0 <= at < 2^23 on the FMA pipe (the conversion units are the loop's narrowest).
  return __float_as_int(__fadd_rz(at, 8388608.0f)) - 0x4B000000;
#endif
}

// A finite value's bin, clamped to [0, bins - 1] (a NaN position to 0); no contraction into FMA.
template <typename W>
HS_DEV int hs_bin(W v, const hs_plan& p) {
  if (sizeof(W) == 4 && p.narrow) return hs_bin_narrow((float)v, p);
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
  W rare_below;  // a finite value of magnitude in (0, rare_below) takes the rare path
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
  f.rare_below = W(5.9604644775390625e-08);  // float16's smallest subnormal
  if (f.predicted) {
    f.rare_below = f.band_high[0] > f.rare_below ? f.band_high[0] : f.rare_below;
    f.rare_below = f.band_high[1] > f.rare_below ? f.band_high[1] : f.rare_below;
  }
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

// Where a thread counts a value's bin: its own counters (own, bins <= HS_OWN_BINS), or its
// warp's histogram in shared memory (hist).
struct hs_counts {
  unsigned int* hist;  // the block's histogram (own) or this warp's (shared atomics)
  unsigned int* own;   // word w of this thread: own[w * blockDim.x], bins 2w (low half) and 2w + 1
  int words;
  unsigned int taken;  // values counted in own since the last spill
};

HS_DEV hs_counts hs_make_counts(unsigned int* hist, unsigned int* own, int bins, int copies) {
  hs_counts c;
  c.own = own;
  c.hist = own != 0 ? hist : hist + ((threadIdx.x >> 5) % copies) * (bins + 1);
  c.words = (bins + 1) >> 1;
  c.taken = 0;
  return c;
}

// This thread's own counters added to the block's histogram and cleared (rare: out of the loop;
// by value, so that the caller's counters stay in registers).
HS_NOINLINE void hs_spill_own(unsigned int* own, unsigned int* hist, int words) {
  for (int w = 0; w < words; ++w) {
    unsigned int* at = own + w * blockDim.x + threadIdx.x;
    const unsigned int v = *at;
    if (v == 0) continue;
    if (v & 0xffffu) atomicAdd(&hist[2 * w], v & 0xffffu);
    if (v >> 16) atomicAdd(&hist[2 * w + 1], v >> 16);
    *at = 0;
  }
}

// Counts a value in this thread's own counters where `counted` (a finite value).
HS_DEV void hs_count_own(hs_counts& c, int bin, bool counted) {
  c.own[(bin >> 1) * blockDim.x + threadIdx.x] += (unsigned int)counted << ((bin & 1) << 4);
}

// Counts a value in its bin where `counted` (a finite value), with no branch on the value.
HS_DEV void hs_count_bin(hs_counts& c, int bin, bool counted) {
  if (c.own != 0) {
    c.own[(bin >> 1) * blockDim.x + threadIdx.x] += (unsigned int)counted << ((bin & 1) << 4);
  } else if (counted) {
    atomicAdd(&c.hist[bin], 1u);
  }
}

// After `values` more values: spilled while no counter could wrap in the next 32 (two vectors).
HS_DEV void hs_took(hs_counts& c, int values) {
  c.taken += values;
  if (c.own != 0 && c.taken > HS_OWN_LIMIT - 32) {
    hs_spill_own(c.own, c.hist, c.words);
    c.taken = 0;
  }
}

// Every thread's own counters added to the block's histogram: thread t sums word t % words over
// a share of the threads (read rotated by the word, so that a warp's reads meet no bank twice).
HS_DEV void hs_fold_own(const hs_counts& c) {
  __syncthreads();
  if (c.own == 0) return;
  const int threads = blockDim.x, parts = threads / c.words;
  const int w = threadIdx.x % c.words, part = threadIdx.x / c.words;
  if (part >= parts) return;
  unsigned int low = 0, high = 0;
  for (int j = part; j < threads; j += parts) {
    const unsigned int v = c.own[w * threads + (j + w) % threads];
    low += v & 0xffffu;
    high += v >> 16;
  }
  if (low) atomicAdd(&c.hist[2 * w], low);
  if (high) atomicAdd(&c.hist[2 * w + 1], high);
}

// Keeps a value in the fp8 band (rare: out of the loop) for the last block to count exactly.
template <typename W>
HS_NOINLINE void hs_keep_band(W m, bool in_e4, bool in_e5, hs_u64* scratch) {
  for (int k = 0; k < 2; ++k) {
    if (!(k == 0 ? in_e4 : in_e5)) continue;
    const hs_u64 at = atomicAdd(&scratch[HS_BAND_COUNT + k], 1ull);
    if (at < HS_BAND_CAPACITY) reinterpret_cast<double*>(scratch)[HS_BANDS + k * HS_BAND_CAPACITY + at] = (double)m;
  }
}

// The first read's work on one value. The common value (finite, inside float16's range, zero
// or above where float16's and the fp8 formats' underflow may begin) takes no branch: selects and
// predicated adds. The rare one (non-finite, past float16's range, tiny) takes one that counts it
// exactly: NaN or Inf (and nothing else), float16's overflow and underflow, the fp8 counts, the
// fp8 band. PREDICTED: the slot had edges (the histogram and fp8 counts are taken). FAST: the
// thread's own counters and a narrow plan (the common case, with no per-value test of either).
template <bool PREDICTED, bool FAST, typename W>
HS_DEV void hs_take(W v, hs_acc<W>& a, const hs_forecast<W>& f, hs_counts& counts, hs_u64* scratch) {
  const bool finite = hs_finite(v);
  const W m = finite ? hs_abs(v) : W(0);
  const bool some = m > W(0);
  if (!finite || m > W(65504) || (some && m < f.rare_below)) {
    const bool nan = v != v;
    a.count[P_NAN] += nan;
    a.count[P_INF] += !finite && !nan;
    a.count[P_F16O] += m > W(65504);
    a.count[P_F16U] += some && m < W(5.9604644775390625e-08);
    if (PREDICTED) {
      a.count[P_E4] += some && m < f.band_low[0];
      a.count[P_E5] += some && m < f.band_low[1];
      const bool in_e4 = some && m >= f.band_low[0] && m < f.band_high[0];
      const bool in_e5 = some && m >= f.band_low[1] && m < f.band_high[1];
      if (in_e4 || in_e5) hs_keep_band(m, in_e4, in_e5, scratch);
    }
  }
  const W inf = hs_limits<W>::infinity();
  const W low = finite ? v : inf, high = finite ? v : -inf;
  a.lo = low < a.lo ? low : a.lo;
  a.hi = high > a.hi ? high : a.hi;
  const double d = finite ? (double)v - f.shift : 0.0;
  a.s1 += d;
  a.s2 += d * d;
  a.count[P_ZERO] += v == W(0);
  if (!PREDICTED) return;
  if (FAST) {
    hs_count_own(counts, hs_bin_narrow((float)(finite ? v : W(0)), f.plan), finite);
  } else {
    hs_count_bin(counts, hs_bin(finite ? v : W(0), f.plan), finite);
  }
}

// Whether a kernel's bins go to the thread's own counters by a narrow plan (its FAST loops).
template <typename W>
HS_DEV bool hs_fast(const hs_counts& counts, const hs_plan& plan) {
  return counts.own != 0 && sizeof(W) == 4 && plan.narrow;
}

// Reads the values [0, n) as 16-byte vectors where aligned, calling take(value) for each
// value this thread owns (a grid-stride loop; the unaligned head and the tail one at a time).
template <typename IN, typename W, typename Take>
HS_DEV void hs_each_value(const IN* x, hs_i64 n, Take& take, hs_counts& counts) {
  const int per_vector = 16 / (int)sizeof(IN);
  const hs_i64 thread = (hs_i64)blockIdx.x * blockDim.x + threadIdx.x;
  const hs_i64 threads = (hs_i64)gridDim.x * blockDim.x;
  const hs_u64 address = (hs_u64)(const void*)x;
  hs_i64 head = (hs_i64)(((16 - (address & 15)) & 15) / sizeof(IN));
  if (address % sizeof(IN) != 0) head = n;  // never for a tensor's storage: read one at a time
  head = head < n ? head : n;
  for (hs_i64 i = thread; i < head; i += threads) {
    take(hs_value<IN, W>(x[i]));
    hs_took(counts, 1);
  }
  const hs_i64 vectors = (n - head) / per_vector;
  const uint4* body = reinterpret_cast<const uint4*>(x + head);
  union Vector {
    uint4 raw;
    IN v[16 / sizeof(IN)];
  };
  // Two loads in flight a thread before either's values are taken (one is too few bytes in
  // flight to keep the memory busy); the values in the same order as one at a time. One-byte
  // values: sixteen a load are work enough (and 32 would spill).
  const bool pairs = sizeof(IN) > 1;
  hs_i64 i = thread;
  for (; pairs && i + threads < vectors; i += 2 * threads) {
    Vector a, b;
    a.raw = body[i];
    b.raw = body[i + threads];
    HS_UNROLL
    for (int j = 0; j < per_vector; ++j) take(hs_value<IN, W>(a.v[j]));
    HS_UNROLL
    for (int j = 0; j < per_vector; ++j) take(hs_value<IN, W>(b.v[j]));
    hs_took(counts, 2 * per_vector);
  }
  for (; i < vectors; i += threads) {
    Vector a;
    a.raw = body[i];
    HS_UNROLL
    for (int j = 0; j < per_vector; ++j) take(hs_value<IN, W>(a.v[j]));
    hs_took(counts, per_vector);
  }
  for (hs_i64 i = head + vectors * per_vector + thread; i < n; i += threads) {
    take(hs_value<IN, W>(x[i]));
    hs_took(counts, 1);
  }
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

// The shared memory: the fold's room, a flag, then `copies` histograms of bins + 1 counters
// (one where bins <= HS_OWN_BINS), then each thread's own counters ((bins + 1) / 2 words a
// thread) where bins <= HS_OWN_BINS (_cuda_stats.shared_bytes says the same).
HS_DEV hs_counts hs_shared_layout(unsigned char* smem, int bins, int copies, double** red, bool** flag) {
  *red = reinterpret_cast<double*>(smem);
  *flag = reinterpret_cast<bool*>(smem + 32 * HS_FIELDS * 8);
  unsigned int* hist = reinterpret_cast<unsigned int*>(smem + 32 * HS_FIELDS * 8 + 16);
  const bool own = bins <= HS_OWN_BINS;
  copies = own ? 1 : copies;
  unsigned int* mine = own ? hist + copies * (bins + 1) : 0;
  const int words = own ? ((bins + 1) >> 1) * (int)blockDim.x : 0;
  for (int i = threadIdx.x; i < copies * (bins + 1); i += blockDim.x) hist[i] = 0;
  for (int i = threadIdx.x; i < words; i += blockDim.x) mine[i] = 0;
  __syncthreads();
  return hs_make_counts(hist, mine, bins, copies);
}

// The block's shared histograms added to the global counters: one atomic per non-empty bin.
HS_DEV void hs_flush_histogram(const hs_counts& counts, const unsigned int* hist, int bins, int copies,
                               hs_u64* global) {
  hs_fold_own(counts);
  __syncthreads();
  copies = counts.own != 0 ? 1 : copies;
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
  __syncthreads();  // every thread has read it before a next call resets it
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
  hs_counts counts = hs_shared_layout(smem, bins, copies, &red, &flag);
  unsigned int* hist = reinterpret_cast<unsigned int*>(smem + 32 * HS_FIELDS * 8 + 16);
  const hs_forecast<W> f = hs_read_slot<W>(slot, bins);
  hs_acc<W> a;
  hs_acc_init(a);
  if (f.predicted && hs_fast<W>(counts, f.plan)) {
    auto take = [&](W v) { hs_take<true, true>(v, a, f, counts, scratch); };
    hs_each_value<IN, W>(x, n, take, counts);
  } else if (f.predicted) {
    auto take = [&](W v) { hs_take<true, false>(v, a, f, counts, scratch); };
    hs_each_value<IN, W>(x, n, take, counts);
  } else {
    auto take = [&](W v) { hs_take<false, false>(v, a, f, counts, scratch); };
    hs_each_value<IN, W>(x, n, take, counts);
  }
  double mine[P_COUNT];
  mine[P_MIN] = (double)a.lo;
  mine[P_MAX] = (double)a.hi;
  mine[P_S1] = a.s1;
  mine[P_S2] = a.s2;
HS_UNROLL
  for (int i = P_ZERO; i < P_COUNT; ++i) mine[i] = (double)a.count[i];
  double* partials = reinterpret_cast<double*>(scratch) + HS_PARTIALS;
  hs_block_fold(mine, P_COUNT, red, partials + blockIdx.x * HS_FIELDS);
  if (f.predicted) hs_flush_histogram(counts, hist, bins, copies, scratch + HS_HIST);
  if (!hs_last_block(&scratch[HS_TICKET_READ], flag)) return;
  hs_fold_blocks(partials, P_COUNT, red);
  hs_finish_read<W>(n, bins, row, slot, scratch, red, hist);
}

// The second read's work on one value, without branches on the value (as the first read's;
// FAST as there).
template <typename W>
struct hs_again {
  double mean;
  hs_plan plan;
  W below[2];
  W rare_below;  // a finite value of magnitude in (0, rare_below) counts for fp8 (rare: a branch)
  hs_counts* counts;
  double m2, residual, squares;
  unsigned int fp8[2];
  template <bool FAST>
  HS_DEV void take(W v) {
    const bool finite = hs_finite(v);
    const double d = finite ? (double)v - mean : 0.0, w = finite ? (double)v : 0.0;
    residual += d;
    m2 += d * d;
    squares += w * w;
    const W m = finite ? hs_abs(v) : W(0);
    if (sizeof(W) == 4) {  // a branch where registers allow it
      if (m > W(0) && m < rare_below) {
        fp8[0] += m < below[0];
        fp8[1] += m < below[1];
      }
    } else {
      fp8[0] += m > W(0) && m < below[0];
      fp8[1] += m > W(0) && m < below[1];
    }
    if (FAST) {
      hs_count_own(*counts, hs_bin_narrow((float)(finite ? v : W(0)), plan), finite);
    } else {
      hs_count_bin(*counts, hs_bin(finite ? v : W(0), plan), finite);
    }
  }
};

// The second read, where the first could not complete the row.
template <typename IN, typename W>
HS_DEV void hs_reread(const IN* x, hs_i64 n, int bins, int copies, double* row, hs_u64* scratch) {
  if (reinterpret_cast<volatile hs_u64*>(scratch)[HS_REREAD] == 0) return;
  HS_SHARED_BYTES(smem);
  double* red;
  bool* flag;
  hs_counts counts = hs_shared_layout(smem, bins, copies, &red, &flag);
  unsigned int* hist = reinterpret_cast<unsigned int*>(smem + 32 * HS_FIELDS * 8 + 16);
  const double mean = row[HS_ROW_MEAN], amax = row[HS_ROW_AMAX];
  const hs_plan plan = hs_make_plan<W>(row[HS_ROW_LO], row[HS_ROW_HI], bins);
  const W below[2] = {hs_flush_below<W>(amax, 448.0, 0x1p-9), hs_flush_below<W>(amax, 57344.0, 0x1p-16)};
  hs_again<W> r = {mean, plan, {below[0], below[1]}, below[0] > below[1] ? below[0] : below[1], &counts, 0, 0, 0,
                   {0, 0}};
  if (hs_fast<W>(counts, plan)) {
    auto take = [&](W v) { r.template take<true>(v); };
    hs_each_value<IN, W>(x, n, take, counts);
  } else {
    auto take = [&](W v) { r.template take<false>(v); };
    hs_each_value<IN, W>(x, n, take, counts);
  }
  const double m2 = r.m2, residual = r.residual, squares = r.squares;
  const unsigned int fp8[2] = {r.fp8[0], r.fp8[1]};
  double* partials = reinterpret_cast<double*>(scratch) + HS_PARTIALS;
  // Fields 2..6 of the fold's order are sums (P_S1 .. P_INF): the same fold serves.
  const double mine[P_INF + 1] = {0, 0, m2, residual, (double)fp8[0], (double)fp8[1], squares};
  hs_block_fold(mine, P_INF + 1, red, partials + blockIdx.x * HS_FIELDS);
  hs_flush_histogram(counts, hist, bins, copies, scratch + HS_HIST);
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
#define HS_KERNELS(NAME, IN, W, READ_GLOBAL)                                                                 \
  READ_GLOBAL hs_read_##NAME(const IN* x, hs_i64 n, int bins, int copies, double* row, double* slot,          \
                           hs_u64* scratch) {                                                               \
    hs_read<IN, W>(x, n, bins, copies, row, slot, scratch);                                                  \
  }                                                                                                          \
  HS_GLOBAL_REREAD hs_reread_##NAME(const IN* x, hs_i64 n, int bins, int copies, double* row, hs_u64* scratch) {    \
    hs_reread<IN, W>(x, n, bins, copies, row, scratch);                                                      \
  }

HS_KERNELS(bf16, hs_bf16, float, HS_GLOBAL)
HS_KERNELS(f16, hs_half, float, HS_GLOBAL)
HS_KERNELS(f32, float, float, HS_GLOBAL)
HS_KERNELS(f64, double, double, HS_GLOBAL_WIDE)
HS_KERNELS(i8, signed char, double, HS_GLOBAL_WIDE)
HS_KERNELS(u8, unsigned char, double, HS_GLOBAL_WIDE)
HS_KERNELS(i16, short, double, HS_GLOBAL_WIDE)
HS_KERNELS(i32, int, double, HS_GLOBAL_WIDE)
HS_KERNELS(i64, long long, double, HS_GLOBAL_WIDE)
