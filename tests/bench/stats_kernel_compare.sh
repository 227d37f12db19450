#!/usr/bin/env bash
# The CPU statistics kernel of the work tree against that of another revision (default: the
# one before the low-precision counts), float32 on one core, alternated ROUNDS times at 1e4,
# 1e6 and 1e7 values: what the counts cost. Needs g++ only.
#   tests/bench/stats_kernel_compare.sh [REV] [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rev=${1:-e915526}
rounds=${2:-3}
if ! git -C "$root" cat-file -e "$rev^{commit}" 2>/dev/null; then
  echo "stats_kernel_compare: no revision $rev in this checkout (a shallow clone? fetch its history, or name another)" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build() {  # build NAME SOURCE_DIR
  mkdir -p "$work/$1"
  cp "$2"/*.cpp "$2"/*.h "$work/$1/"
  sed -i 's|#include "kernels/|#include "|' "$work/$1"/*.cpp "$work/$1"/*.h
  local header=RawStats.h
  [ -f "$work/$1/RawStats.h" ] || header=RawStatistics.h
  local sources
  sources=$(cd "$work/$1" && ls StatsKernels.cpp ScanKernels.cpp Raw*.cpp CorePool.cpp TensorStats.cpp PrecisionKernels.cpp 2>/dev/null || true)
  (cd "$work/$1" && g++ -std=c++17 -O3 -DNDEBUG -fopenmp-simd -I. -DSTATS_HEADER="\"$header\"" \
     "$root/tests/bench/stats_kernel_bench.cpp" $sources -o bench -lpthread)
}
mkdir -p "$work/src-$rev"
git -C "$root" archive "$rev" core/kernels | tar -x -C "$work/src-$rev"
build before "$work/src-$rev/core/kernels"
build now "$root/core/kernels"
for n in 10000 1000000 10000000; do
  for ((r = 0; r < rounds; r++)); do
    echo "$rev: $("$work/before/bench" "$n")"
    echo "now:     $("$work/now/bench" "$n")"
  done
done
