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

} // namespace hookscope
