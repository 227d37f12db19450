#!/usr/bin/env python3
"""Thousands of layers (issue 58): a model of N blocks (Linear(32, 32) + ReLU, batch 16, SGD),
every module hooked for activations and gradients, attached to `hookscope-cli record` for S
steps, against the same model unhooked. Prints, for each N: the attached and plain step, their
ratio, the captures the script dropped (and why), the recorder's CPU seconds and peak RSS, and
the export's size, and how long `hookscope.load_run` and `hookscope-cli explain` take to read it.

    PYTHON scale_bench.py HOOKSCOPE_CLI [STEPS] [N ...] [--keep DIR]
        (default 200 steps; N 25 100 400 1600; --keep: each export kept as DIR/N<blocks>, for the
        window's bench: hookscope-window-bench --open DIR/N1067 opens 3,202 modules)
"""
import shutil
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "..", "..", "python")
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from deadlines import cpu_seconds  # noqa: E402  (tests/python)
SCRIPT = r"""
import sys, time, warnings, torch, torch.nn as nn
sys.path.insert(0, %(package)r)
import hookscope
blocks, steps, attach = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "attach"
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.ReLU()) for _ in range(blocks)])
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
dropped = []
if attach:
    warnings.simplefilter("always")
    warnings.showwarning = lambda message, *rest: dropped.append(str(message))
    hs = hookscope.attach(model, opt, wait=True, timeout=120)
started = None
for step in range(steps):
    if step == 5:  # the first steps warm up allocators and caches
        started = time.perf_counter()
    loss = model(torch.randn(16, 32)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if attach:
        hs.step(loss)
elapsed = time.perf_counter() - started
if attach:
    hs.close()
print("STEP_MS %%.3f" %% (1000 * elapsed / (steps - 5)))
print("WARNINGS %%s" %% " | ".join(m for m in dropped if "dropped" in m)[:300])
""" % {"package": PACKAGE}


def folder_bytes(path):
    return sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path))


def step_ms(output):
    return float(next(line.split()[1] for line in output.splitlines() if line.startswith("STEP_MS")))


def one(cli, blocks, steps, keep=None):
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "scale_script.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        plain = subprocess.run([sys.executable, script, str(blocks), str(steps), "plain"], capture_output=True,
                               text=True, check=True)
        address = "unix:" + os.path.join(tmp, "hs.sock")
        out = os.path.join(tmp, "export")
        recorder = subprocess.Popen([cli, "record", "--address", address, "--hook", "*", "--kinds",
                                     "activation,gradient", "--out", out], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
        seen = {"rss_kib": 0, "cpu_s": 0.0}
        watch = threading.Thread(target=watch_process, args=(recorder, seen), daemon=True)
        watch.start()
        attached = subprocess.run([sys.executable, script, str(blocks), str(steps), "attach"], capture_output=True,
                                  text=True, env=dict(os.environ, HOOKSCOPE_ADDRESS=address))
        _, err = recorder.communicate(timeout=3600)
        watch.join()
        if attached.returncode != 0 or recorder.returncode != 0:
            print("N=%d failed:\n%s\n%s" % (blocks, attached.stderr[-2000:], err[-2000:]))
            return
        wrote = re.search(r"wrote .*?: (\d+) captures of (\d+) series", err)
        dropped = re.search(r"(\d+) captures dropped by the script", err)
        warned = next((line[9:] for line in attached.stdout.splitlines() if line.startswith("WARNINGS ")), "")
        a, p = step_ms(attached.stdout), step_ms(plain.stdout)
        load_s, opened = seconds([sys.executable, "-c", "import sys, time; sys.path.insert(0, %r); import hookscope; "
                                  "t = time.perf_counter(); run = hookscope.load_run(%r); "
                                  "print(time.perf_counter() - t)" % (PACKAGE, out)])
        explain_s, _ = seconds([cli, "explain", out])
        print("RESULT scale N=%d series=%s steps=%d attached=%.1fms plain=%.1fms ratio=%.2f dropped=%s "
              "recorder_cpu=%.1fs recorder_peak_rss=%.0fMiB export=%.0fMB load_run=%.1fs (%.2fs without python's start) "
              "explain=%.1fs%s"
              % (blocks, wrote.group(2) if wrote else "?", steps, a, p, a / p, dropped.group(1) if dropped else 0,
                 seen["cpu_s"], seen["rss_kib"] / 1024, folder_bytes(out) / 1e6, load_s, float(opened), explain_s,
                 ("  (" + warned + ")") if warned else ""), flush=True)
        if keep:
            kept = os.path.join(keep, "N%d" % blocks)
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(out, kept)


def seconds(command):
    """How long a reader takes on the export, start-up included, and what it printed; it must
    succeed."""
    started = time.perf_counter()
    done = subprocess.run(command, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return time.perf_counter() - started, done.stdout.strip()


def watch_process(process, seen):
    """The recorder's peak RSS (VmHWM) and CPU seconds, read from /proc every 0.1 s until it
    exits (its last tenth of a second, writing the export's end, is not counted in the CPU)."""
    while process.poll() is None:
        try:
            with open("/proc/%d/status" % process.pid) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        seen["rss_kib"] = max(seen["rss_kib"], int(line.split()[1]))
            seen["cpu_s"] = max(seen["cpu_s"], cpu_seconds(process.pid))  # 0 once it is gone
        except (OSError, IndexError, ValueError):
            pass
        process_wait(process, 0.1)


def process_wait(process, seconds):
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        pass


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    args = sys.argv[1:]
    keep = None
    if "--keep" in args:
        at = args.index("--keep")
        keep = args[at + 1]
        del args[at:at + 2]
    cli = args[0]
    steps = int(args[1]) if len(args) > 1 else 200
    for blocks in [int(n) for n in args[2:]] or [25, 100, 400, 1600]:
        one(cli, blocks, steps, keep)


if __name__ == "__main__":
    main()
