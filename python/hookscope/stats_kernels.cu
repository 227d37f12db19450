// HookScope's statistics of a captured tensor on an NVIDIA GPU: CUDA C compiled at first use by
// NVRTC (_cuda_stats.py) and launched through the driver API. The row's meanings are _stats's
// (docs/export-format.md); its layout is RowLayout.h's (row_layout in the package).
//
// One launch a capture where its blocks can wait for one another, queued, with no host
// synchronisation:
// - hs_read_*: one read of the values. Per thread, in registers: the finite min and max, the sum
//   and sum of squares of (v - shift) (float64, from float32 sums per load on the common path),
//   the zero, NaN and Inf counts and the float16 counts; per warp, a histogram in shared memory
//   between edges known before the read (the same series' previous range, widened: its "slot"),
//   and the values below where the fp8 underflow can begin given the previous amax (plus those in
//   the band where it may, kept in a small buffer). Most 16-byte loads need none of the counts:
//   one test on their raw bits sends them down a short common path (hs_fast_*; about 17 machine
//   instructions a value for bf16, tests/python/read_loop_count.py), the others value by value
//   through the exact code (hs_take). Warp shuffles at the end, one partial a block, one global
//   atomic per bin per block. The last block folds the partials in a fixed order and decides:
//   where every finite value fell inside the edges, filled at least half their span, the fp8
//   thresholds of this step's amax fall in the band and the shift was near the mean, the row is
//   complete (one read); else it writes this step's edges and sets the re-read flag. It writes the
//   series' next slot. With `wait` (a launch of one block, or a cooperative one: every block
//   resident), every block then learns the verdict and, where it says so, reads again at once.
// - hs_reread_*: the second read where the read's launch could not wait (no cooperative launch,
//   one-byte values): returns at once unless the flag is set; else reads again: the histogram
//   between this step's finite min and max, the second moment about the mean (corrected
//   two-pass), the fp8 counts by this step's amax.
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
#define HS_VERDICT 7     // a one-launch read's verdict: 1 complete, 2 read again, + 4 a block that saw it
#define HS_HIST 8
#define HS_MAX_BINS 4096
#define HS_PARTIALS (HS_HIST + HS_MAX_BINS)
#define HS_MAX_BLOCKS 2048
#define HS_FIELDS 16     // a block's partial: see the P_ names below
#define HS_BANDS (HS_PARTIALS + HS_MAX_BLOCKS * HS_FIELDS)
#define HS_BAND_CAPACITY 8192
#define HS_DRIFT (HS_BANDS + 2 * HS_BAND_CAPACITY)  // and + 1: each group's drift (float64; 0: none yet)
#define HS_SCRATCH_WORDS (HS_DRIFT + 4)
// A series' slot (float64): valid, low, high, amax, shift (the previous mean), its drift group
// (set by _cuda_stats: 0 none, 1 forward values, 2 gradients), whether its values had a spread.
#define HS_SLOT_WORDS 8
#define HS_SLOT_GROUP 5
#define HS_SLOT_SPREAD 6
// The next step's edges: this step's range widened by this much of its span on each side. A
// range symmetric about zero that is scaled by 0.71 to 1.41 (1 / sqrt 2 to sqrt 2) then still
// fits and fills half the edges: one read for a tensor whose scale drifts either way alike.
#define HS_MARGIN 0.25
// A step's values grow or shrink together (the loss scales every gradient, the batch every
// activation): the last block of each capture of a group folds its amax's change since the
// series' previous capture into the group's drift, a geometric mean weighted by this much (square
// roots only: the same bits on every machine), and the next series of the group scales its
// forecast by it. Each change counts at most fourfold either way.
#define HS_DRIFT_WEIGHT 0.25
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

// The few machine instructions the common path is built from (hs_fast_*), each with its host
// twin for the emulation: packed 16-bit integer maxima (sm_90 has them; older GPUs emulate),
// packed bfloat16/float16 minima and maxima, a byte permute that copies each byte's sign, and an
// add rounded toward zero.
#ifdef HS_EMULATION
HS_DEV unsigned int hs_max_u16x2(unsigned int a, unsigned int b) {
  const unsigned int lo = (a & 0xffffu) > (b & 0xffffu) ? (a & 0xffffu) : (b & 0xffffu);
  return ((a >> 16) > (b >> 16) ? (a & 0xffff0000u) : (b & 0xffff0000u)) | lo;
}
HS_DEV unsigned int hs_max_s16x2(unsigned int a, unsigned int b) {
  const short alo = (short)(a & 0xffffu), blo = (short)(b & 0xffffu);
  const short ahi = (short)(a >> 16), bhi = (short)(b >> 16);
  return ((unsigned int)(unsigned short)(ahi > bhi ? ahi : bhi) << 16) | (unsigned short)(alo > blo ? alo : blo);
}
HS_DEV unsigned int hs_prmt(unsigned int a, unsigned int b, unsigned int selector) {
  const unsigned long long bytes = ((unsigned long long)b << 32) | a;
  unsigned int out = 0;
  for (int i = 0; i < 4; ++i) {
    const unsigned int nibble = (selector >> (4 * i)) & 0xfu;
    unsigned int byte = (unsigned int)(bytes >> (8 * (nibble & 7u))) & 0xffu;
    if (nibble & 8u) byte = (byte & 0x80u) ? 0xffu : 0u;
    out |= byte << (8 * i);
  }
  return out;
}
HS_DEV int __popc(unsigned int v) { return __builtin_popcount(v); }
#else
HS_DEV unsigned int hs_max_u16x2(unsigned int a, unsigned int b) {
#if __CUDA_ARCH__ >= 900
  unsigned int d;
  asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return __vmaxu2(a, b);
#endif
}
HS_DEV unsigned int hs_max_s16x2(unsigned int a, unsigned int b) {
#if __CUDA_ARCH__ >= 900
  unsigned int d;
  asm("max.s16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return __vmaxs2(a, b);
#endif
}
HS_DEV unsigned int hs_prmt(unsigned int a, unsigned int b, unsigned int selector) {
  unsigned int d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}
#endif

// A word another block writes, read from memory each time; a short pause while waiting for it.
HS_DEV hs_u64 hs_load_volatile(const hs_u64* word) {
#ifdef HS_EMULATION
  return __atomic_load_n(word, __ATOMIC_SEQ_CST);
#else
  return *reinterpret_cast<const volatile hs_u64*>(word);
#endif
}
HS_DEV void hs_pause() {
#ifdef HS_EMULATION
  std::this_thread::yield();
#elif __CUDA_ARCH__ >= 700
  __nanosleep(100);
#endif
}

// Float32 a + b rounded toward zero (exact in the emulation for the sums the bins make: a value
// in [0, 4096) plus 2^23).
HS_DEV float hs_add_rz(float a, float b) {
#ifdef HS_EMULATION
  const double exact = (double)a + (double)b;
  float f = (float)exact;
  if (std::fabs((double)f) > std::fabs(exact)) f = std::nextafter(f, 0.0f);
  return f;
#else
  return __fadd_rz(a, b);
#endif
}

template <typename IN, typename W> HS_DEV W hs_value(IN v) { return (W)v; }
template <> HS_DEV float hs_value<hs_bf16, float>(hs_bf16 v) { return hs_as_float((unsigned int)v.bits << 16); }
template <> HS_DEV float hs_value<hs_half, float>(hs_half v) { return hs_half_to_float(v.bits); }

// Two 16-bit floats in a word: its lanes as float32, and lane-wise minima and maxima of finite
// values (the common path's; -0 and +0 may come out either way, which compare equal).
template <typename IN> struct hs_pair;
template <> struct hs_pair<hs_bf16> {
  static HS_DEV float low(unsigned int w) { return hs_as_float(w << 16); }
  static HS_DEV float high(unsigned int w) { return hs_as_float(w & 0xffff0000u); }
  static constexpr unsigned int lowest = 0xff80ff80u, highest = 0x7f807f80u;  // -inf, +inf
  static HS_DEV float lane(unsigned short bits) { return hs_as_float((unsigned int)bits << 16); }
#if !defined(HS_EMULATION) && __CUDA_ARCH__ >= 800
  static HS_DEV unsigned int min(unsigned int a, unsigned int b) {
    unsigned int d;
    asm("min.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
  }
  static HS_DEV unsigned int max(unsigned int a, unsigned int b) {
    unsigned int d;
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
  }
#endif
};
template <> struct hs_pair<hs_half> {
  static HS_DEV float low(unsigned int w) { return hs_half_to_float((unsigned short)(w & 0xffffu)); }
  static HS_DEV float high(unsigned int w) { return hs_half_to_float((unsigned short)(w >> 16)); }
  static constexpr unsigned int lowest = 0xfc00fc00u, highest = 0x7c007c00u;
  static HS_DEV float lane(unsigned short bits) { return hs_half_to_float(bits); }
#if !defined(HS_EMULATION) && __CUDA_ARCH__ >= 800
  static HS_DEV unsigned int min(unsigned int a, unsigned int b) {
    unsigned int d;
    asm("min.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
  }
  static HS_DEV unsigned int max(unsigned int a, unsigned int b) {
    unsigned int d;
    asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
  }
#endif
};
#if defined(HS_EMULATION) || __CUDA_ARCH__ < 800
// Lane by lane in float32 (the emulation's, and GPUs older than sm_80, which have no packed
// bfloat16 or float16 minimum).
template <typename IN, bool Max>
HS_DEV unsigned int hs_pick_lanes(unsigned int a, unsigned int b) {
  unsigned int out = 0;
HS_UNROLL
  for (int shift = 0; shift < 32; shift += 16) {
    const unsigned short x = (unsigned short)(a >> shift), y = (unsigned short)(b >> shift);
    const float fx = hs_pair<IN>::lane(x), fy = hs_pair<IN>::lane(y);
    const bool take_y = Max ? fy > fx : fy < fx;
    out |= (unsigned int)(take_y ? y : x) << shift;
  }
  return out;
}
template <typename IN> HS_DEV unsigned int hs_pair_min(unsigned int a, unsigned int b) { return hs_pick_lanes<IN, false>(a, b); }
template <typename IN> HS_DEV unsigned int hs_pair_max(unsigned int a, unsigned int b) { return hs_pick_lanes<IN, true>(a, b); }
#else
template <typename IN> HS_DEV unsigned int hs_pair_min(unsigned int a, unsigned int b) { return hs_pair<IN>::min(a, b); }
template <typename IN> HS_DEV unsigned int hs_pair_max(unsigned int a, unsigned int b) { return hs_pair<IN>::max(a, b); }
#endif

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

// The drift a slot's group has on this stream (1 where none, or for a series of one value).
HS_DEV double hs_drift(const double* slot, const hs_u64* scratch) {
  if (slot[HS_SLOT_SPREAD] != 1.0) return 1.0;
  const int group = (int)slot[HS_SLOT_GROUP];
  if (group < 1 || group > 2) return 1.0;
  const double drift = __longlong_as_double((hs_i64)hs_load_volatile(&scratch[HS_DRIFT + group - 1]));
  return drift > 0 ? drift : 1.0;
}

template <typename W>
HS_DEV hs_forecast<W> hs_read_slot(const double* slot, int bins, const hs_u64* scratch) {
  hs_forecast<W> f;
  f.predicted = slot != 0 && slot[0] == 1.0;
  double drift = f.predicted ? hs_drift(slot, scratch) : 1.0;
  if (f.predicted && !(hs_finite(slot[1] * drift) && hs_finite(slot[2] * drift) &&
                       hs_finite(slot[2] * drift - slot[1] * drift)))
    drift = 1.0;
  // Float32 work sums about a float32 shift (the common path subtracts it in float32); a shift
  // past float32's range is no use to such values.
  const double shift = f.predicted ? slot[4] * drift : 0.0;
  f.shift = sizeof(W) == 4 ? (hs_abs(shift) <= 3.4e38 ? (double)(float)shift : 0.0) : shift;
  f.low = f.predicted ? slot[1] * drift : 0.0;
  f.high = f.predicted ? slot[2] * drift : 1.0;
  f.amax = f.predicted ? slot[3] * drift : 0.0;
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

// [rare path] Each value on its own, exactly (tests/python/read_loop_count.py counts the loop
// that steps around these lines).
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

// The values of one 16-byte vector, each through take.
template <typename IN, typename W, typename Take>
HS_DEV void hs_take_vector(uint4 raw, Take& take) {
  union {
    uint4 raw;
    IN v[16 / sizeof(IN)];
  } u;
  u.raw = raw;
  HS_UNROLL
  for (int j = 0; j < (int)(16 / sizeof(IN)); ++j) take(hs_value<IN, W>(u.v[j]));
}
// [/rare path]

// Reads the values [0, n) as 16-byte vectors where aligned: the unaligned head and the tail one
// at a time through take (a grid-stride loop), the vectors through body(vectors, count).
template <typename IN, typename W, typename Take, typename Body>
HS_DEV void hs_each_value(const IN* x, hs_i64 n, Take& take, Body& body) {
  const int per_vector = 16 / (int)sizeof(IN);
  const hs_i64 thread = (hs_i64)blockIdx.x * blockDim.x + threadIdx.x;
  const hs_i64 threads = (hs_i64)gridDim.x * blockDim.x;
  const hs_u64 address = (hs_u64)(const void*)x;
  hs_i64 head = (hs_i64)(((16 - (address & 15)) & 15) / sizeof(IN));
  if (address % sizeof(IN) != 0) head = n;  // never for a tensor's storage: read one at a time
  head = head < n ? head : n;
  for (hs_i64 i = thread; i < head; i += threads) take(hs_value<IN, W>(x[i]));
  const hs_i64 vectors = (n - head) / per_vector;
  body(reinterpret_cast<const uint4*>(x + head), vectors);
  for (hs_i64 i = head + vectors * per_vector + thread; i < n; i += threads) take(hs_value<IN, W>(x[i]));
}

// Every value through take: the vectors a thread owns in a grid-stride loop.
template <typename IN, typename W, typename Take>
HS_DEV void hs_each_value(const IN* x, hs_i64 n, Take& take) {
  auto body = [&](const uint4* vectors, hs_i64 count) {
    const hs_i64 thread = (hs_i64)blockIdx.x * blockDim.x + threadIdx.x;
    const hs_i64 threads = (hs_i64)gridDim.x * blockDim.x;
    for (hs_i64 i = thread; i < count; i += threads) hs_take_vector<IN, W>(vectors[i], take);
  };
  hs_each_value<IN, W>(x, n, take, body);
}

// [common path] (tests/python/read_loop_count.py finds the read loop in these lines)
// The common path. Most 16-byte loads hold only values that need no count but the zeros: 0, or
// finite with a magnitude from T (the smallest at or above float16's underflow edge 2^-24 and
// both fp8 bands' upper edges, so no value below any threshold that counts) up to float16's
// largest. One test a load on the raw bits finds them; they take the histogram, packed minima
// and maxima, float32 moments per load and the zeros from the bits. Any other load (a rare one)
// goes through hs_take value by value, exactly as a read with no forecast does.
// For bfloat16 and float16 the test works on 16-bit lanes: (bits | 0x8000) - T is 0x8000 - T for
// a 0, below 0x8000 for a magnitude under T, from 0x8000 for one at or above (no borrow between
// lanes); a signed maximum finds the first, an unsigned maximum the values past float16's range
// (NaN and Inf among them). Float32 works on the 32-bit magnitudes less one in the same way.
struct hs_fast {
  bool on;
  unsigned int edge;          // T as a magnitude's bit pattern (16-bit for bf16/f16, 32-bit for f32)
  float shift, low, scale, top;
#ifdef HS_EMULATION
  unsigned int* hist;
#else
  unsigned int hist;          // the shared address of bin 0, less 0x4b000000 bins (wrapping)
#endif
};

// Counts a bin given as the float32 bits of 2^23 + bin (hs_fast_value's rounding toward zero).
HS_DEV void hs_fast_count(const hs_fast& p, unsigned int biased) {
#ifdef HS_EMULATION
  atomicAdd(&p.hist[biased - 0x4b000000u], 1u);
#else
  asm volatile("red.shared.add.u32 [%0], 1;" ::"r"(p.hist + biased * 4u) : "memory");
#endif
}

// By the values' type: the lanes the common path tests (none: no common path), the first
// magnitude pattern past float16's largest (65504), and a magnitude pattern's value.
template <typename IN> struct hs_fast_kind {
  static constexpr int lanes = 0;
  static constexpr unsigned int past = 0;
  static HS_DEV float value(unsigned int) { return 0.0f; }
};
template <> struct hs_fast_kind<hs_bf16> {
  static constexpr int lanes = 16;
  static constexpr unsigned int past = 0x4780u;  // bfloat16 65536
  static HS_DEV float value(unsigned int bits) { return hs_pair<hs_bf16>::low(bits); }
};
template <> struct hs_fast_kind<hs_half> {
  static constexpr int lanes = 16;
  static constexpr unsigned int past = 0x7c00u;  // infinity: every finite float16 fits
  static HS_DEV float value(unsigned int bits) { return hs_pair<hs_half>::low(bits); }
};
template <> struct hs_fast_kind<float> {
  static constexpr int lanes = 32;
  static constexpr unsigned int past = 0x477fe001u;
  static HS_DEV float value(unsigned int bits) { return hs_as_float(bits); }
};

// The smallest magnitude pattern in [1, past) whose value is at least w (past where none is).
template <typename IN>
HS_DEV unsigned int hs_pattern_at_least(float w, unsigned int past) {
  unsigned int lo = 1, hi = past;
  while (lo < hi) {
    const unsigned int mid = (lo + hi) / 2;
    if (hs_fast_kind<IN>::value(mid) >= w) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// Whether the common path serves this read (a forecast binned in float32, a shift whose squared
// differences stay normal float32 numbers for the values it takes), and its constants.
template <typename IN, typename W>
HS_DEV hs_fast hs_fast_plan(const hs_forecast<W>& f, unsigned int* hist) {
  hs_fast p;
  p.on = false;
  p.edge = 0;
  p.shift = (float)f.shift;
  p.low = f.plan.low_f;
  p.scale = f.plan.scale_f;
  p.top = f.plan.top_f;
#ifdef HS_EMULATION
  p.hist = hist;
#else
  p.hist = (unsigned int)__cvta_generic_to_shared(hist) - 0x4b000000u * 4u;
#endif
  if constexpr (hs_fast_kind<IN>::lanes != 0 && sizeof(W) == 4) {
    if (!f.predicted || !f.plan.narrow) return p;
    const float shift_size = hs_abs(p.shift);
    if (shift_size != 0.0f && !(shift_size >= 0x1p-60f && shift_size <= 0x1p60f)) return p;
    float edge = (float)5.9604644775390625e-08;
    for (int k = 0; k < 2; ++k) edge = (float)f.band_high[k] > edge ? (float)f.band_high[k] : edge;
    p.edge = hs_pattern_at_least<IN>(edge, hs_fast_kind<IN>::past);
    p.on = p.edge < hs_fast_kind<IN>::past;
  }
  return p;
}

// One value of a common load: its bin (rounded toward zero by adding 2^23: no conversion), and
// its difference from the shift for the moments.
HS_DEV float hs_fast_value(float v, const hs_fast& p) {
  const float at = fminf(fmaxf(__fmul_rn(__fsub_rn(v, p.low), p.scale), 0.0f), p.top);
  hs_fast_count(p, __float_as_uint(hs_add_rz(at, 8388608.0f)));
  return __fsub_rn(v, p.shift);
}

// A load's moments about the shift in float32, added to the thread's float64 sums: the
// differences summed pairwise, their squares in a chain of fused adds.
template <int N>
HS_DEV void hs_fast_moments(const float (&d)[N], double& s1, double& s2) {
  float sum[N];
  HS_UNROLL
  for (int k = 0; k < N; ++k) sum[k] = d[k];
  HS_UNROLL
  for (int width = N / 2; width > 0; width /= 2) {
    HS_UNROLL
    for (int k = 0; k < width; ++k) sum[k] = sum[2 * k] + sum[2 * k + 1];
  }
  float squares = __fmul_rn(d[0], d[0]);
  HS_UNROLL
  for (int k = 1; k < N; ++k) squares = __fmaf_rn(d[k], d[k], squares);
  s1 += sum[0];
  s2 += squares;
}

// The common-path test of a load of bfloat16 or float16 pairs for an edge T: each word's lanes
// as (bits | 0x8000) - T (hs_fast's note), and whether every lane is a 0 or common.
struct hs_lane_test {
  unsigned int lift, zero, top;
  template <typename IN>
  static HS_DEV hs_lane_test make(unsigned int edge) {
    hs_lane_test t;
    t.lift = edge * 0x10001u;
    t.zero = (0x8000u - edge) * 0x10001u;
    t.top = (0x8000u + hs_fast_kind<IN>::past - 1u - edge) * 0x10001u;
    return t;
  }
  HS_DEV bool common(uint4 u, unsigned int (&r)[4]) const {
    r[0] = (u.x | 0x80008000u) - lift;
    r[1] = (u.y | 0x80008000u) - lift;
    r[2] = (u.z | 0x80008000u) - lift;
    r[3] = (u.w | 0x80008000u) - lift;
    const unsigned int small = hs_max_s16x2(hs_max_s16x2(hs_max_s16x2(r[0], r[1]), hs_max_s16x2(r[2], r[3])), zero);
    const unsigned int large = hs_max_u16x2(hs_max_u16x2(hs_max_u16x2(r[0], r[1]), hs_max_u16x2(r[2], r[3])), top);
    return small == zero && large == top;
  }
  // Four bits for each non-zero value of a common load: each lane's sign byte copied, merged.
  static HS_DEV unsigned int nonzero_bits(const unsigned int (&r)[4]) {
    return __popc((hs_prmt(r[0], r[1], 0xfdb9u) & 0x0f0f0f0fu) | (hs_prmt(r[2], r[3], 0xfdb9u) & 0xf0f0f0f0u));
  }
};

// A thread's vectors of bfloat16 or float16 pairs.
template <typename IN, typename Take>
HS_DEV void hs_fast_pairs(const uint4* vectors, hs_i64 count, const hs_fast& p, hs_acc<float>& a, Take& take) {
  const hs_i64 thread = (hs_i64)blockIdx.x * blockDim.x + threadIdx.x;
  const hs_i64 threads = (hs_i64)gridDim.x * blockDim.x;
  const hs_lane_test test = hs_lane_test::make<IN>(p.edge);
  unsigned int lo = hs_pair<IN>::highest, hi = hs_pair<IN>::lowest, nonzero = 0, rare = 0;
  double s1 = 0, s2 = 0;
  for (hs_i64 i = thread; i < count; i += threads) {
    const uint4 u = vectors[i];
    unsigned int r[4];
    if (!test.common(u, r)) {
      ++rare;
      hs_take_vector<IN, float>(u, take);
      continue;
    }
    lo = hs_pair_min<IN>(lo, hs_pair_min<IN>(hs_pair_min<IN>(u.x, u.y), hs_pair_min<IN>(u.z, u.w)));
    hi = hs_pair_max<IN>(hi, hs_pair_max<IN>(hs_pair_max<IN>(u.x, u.y), hs_pair_max<IN>(u.z, u.w)));
    nonzero += hs_lane_test::nonzero_bits(r);
    const unsigned int words[4] = {u.x, u.y, u.z, u.w};
    float d[8];
    HS_UNROLL
    for (int k = 0; k < 4; ++k) {
      d[2 * k] = hs_fast_value(hs_pair<IN>::low(words[k]), p);
      d[2 * k + 1] = hs_fast_value(hs_pair<IN>::high(words[k]), p);
    }
    hs_fast_moments(d, s1, s2);
  }
  const hs_i64 loads = thread < count ? (count - 1 - thread) / threads + 1 : 0;
  const float lows[2] = {hs_pair<IN>::low(lo), hs_pair<IN>::high(lo)};
  const float highs[2] = {hs_pair<IN>::low(hi), hs_pair<IN>::high(hi)};
  for (int k = 0; k < 2; ++k) {
    a.lo = lows[k] < a.lo ? lows[k] : a.lo;
    a.hi = highs[k] > a.hi ? highs[k] : a.hi;
  }
  a.s1 += s1;
  a.s2 += s2;
  a.count[P_ZERO] += (unsigned int)(8 * (loads - rare)) - nonzero / 4;
#ifdef HS_EMULATION
  hs_emulation::commonLoads += loads - rare;
#endif
}

// Whether a load of four float32 values is common for an edge T, and its zeros. A magnitude less
// one makes 0 the largest unsigned number and the only negative one: an unsigned minimum finds
// the magnitudes under T, a signed maximum those past float16's range (NaN and Inf among them).
HS_DEV bool hs_fast_floats_common(uint4 u, unsigned int edge, unsigned int& zeros) {
  const unsigned int words[4] = {u.x, u.y, u.z, u.w};
  unsigned int fewest = 0xffffffffu;
  int most = -1;
  zeros = 0;
  HS_UNROLL
  for (int k = 0; k < 4; ++k) {
    const unsigned int c = (words[k] & 0x7fffffffu) - 1u;
    fewest = c < fewest ? c : fewest;
    most = (int)c > most ? (int)c : most;
    zeros += c >> 31;
  }
  return fewest >= edge - 1u && most < (int)(hs_fast_kind<float>::past - 1u);
}

// A thread's vectors of float32 values.
template <typename Take>
HS_DEV void hs_fast_floats(const uint4* vectors, hs_i64 count, const hs_fast& p, hs_acc<float>& a, Take& take) {
  const hs_i64 thread = (hs_i64)blockIdx.x * blockDim.x + threadIdx.x;
  const hs_i64 threads = (hs_i64)gridDim.x * blockDim.x;
  float lo = hs_limits<float>::infinity(), hi = -hs_limits<float>::infinity();
  unsigned int zeros = 0;
  double s1 = 0, s2 = 0;
  for (hs_i64 i = thread; i < count; i += threads) {
    const uint4 u = vectors[i];
    unsigned int zeros_here;
    if (!hs_fast_floats_common(u, p.edge, zeros_here)) {
      hs_take_vector<float, float>(u, take);
      continue;
    }
#ifdef HS_EMULATION
    ++hs_emulation::commonLoads;
#endif
    zeros += zeros_here;
    const unsigned int words[4] = {u.x, u.y, u.z, u.w};
    float d[4];
    HS_UNROLL
    for (int k = 0; k < 4; ++k) {
      const float v = hs_as_float(words[k]);
      lo = fminf(lo, v);
      hi = fmaxf(hi, v);
      d[k] = hs_fast_value(v, p);
    }
    hs_fast_moments(d, s1, s2);
  }
  a.lo = lo < a.lo ? lo : a.lo;
  a.hi = hi > a.hi ? hi : a.hi;
  a.s1 += s1;
  a.s2 += s2;
  a.count[P_ZERO] += zeros;
}

// [/common path]

template <typename IN, typename W, typename Take>
HS_DEV void hs_fast_vectors(const uint4* vectors, hs_i64 count, const hs_fast& p, hs_acc<W>& a, Take& take) {
  if constexpr (hs_fast_kind<IN>::lanes == 16) {
    hs_fast_pairs<IN>(vectors, count, p, a, take);
  } else if constexpr (hs_fast_kind<IN>::lanes == 32) {
    hs_fast_floats(vectors, count, p, a, take);
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

// In the last block's thread 0: this capture's amax against its series' previous one folded into
// its group's drift on this stream (before the slot is written anew).
HS_DEV void hs_fold_drift(const double* slot, hs_u64* scratch, double amax) {
  const int group = (int)slot[HS_SLOT_GROUP];
  const double before = slot[3];
  if (group < 1 || group > 2 || slot[0] != 1.0 || !(before > 0) || !(amax > 0) || !hs_finite(amax)) return;
  double change = amax / before;
  change = change < 0.25 ? 0.25 : (change > 4.0 ? 4.0 : change);
  const double held = __longlong_as_double((hs_i64)scratch[HS_DRIFT + group - 1]);
  const double drift = held > 0 ? held : 1.0;
  static_assert(HS_DRIFT_WEIGHT == 0.25, "the fold below is drift^(3/4) * change^(1/4)");
  const double next = __dsqrt_rn(__dsqrt_rn(drift * drift * drift * change));
  scratch[HS_DRIFT + group - 1] = (hs_u64)__double_as_longlong(next);
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
  const hs_forecast<W> f = hs_read_slot<W>(slot, bins, scratch);
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
  if (slot != 0 && some) {  // the next step's forecast, and the group's drift
    hs_fold_drift(slot, scratch, amax);
    const double margin = high > low && t[P_MAX] > t[P_MIN] ? HS_MARGIN * (high - low) : 0.0;
    const double next_low = low - margin, next_high = high + margin;
    slot[HS_SLOT_SPREAD] = t[P_MAX] > t[P_MIN] ? 1.0 : 0.0;
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
HS_DEV void hs_reread(const IN* x, hs_i64 n, int bins, int copies, double* row, hs_u64* scratch);

// The second read within the first's launch: not inlined, so that its registers are not the read
// loop's.
template <typename IN, typename W>
HS_NOINLINE void hs_reread_here(const IN* x, hs_i64 n, int bins, int copies, double* row, hs_u64* scratch) {
  hs_reread<IN, W>(x, n, bins, copies, row, scratch);
}

// In a launch that also reads again (wait): the last block publishes its verdict after all it
// wrote, every other block waits for it (the launch is cooperative or of one block: all its
// blocks are resident), and the block that takes it last clears it for the next capture.
HS_DEV bool hs_verdict(hs_u64* scratch, bool last, bool* flag) {
  __syncthreads();  // the finish's writes by every thread of the last block are done
  if (threadIdx.x == 0) {
    if (last) {
      const bool again = reinterpret_cast<volatile hs_u64*>(scratch)[HS_REREAD] != 0;
      __threadfence();
      if (gridDim.x > 1) atomicExch(&scratch[HS_VERDICT], again ? 2ull : 1ull);
      *flag = again;
    } else {
      hs_u64 seen;
      while ((seen = hs_load_volatile(&scratch[HS_VERDICT]) & 3u) == 0) hs_pause();
      __threadfence();
      *flag = seen == 2;
      if ((atomicAdd(&scratch[HS_VERDICT], 4ull) >> 2) == (hs_u64)gridDim.x - 2) atomicExch(&scratch[HS_VERDICT], 0ull);
    }
  }
  __syncthreads();
  return *flag;
}

template <typename IN, typename W>
HS_DEV void hs_read(const IN* x, hs_i64 n, int bins, int copies, double* row, double* slot, hs_u64* scratch,
                    int wait) {
  HS_SHARED_BYTES(smem);
  double* red;
  bool* flag;
  unsigned int* hist;
  hs_shared_layout(smem, bins, copies, &red, &flag, &hist);
  const hs_forecast<W> f = hs_read_slot<W>(slot, bins, scratch);
  unsigned int* my_hist = hist + ((threadIdx.x >> 5) % copies) * (bins + 1);
  hs_acc<W> a;
  hs_acc_init(a);
  auto take = [&](W v) { hs_take(v, a, f, my_hist, scratch); };
  const hs_fast fast = hs_fast_plan<IN, W>(f, my_hist);
  if (fast.on) {
    auto body = [&](const uint4* vectors, hs_i64 count) { hs_fast_vectors<IN, W>(vectors, count, fast, a, take); };
    hs_each_value<IN, W>(x, n, take, body);
  } else {
    hs_each_value<IN, W>(x, n, take);
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
  if (f.predicted) hs_flush_histogram(hist, bins, copies, scratch + HS_HIST);
  const bool last = hs_last_block(&scratch[HS_TICKET_READ], flag);
  if (last) {
    hs_fold_blocks(partials, P_COUNT, red);
    hs_finish_read<W>(n, bins, row, slot, scratch, red, hist);
  }
  // One-byte values are read again by the re-read kernel only: sixteen a load, their second read
  // needs more registers than the read's launch leaves (_cuda_stats never asks them to wait).
  if (sizeof(IN) > 1 && wait && hs_verdict(scratch, last, flag)) hs_reread_here<IN, W>(x, n, bins, copies, row, scratch);
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
  const volatile double* first = row;  // the first read's, written by another block of this launch or the last
  const double mean = first[HS_ROW_MEAN], amax = first[HS_ROW_AMAX];
  const hs_plan plan = hs_make_plan<W>(first[HS_ROW_LO], first[HS_ROW_HI], bins);
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
  const double count = (double)n - first[HS_ROW_NAN] - first[HS_ROW_INF];
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
                           hs_u64* scratch, int wait) {                                                     \
    hs_read<IN, W>(x, n, bins, copies, row, slot, scratch, wait);                                            \
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
