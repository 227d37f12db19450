#!/usr/bin/env bash
# Everything the GPU statistics need checked on a machine with an NVIDIA GPU, from the Python
# package alone (no C++ build): PyTorch with CUDA (its NVRTC) and its Triton. In order: the CUDA
# kernels' tests (compiled by NVRTC for this GPU, a series read once, no host synchronisation in
# a hook), the statistics tests (every GPU backend against the torch ops on the device, a hook
# inside CUDA-graph capture), the Triton tests, compute-sanitizer's racecheck, memcheck and
# synccheck on both GPU backends where it is installed, then the GPU benchmark for resnet50 (b64)
# and gpt2 (b8, seq 1024): attached / plain beside limit / plain, the share of captures read
# once, host time a capture inside the step, the kernels' time a step, each backend's bandwidth.
# About 6 minutes on an H100 (not yet timed there). Output to stdout; RESULT lines carry the figures.
#
#     PYTHON=python3 tests/bench/gpu_check.sh [--quick]     (--quick: one benchmark round each)
set -uo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}
rounds_resnet=3 rounds_gpt=2
[ "${1:-}" = "--quick" ] && rounds_resnet=1 rounds_gpt=1
export PYTHONUNBUFFERED=1
failed=0
step() { echo; echo "== $*"; "$@" || { failed=1; echo "== FAILED: $*"; }; }
"$python" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__,
  torch.cuda.get_device_name() if torch.cuda.is_available() else 'NO CUDA GPU')"
step "$python" -m pytest -q -p no:cacheprovider tests/python/test_cuda_stats.py tests/python/test_row_layout.py
step "$python" -m pytest -q -p no:cacheprovider tests/python/test_statistics.py
step "$python" -m pytest -q -p no:cacheprovider tests/python/test_triton_stats.py
if command -v compute-sanitizer >/dev/null; then
  # Both GPU backends; the CUDA kernels also on a series' later captures (one read, and a read
  # again when the range moves) and with the fp8 band full.
  probe="import sys, torch, hookscope
from hookscope import _stats
backend = sys.argv[1]
for n in (1, 4097, 51_380_224):
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int32, torch.uint8):
        x = (torch.randn(n, device='cuda') * 100).to(dtype)
        if dtype.is_floating_point:
            x[::7] = float('nan')
        print(n, dtype, hookscope.tensor_statistics(x, backend=backend)['hist'][:4])
step = _stats.StepStatistics(backend=backend)
for i, scale in enumerate((1.0, 1.1, 0.9, 5.0, 1e-6)):
    step.add('\"module\":0', torch.randn(1_000_003, device='cuda') * scale)
    print(step.take(with_backend=True)[0][1][:2], step.take_reads())"
  for backend in cuda triton; do
    for tool in racecheck memcheck synccheck; do
      step compute-sanitizer --tool "$tool" --error-exitcode 9 "$python" -c "$probe" "$backend"
    done
  done
else
  echo "== compute-sanitizer is not installed here: racecheck and memcheck not run"
fi
step "$python" tests/bench/attach_bench.py --device cuda --model resnet50 --rounds "$rounds_resnet"
step "$python" tests/bench/attach_bench.py --device cuda --model gpt2 --rounds "$rounds_gpt"
exit $failed
