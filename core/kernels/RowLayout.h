#pragma once
// A capture's statistics row (float64): the one definition of its layout that HookScope's C++
// kernel library (StatsLibrary), the wire's binary rows (WireStats) and, by their names, the CUDA
// kernels (python/hookscope/stats_kernels.cu, HS_ROW_*) and the Python package
// (_stats_rows.LAYOUT) follow; tests/python/test_row_layout.py checks that they agree.
// docs/export-format.md says what each field means.

namespace hookscope::row {

/// The header's fields in order; the histogram's counts follow from kHeader on.
enum Field : int {
  kMin,
  kMax,
  kMean,
  kStd,
  kL2,
  kZeros,  ///< the fraction of exact zeros
  kNan,
  kInf,
  kLo,  ///< the histogram's edges
  kHi,
  kAmax,
  kF16Overflow,
  kF16Underflow,
  kE4m3Underflow,
  kE5m2Underflow,
  kHeader
};

} // namespace hookscope::row
