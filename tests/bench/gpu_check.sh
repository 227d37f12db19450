#!/usr/bin/env bash
# Everything the GPU statistics need checked on a machine with an NVIDIA GPU, from the Python
# package alone (no C++ build): PyTorch with CUDA and its Triton. In order: the CUDA tests
# (the kernels against the torch ops on the device, no host synchronisation in a hook, a hook
# inside CUDA-graph capture), the interpreter tests and the compile check, compute-sanitizer's
# racecheck and memcheck on the kernels where it is installed, then the GPU benchmark for
# resnet50 (b64) and gpt2 (b8, seq 1024): attached / plain beside limit / plain, and each
# pass's bandwidth. About 10 minutes on an H100. Output to stdout; RESULT lines carry the figures.
#
#     PYTHON=python3 tests/bench/gpu_check.sh [--quick]     (--quick: one benchmark round each)
set -uo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}
rounds_resnet=5 rounds_gpt=3
[ "${1:-}" = "--quick" ] && rounds_resnet=1 rounds_gpt=1
export PYTHONUNBUFFERED=1
failed=0
step() { echo; echo "== $*"; "$@" || { failed=1; echo "== FAILED: $*"; }; }
"$python" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__,
  torch.cuda.get_device_name() if torch.cuda.is_available() else 'NO CUDA GPU')"
step "$python" -m pytest -q -p no:cacheprovider tests/python/test_statistics.py
step "$python" -m pytest -q -p no:cacheprovider tests/python/test_triton_stats.py
if command -v compute-sanitizer >/dev/null; then
  probe="import torch, hookscope
for n in (1, 4097, 51_380_224):
    for dtype in (torch.bfloat16, torch.float32, torch.float64):
        x = torch.randn(n, device='cuda').to(dtype)
        x[::7] = float('nan')
        print(n, dtype, hookscope.tensor_statistics(x, backend='triton')['hist'][:4])"
  for tool in racecheck memcheck synccheck; do
    step compute-sanitizer --tool "$tool" --error-exitcode 9 "$python" -c "$probe"
  done
else
  echo "== compute-sanitizer is not installed here: racecheck and memcheck not run"
fi
step "$python" tests/bench/attach_bench.py --device cuda --model resnet50 --rounds "$rounds_resnet"
step "$python" tests/bench/attach_bench.py --device cuda --model gpt2 --rounds "$rounds_gpt"
exit $failed
