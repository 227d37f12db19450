#!/usr/bin/env bash
# Sets everything up on Debian 12, builds, and runs every test (core, CLI, export, GUI).
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
export QT_QPA_PLATFORM=offscreen
(cd "$root/build" && ctest --output-on-failure -j2)
# What the GPU read kernels issue a value on their common path (counted from the SASS, no GPU).
[ -f "$root/build/read_loop_count.txt" ] && cat "$root/build/read_loop_count.txt"
# The runner's pause/stop and the store's concurrent access, under ThreadSanitizer
# (a second build in build-tsan/; HOOKSCOPE_SKIP_TSAN=1 skips it for a quick local run).
if [ "${HOOKSCOPE_SKIP_TSAN:-0}" != 1 ]; then
  "$root/scripts/tsan.sh"
fi
# Core and CLI tests under AddressSanitizer + UBSan, then each reader of outside bytes fuzzed
# (a third build in build-asan/; HOOKSCOPE_SKIP_ASAN=1 skips it).
if [ "${HOOKSCOPE_SKIP_ASAN:-0}" != 1 ]; then
  "$root/scripts/asan.sh"
fi
