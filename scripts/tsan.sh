#!/usr/bin/env bash
# Builds the engine and its tests with ThreadSanitizer (into build-tsan/) and runs the tests
# that drive the runner and the store from several threads: pause and stop during a run,
# concurrent writers and readers of the capture store, statistics split over the cores, and an
# attached script's session commanded from another thread while it serves.
set -euo pipefail
source "$(dirname "$0")/common.sh"
# --build-only: the build alone (scripts/test.sh compiles it beside ctest, after its own setup).
build_only=0
[ "${1:-}" = --build-only ] && build_only=1
[ "$build_only" = 1 ] || "$root/scripts/setup.sh"
# Line tables only (-g1): what a race report needs, at less of the compile time full debug
# information costs LibTorch's templates.
"$cmake" -S "$root" -B "$root/build-tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOOKSCOPE_TSAN=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DHOOKSCOPE_BUILD_GUI=OFF -DHOOKSCOPE_PYTHON="$python" "${cmake_launcher[@]}" >/dev/null
"$cmake" --build "$root/build-tsan" -j2 --target hookscope_thread_tests
[ "$build_only" = 1 ] && exit 0
fixtures=$(stage_fixtures "$root/build-tsan/fixtures")
# halt_on_error: any race report fails the run. EngineProcessTest's parity case is left out: its
# in-process reference run trains a conv net on LibTorch's OpenMP threads, whose runtime
# (libgomp) TSan does not see, so it reports oneDNN's buffers as races. The threads of this
# process run three times over; the tests that drive other processes (ranks, engines: about 50 of
# a round's 53 s, most of it those processes starting) twice.
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" HOOKSCOPE_FIXTURES="$fixtures"
"$root/build-tsan/tests/hookscope_thread_tests" --gtest_repeat=3 --gtest_brief=1 \
  --gtest_filter='ProgressLineTest.*:StepRunnerTest.PauseAndStopFromAnotherThread:CaptureStoreTest.ConcurrentWritersAndReaders:TorchStatsTest.SplittingOverCoresGivesTheSameStatistics:StatsWorkerTest.*:ScriptLinkTest.*'
"$root/build-tsan/tests/hookscope_thread_tests" --gtest_repeat=2 --gtest_brief=1 \
  --gtest_filter='AttachJobTest.*:EngineProcessTest.*-EngineProcessTest.AModelRunInTheEngineProcessGivesTheInProcessNumbers'
