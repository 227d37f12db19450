#!/usr/bin/env bash
# Sets everything up on Debian 12, builds, and opens HookScope on the bundled sample model
# (or on the model file given as the first argument).
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
model=${1:-$root/resources/models/small_cnn.pt}
if [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ]; then
  echo "run.sh: no display found; starting HookScope inside a virtual X server (xvfb-run)" >&2
  exec xvfb-run -a "$root/build/gui/hookscope" "$model"
fi
exec "$root/build/gui/hookscope" "$model"
