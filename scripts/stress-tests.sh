#!/usr/bin/env bash
# Runs the whole ctest suite N times (default 2) with the machine at about 3x its cores, as CI's
# may be, and lists every test that failed at least once, with how often. The load: a clean
# rebuild of the statistics kernels and the CLI into build-stress/ (ccache off, -j2) over and over,
# and one CPU burner a core, until the runs end; ctest's own -j2 comes on top. Exit 1 when any
# test failed. Developers run it before they stop (CONTRIBUTING.md).
#
#     ./scripts/stress-tests.sh [N]
set -uo pipefail
source "$(dirname "$0")/common.sh"
runs=${1:-2}
build="$root/build"
[ -f "$build/CTestTestfile.cmake" ] || { echo "stress-tests: build first (./scripts/build.sh)" >&2; exit 2; }
load_dir="$root/build-stress"
"$cmake" -S "$root" -B "$load_dir" -DCMAKE_BUILD_TYPE=Release -DHOOKSCOPE_PYTHON="$python" \
  -DHOOKSCOPE_BUILD_GUI=OFF >/dev/null
( while true; do
    "$cmake" --build "$load_dir" --target clean >/dev/null 2>&1
    CCACHE_DISABLE=1 "$cmake" --build "$load_dir" -j2 --target hookscope_stats hookscope-cli >/dev/null 2>&1
  done ) &
load=$!
burners=()
for _ in $(seq 1 "$(nproc)"); do
  ( while true; do :; done ) &
  burners+=($!)
done
trap 'kill $load "${burners[@]}" 2>/dev/null; pkill -P $load 2>/dev/null' EXIT
export QT_QPA_PLATFORM=offscreen
failures=$(mktemp)
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  (cd "$build" && ctest -j2 --output-on-failure >"$failures.log.$i" 2>&1)
  code=$?
  # The tests ctest lists as failed (not those it lists as skipped: "did not run").
  failed=$(sed -n '/The following tests FAILED:/,$p' "$failures.log.$i" | grep -E '^\s+[0-9]+ - ' | sed -E 's/^\s+[0-9]+ - //')
  [ -n "$failed" ] && echo "$failed" >>"$failures"
  echo "stress-tests: run $i of $runs: ctest exit $code in $(( $(date +%s) - start )) s" \
       "($(grep -c . <<<"$failed") failed; log $failures.log.$i)"
done
if [ -s "$failures" ]; then
  echo "stress-tests: tests that failed at least once (times):"
  sort "$failures" | uniq -c | sort -rn
  exit 1
fi
echo "stress-tests: every test passed in all $runs runs with the machine at about 3x its cores"
