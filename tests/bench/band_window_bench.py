"""What a band's window costs: one series of 100,000 steps (and the loss beside it) explained at
windows of 200, 2,000 and 100,000 steps, by hookscope.bands (Python) and `hookscope-cli explain`
(C++). Each step's band used to be sorted again (--window 2000: 91 s; 100000: did not finish);
both now keep it sorted as values come and go.

    python tests/bench/band_window_bench.py [HOOKSCOPE_CLI] [STEPS]

Writes a synthetic export to a temporary folder. Prints figures; asserts nothing.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
from hookscope import bands  # noqa: E402

HEADER = ("step,rank,module,call,kind,index,shape,dtype,numel,min,max,mean,std,l2norm,zero_frac,"
          "nan_count,inf_count,amax,f16_overflow,f16_underflow,e4m3_underflow,e5m2_underflow")


def synthetic_export(folder, steps):
    rnd = random.Random(0)
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump({"format": "hookscope-capture", "version": 3, "model": {"file": "synthetic", "sha256": ""},
                   "steps": steps, "source": "model", "rows": {"stats.csv": steps, "scalars.csv": steps}}, f)
    with open(os.path.join(folder, "stats.csv"), "w") as f:
        f.write(HEADER + "\n")
        for s in range(steps):
            l2 = 2.0 * (1 + 0.05 * rnd.random())
            f.write("%d,0,fc1,0,activation,0,8x10,float32,80,-1,1,0,%r,%r,0.1,0,0,%r,0,0,0,0\n"
                    % (s, l2 / 9, l2, l2 / 3))
    with open(os.path.join(folder, "scalars.csv"), "w") as f:
        f.write("step,rank,name,value\n")
        for s in range(steps):
            f.write("%d,0,loss,%r\n" % (s, 2.0 * (1 + 0.05 * rnd.random())))


def main():
    cli = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "cli", "hookscope-cli")
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    folder = tempfile.mkdtemp(prefix="hookscope-band-bench-")
    try:
        synthetic_export(folder, steps)
        points = [(s, 2.0 * (1 + 0.05 * random.random())) for s in range(steps)]
        for window in (200, 2000, steps):
            started = time.perf_counter()
            bands.scores(points, "l2norm", window)
            python = time.perf_counter() - started
            started = time.perf_counter()
            done = subprocess.run([cli, "explain", folder, "--window", str(window)], capture_output=True, text=True)
            explained = time.perf_counter() - started
            print("window %7d over %d steps: bands.scores %.2f s (one statistic), explain %.2f s (exit %d, "
                  "4 statistics and the loss, export read included)"
                  % (window, steps, python, explained, done.returncode))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
