#!/usr/bin/env bash
# Configures and builds HookScope into build/ (Release, with ccache when present), on the
# LibTorch of HOOKSCOPE_PYTHON's PyTorch (by default .venv/bin/python).
set -euo pipefail
source "$(dirname "$0")/common.sh"
build="$root/build"
# A build folder configured on another LibTorch (Debian's 1.13 before HookScope moved to 2.x,
# or another HOOKSCOPE_PYTHON) is made again rather than mixed.
if [ -f "$build/CMakeCache.txt" ]; then
  prefix=$("$python" -c "import os, torch; print(os.path.dirname(torch.__file__))" 2>/dev/null || true)
  cached=$(sed -n 's/^Torch_DIR:PATH=//p' "$build/CMakeCache.txt")
  if [ -n "$prefix" ] && [ -n "$cached" ] && [[ "$cached" != "$prefix"/* ]]; then
    echo "build: $build was configured on the LibTorch in $cached; configuring it again for $prefix" >&2
    rm -rf "$build"
  fi
fi
"$cmake" -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DHOOKSCOPE_PYTHON="$python" \
  "${cmake_launcher[@]}" "$@" >/dev/null
"$cmake" --build "$build" -j2
