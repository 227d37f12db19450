#pragma once
// A capture's statistics computed from raw float32 or float64 values: no LibTorch, so the
// engine (TorchStats), the viewer's tests and a training script's process
// (libhookscope_stats, through ctypes) all run the same code.

#include "kernels/TensorStats.h"

#include <cstdint>

namespace hookscope {

constexpr int kDefaultHistogramBins = 64;

/// Which cores one computation may use: the caller's and any idle ones, or the caller's only.
enum class StatsCores { Idle, One };

/// Fills s's moments, counts and histogram from n contiguous values (shape and dtype are the
/// caller's). Values of 2^18 and more are split over the idle cores with StatsCores::Idle;
/// whether a core was free does not change the result.
template <typename T>
void computeRawStats(const T* data, std::int64_t n, int bins, StatsCores cores, TensorStats& s);

/// A histogram range that several pieces of one tensor share (a sharded tensor's shards): the
/// whole tensor's edges, and its amax, by which the fp8 counts scale.
struct SharedRange {
  double low = 0;
  double high = 0;
  double amax = 0;
};

/// As computeRawStats for one piece of a larger tensor: its own moments, counts, min, max and
/// amax, but the histogram between `range`'s edges (the piece's values must lie inside them)
/// and the fp8 counts scaled by `range.amax`, so that pieces' rows add up to the whole's.
template <typename T>
void computeRawStatsInRange(const T* data, std::int64_t n, int bins, StatsCores cores, const SharedRange& range,
                            TensorStats& s);

} // namespace hookscope
