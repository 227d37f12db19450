#!/usr/bin/env bash
# Builds HookScope and runs every benchmark, printing the figures of docs/performance.md:
# step overhead (sample CNN and resnet18, against the Python peer), the statistics kernel
# against one sum, GUI refresh, and capture memory. Takes about an hour on 2 cores, most of it the
# 2,000-step runs of thousands of layers (issue 58).
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build="$root/build"
# The benchmarks are not part of the default build.
"$cmake" --build "$build" -j2 --target hookscope-core-bench hookscope-gui-bench hookscope-window-bench \
  hookscope-ingest-bench
fixtures="$build/fixtures"
[ -f "$fixtures/resnet18_scripted.pt" ] || "$python" "$root/tests/fixtures/make_fixtures.py" "$fixtures" >/dev/null
rounds=${ROUNDS:-5}
log=$(mktemp)
run() { echo "\$ $*" >&2; "$@" | tee -a "$log"; echo; }
run "$build/tests/bench/hookscope-core-bench" overhead "$root/resources/models/small_cnn.pt" 8x1x28x28 $((rounds * 4)) \
  "$build/cli/hookscope-cli"
run "$build/tests/bench/hookscope-core-bench" overhead "$fixtures/resnet18_scripted.pt" 8x3x112x112 "$rounds" \
  "$build/cli/hookscope-cli"
run "$python" "$root/tests/bench/python_peer.py" "$rounds"
run "$python" "$root/tests/bench/attach_bench.py" "$build/cli/hookscope-cli" "$rounds"
run "$python" "$root/tests/bench/scale_bench.py" "$build/cli/hookscope-cli" 200 25 100 400 1600
# A long run (2,000 steps) at every N and its readers, and the export of 3,202 modules over 2,000
# steps (thinned by `record`'s own cap) that the window opens below.
run "$python" "$root/tests/bench/scale_bench.py" "$build/cli/hookscope-cli" 2000 25 100 400 1600
exports=$(mktemp -d)
run "$python" "$root/tests/bench/scale_bench.py" "$build/cli/hookscope-cli" 2000 1067 --keep "$exports"
run "$build/tests/bench/hookscope-ingest-bench" 200 25 100 400 1600
run "$python" "$root/tests/bench/first_mover_suite.py" "$build/cli/hookscope-cli" 3
run "$python" "$root/tests/bench/distributed_bench.py" "$build/cli/hookscope-cli" 2000 1 2 4 8
run "$build/tests/bench/hookscope-core-bench" stats
run "$root/tests/bench/stats_kernel_compare.sh" e915526 "$rounds"
QT_QPA_PLATFORM=offscreen run "$build/tests/bench/hookscope-gui-bench"
QT_QPA_PLATFORM=offscreen run "$build/tests/bench/hookscope-gui-bench" layers 3200
QT_QPA_PLATFORM=offscreen run "$build/tests/bench/hookscope-window-bench" --open "$exports/N1067"
rm -rf "$exports"
QT_QPA_PLATFORM=offscreen run "$build/tests/bench/hookscope-window-bench" "$root/resources/models/small_cnn.pt" 1000 \
  "$build/cli/hookscope-cli"
run "$build/tests/bench/hookscope-core-bench" memory
run "$build/tests/bench/hookscope-core-bench" bands
run "$build/tests/bench/hookscope-core-bench" limits "$fixtures"

# The summary: HookScope's overhead part against the Python peer's.
ours=$(grep 'RESULT overhead' "$log" | tail -1 | sed 's/.*c\/a=\([0-9.]*\).*/\1/')
peer=$(grep 'RESULT peer' "$log" | sed 's/.*ratio=\([0-9.]*\).*/\1/')
awk -v ours="$ours" -v peer="$peer" 'BEGIN {
  printf "resnet18 hooked/unhooked: HookScope %.3f, Python hooks %.3f; overhead part %.3f vs %.3f: %.1fx less\n",
         ours, peer, ours - 1, peer - 1, (peer - 1) / (ours - 1 > 0 ? ours - 1 : 1e-9) }'
attach=$(grep 'RESULT attach' "$log" | sed 's/.*ratio=\([0-9.]*\) peer_ratio=\([0-9.]*\).*/\1 \2/')
awk -v r="$attach" 'BEGIN { split(r, a, " "); printf "resnet18 attached (eager, hookscope-cli record --hook *): %.3f, Python hooks %.3f\n", a[1], a[2] }'
rm -f "$log"
