#!/usr/bin/env bash
# Everything the GPU statistics need checked on a machine with an NVIDIA GPU, from the Python
# package alone (no C++ build): PyTorch with CUDA (its NVRTC) and its Triton. In order: the CUDA
# kernels' tests (compiled by NVRTC for this GPU, a series read once, no host synchronisation in
# a hook), the GPU benchmark for resnet50 (b64) and gpt2 (b8, seq 1024): attached / plain beside
# limit / plain, the share of captures read once, host time a capture inside the step, the
# kernels' time a step, each backend's bandwidth; ncu's profile of the read kernel on a warm series;
# the statistics tests (every GPU backend against
# the torch ops on the device, a hook inside CUDA-graph capture) and the Triton tests; then
# compute-sanitizer's memcheck, racecheck and synccheck on both GPU backends where it is installed.
# Each step has a time limit of its own (a hung kernel fails its step, not the run), the most
# telling first, so that a run cut short still says what matters most.
# Output to stdout; RESULT lines carry the figures.
#
#     PYTHON=python3 tests/bench/gpu_check.sh [--quick]     (--quick: one benchmark round each)
set -uo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}
rounds_resnet=3 rounds_gpt=2
[ "${1:-}" = "--quick" ] && rounds_resnet=1 rounds_gpt=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
failed=0
started=$SECONDS
# step SECONDS COMMAND...: run it under a time limit, say how long it took and whether it failed.
step() {
  local limit=$1; shift
  local begun=$SECONDS
  echo; echo "== $*"
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  [ $rc -eq 124 ] && echo "== TIMED OUT after ${limit}s"
  [ $rc -ne 0 ] && { failed=1; echo "== FAILED (exit $rc): $*"; }
  echo "== $((SECONDS - begun)) s"
}
"$python" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__,
  torch.cuda.get_device_name() if torch.cuda.is_available() else 'NO CUDA GPU')"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
step 120 "$python" -m pytest -q -p no:cacheprovider tests/python/test_cuda_stats.py tests/python/test_row_layout.py
step 150 "$python" tests/bench/attach_bench.py --device cuda --model resnet50 --rounds "$rounds_resnet"
step 150 "$python" tests/bench/attach_bench.py --device cuda --model gpt2 --rounds "$rounds_gpt"
# The read kernel alone on a warm series (its third capture: one read through the common path):
# where its issue slots and stalls go, and how many of its blocks an SM holds (issue 56).
if command -v ncu >/dev/null; then
  step 120 ncu --clock-control none --kernel-name regex:hs_read_bf16 --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section SourceCounters --section WarpStateStats --section Occupancy \
    "$python" tests/bench/cuda_kernel_probe.py
else
  echo "== ncu is not installed here: the read kernel's profile not taken"
fi
step 90 "$python" -m pytest -q -p no:cacheprovider tests/python/test_statistics.py
# A process of its own: it sets TRITON_INTERPRET before Triton's import for its CPU cases.
step 90 "$python" -m pytest -q -p no:cacheprovider tests/python/test_triton_stats.py
if command -v compute-sanitizer >/dev/null; then
  # Both GPU backends; the CUDA kernels also on a series' later captures (one read, and a read
  # again when the range moves) and with the fp8 band full.
  probe="import sys, torch, hookscope
from hookscope import _stats
backend = sys.argv[1]
for n in (1, 4097, 1_000_003):
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int32, torch.uint8):
        x = (torch.randn(n, device='cuda') * 100).to(dtype)
        if dtype.is_floating_point:
            x[::7] = float('nan')
        print(n, dtype, hookscope.tensor_statistics(x, backend=backend)['hist'][:4])
step = _stats.StepStatistics(backend=backend)
for i, scale in enumerate((1.0, 1.1, 0.9, 5.0, 1e-6)):
    step.add('\"module\":0', torch.randn(262_147, device='cuda') * scale)
    print(step.take(with_backend=True)[0][1][:2], step.take_reads())"
  for backend in cuda triton; do
    for tool in memcheck racecheck synccheck; do
      step 60 compute-sanitizer --tool "$tool" --error-exitcode 9 "$python" -c "$probe" "$backend"
    done
  done
else
  echo "== compute-sanitizer is not installed here: racecheck and memcheck not run"
fi
echo; echo "== gpu_check: $((SECONDS - started)) s in all, $([ $failed = 0 ] && echo passed || echo 'something FAILED')"
exit $failed
