#!/usr/bin/env bash
# Installs HookScope's build and test dependencies from Debian's archive.
# Safe to run again: it installs only what is missing.
set -euo pipefail
packages=(
  build-essential cmake ccache pkg-config
  libtorch-dev qt6-base-dev libqcustomplot-dev
  nlohmann-json3-dev libcli11-dev libgtest-dev
  python3-torch python3-torchvision
  xvfb xauth
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
