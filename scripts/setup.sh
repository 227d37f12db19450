#!/usr/bin/env bash
# Installs HookScope's build and test dependencies: Debian's packages, and a Python venv in
# .venv/ with the PyTorch 2.x (CPU) whose LibTorch HookScope builds on. Safe to run again: it
# installs only what is missing. With HOOKSCOPE_PYTHON set, that Python's PyTorch is used and
# no venv is made.
set -euo pipefail
source "$(dirname "$0")/common.sh"
packages=(
  build-essential cmake ccache pkg-config
  qt6-base-dev libqcustomplot-dev
  nlohmann-json3-dev libcli11-dev libgtest-dev libseccomp-dev libzip-dev libssl-dev
  python3-venv
  python3-torch python3-pytest
  clang libclang-rt-14-dev
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

# Pinned: an unpinned torch would bring a CUDA build of several GB.
torch_version=2.13.0
if [ -z "${HOOKSCOPE_PYTHON:-}" ]; then
  venv="$root/.venv"
  if ! "$venv/bin/python" -c "import torch, numpy, pytest; assert torch.__version__.startswith('$torch_version')" 2>/dev/null; then
    echo "setup: making $venv with torch==$torch_version (CPU)" >&2
    [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "torch==$torch_version" numpy pytest
  fi
  # Triton, for the GPU statistics kernels' tests without a GPU (its interpreter runs them on CPU
  # tensors; its compiler builds them for sm_80/sm_90). 3.8.0 works beside torch 2.13's CPU build
  # and numpy 2.4; the constraint keeps torch at its version. Optional: without it those tests skip.
  if ! "$venv/bin/python" -c "import triton" 2>/dev/null; then
    echo "torch==$torch_version" >"$venv/hookscope-constraints.txt"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -c "$venv/hookscope-constraints.txt" triton==3.8.0 ||
      echo "setup: triton 3.8.0 not installed: the Triton kernels' tests will skip" >&2
  fi
  # NVRTC, for HookScope's CUDA kernels' tests without a GPU: it compiles them for sm_80/sm_90 and
  # newer as the package does at first use on a GPU (PyTorch's CUDA wheels bring it to users).
  # Optional: without it those tests skip.
  if ! "$venv/bin/python" -c "import glob, nvidia, os; assert glob.glob(os.path.join(list(nvidia.__path__)[0], 'cuda_nvrtc', 'lib', 'libnvrtc.so*'))" 2>/dev/null; then
    echo "torch==$torch_version" >"$venv/hookscope-constraints.txt"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -c "$venv/hookscope-constraints.txt" \
      nvidia-cuda-nvrtc-cu12==12.9.86 ||
      echo "setup: nvidia-cuda-nvrtc-cu12 not installed: the CUDA kernels' compile tests will skip" >&2
  fi
  # torchvision's model definitions, for the fixtures that check the model-code scan on its
  # models, scripted and traced. Its compiled part needs CUDA, so it goes beside the venv, not
  # into it (--no-deps: torch stays 2.13.0), and no HookScope program loads it. Optional: without
  # it those tests skip.
  if [ ! -d "$root/.torchvision/torchvision" ]; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --target "$root/.torchvision" \
      torchvision==0.28.0 pillow==13.0.0 ||
      echo "setup: torchvision 0.28.0 not installed: the model-code scan's torchvision tests will skip" >&2
  fi
  # The trainers and TensorBoard the integration tests run against, pinned, with torch held at
  # its version by a constraint (a newer torch would be a CUDA download of several GB).
  integrations=(lightning==2.6.6 transformers==5.23.0 accelerate==1.15.0 tensorboard==2.21.0)
  if ! "$venv/bin/python" -c "import lightning, transformers, accelerate, tensorboard" 2>/dev/null; then
    echo "setup: installing ${integrations[*]} into $venv" >&2
    echo "torch==$torch_version" >"$venv/hookscope-constraints.txt"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -c "$venv/hookscope-constraints.txt" \
      "${integrations[@]}" ||
      echo "setup: the integration libraries did not install: their tests will skip" >&2
    "$venv/bin/python" -c "import torch; assert torch.__version__.startswith('$torch_version'), torch.__version__" || {
      echo "setup: installing the integration libraries changed torch; remove $venv and run setup again" >&2
      exit 1
    }
  fi
elif ! "$python" -c "import torch" 2>/dev/null; then
  echo "setup: HOOKSCOPE_PYTHON=$python cannot import torch; install PyTorch 2.x there" >&2
  exit 1
fi
