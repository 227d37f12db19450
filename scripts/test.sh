#!/usr/bin/env bash
# Sets everything up on Debian 12, builds, and runs every test (core, CLI, export, GUI).
set -euo pipefail
source "$(dirname "$0")/common.sh"
started=$(date +%s)
# Where the time goes, stage by stage (CI's limit is an hour).
stage_done() { echo "test.sh: $1 done at $(( $(date +%s) - started )) s" >&2; }
"$root/scripts/setup.sh"
stage_done setup
"$root/scripts/build.sh"
stage_done build
export QT_QPA_PLATFORM=offscreen
# The sanitizer stages' builds compile beside ctest, one after the other, at the lowest priority
# (nice 19): they take what the two cores leave while ctest's tests wait on the processes they
# start, and give way to the tests. Their tests run after ctest's, as before (each stage's build
# is then done or nearly; a build that failed here fails there again, with its messages).
early=""
if [ "${HOOKSCOPE_SKIP_TSAN:-0}" != 1 ] || [ "${HOOKSCOPE_SKIP_ASAN:-0}" != 1 ]; then
  early_log="$root/build/sanitizer-builds.log"
  setsid nice -n 19 bash -c '
    [ "${HOOKSCOPE_SKIP_TSAN:-0}" = 1 ] || "$1/scripts/tsan.sh" --build-only
    [ "${HOOKSCOPE_SKIP_ASAN:-0}" = 1 ] || "$1/scripts/asan.sh" --build-only' _ "$root" >"$early_log" 2>&1 &
  early=$!
  trap '[ -n "$early" ] && kill -- -"$early" 2>/dev/null; true' EXIT  # ctest failed: no build left running
fi
(cd "$root/build" && ctest --output-on-failure -j2)
stage_done ctest
# ctest made the fixtures (make_fixtures): the sanitizer stages read those rather than make their own.
export HOOKSCOPE_MADE_FIXTURES="$root/build/fixtures"
# A process a test left running (an engine, a recorder, a training script that loops) would slow
# every later stage and hide a leak: named, and ended.
leftovers=$(ps -eo pid=,ppid=,pgid=,args= | while read -r pid ppid pgid args; do
  [[ "$args" == *"$root"* ]] || continue
  [ "$pid" = $$ ] || [ "$ppid" = $$ ] || [ "$pgid" = "${early:-none}" ] && continue
  echo "$pid $args"
done)
if [ -n "$leftovers" ]; then
  echo "test.sh: still running after ctest, left by a test (ended now):" >&2
  echo "$leftovers" | cut -c1-300 >&2
  echo "$leftovers" | while read -r pid _; do kill -9 "$pid" 2>/dev/null; done
fi
if [ -n "$early" ]; then
  wait "$early" || echo "test.sh: the sanitizer builds beside ctest stopped early (build/sanitizer-builds.log); the stages build again" >&2
  early=""
fi
# What the GPU read kernels issue a value on their common path (counted from the SASS, no GPU).
[ -f "$root/build/read_loop_count.txt" ] && cat "$root/build/read_loop_count.txt"
# The runner's pause/stop and the store's concurrent access, under ThreadSanitizer
# (a second build in build-tsan/; HOOKSCOPE_SKIP_TSAN=1 skips it for a quick local run).
if [ "${HOOKSCOPE_SKIP_TSAN:-0}" != 1 ]; then
  "$root/scripts/tsan.sh"
  stage_done ThreadSanitizer
fi
# Core and CLI tests under AddressSanitizer + UBSan, then each reader of outside bytes fuzzed
# (a third build in build-asan/; HOOKSCOPE_SKIP_ASAN=1 skips it).
if [ "${HOOKSCOPE_SKIP_ASAN:-0}" != 1 ]; then
  "$root/scripts/asan.sh"
  stage_done "AddressSanitizer and fuzzing"
fi
