#!/usr/bin/env python3
"""Every rank of a torch.distributed job recorded by one `hookscope-cli record` (issue 17's
benchmark): gloo on this machine's CPU cores, a model of about 100 modules, every module hooked
for activations and gradients. For 1, 2, 4 and 8 ranks: the job's time with and without the
recorder, captures dropped (gaps), the recorder's peak memory and CPU time, and what the wire
carried per rank per step.

Usage: PYTHON distributed_bench.py HOOKSCOPE_CLI [STEPS] [RANKS...]
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DDP_SCRIPT = os.path.join(HERE, "..", "python", "attach", "ddp_script.py")
DEPTH = 32  # 5 + 3 * 32 = 101 modules


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job(world, steps, folder, address=None):
    env = dict(os.environ)
    env.pop("HOOKSCOPE_ADDRESS", None)
    if address:
        env["HOOKSCOPE_ADDRESS"] = address
    report = os.path.join(folder, "report-%d" % world + ("-rec" if address else ""))
    os.makedirs(report, exist_ok=True)
    start = time.monotonic()
    subprocess.run([sys.executable, DDP_SCRIPT, "--port", str(free_port()), "--world", str(world), "--steps",
                    str(steps), "--depth", str(DEPTH), "--width", "32", "--batch", "16", "--report", report]
                   + ([] if address else ["--plain"]),
                   env=env, check=True, capture_output=True, text=True)
    seconds = time.monotonic() - start
    reports = [json.load(open(os.path.join(report, "rank-%d.json" % r))) for r in range(world)]
    return seconds, reports


def main():
    cli = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    ranks = [int(r) for r in sys.argv[3:]] or [1, 2, 4, 8]
    folder = tempfile.mkdtemp(prefix="hs-dist-")
    try:
        print("distributed: %d modules, every one hooked for activations and gradients, %d steps, gloo, %d cores"
              % (5 + 3 * DEPTH, steps, os.cpu_count()))
        print("%5s %10s %10s %7s %8s %10s %10s %12s %s" % ("ranks", "plain s", "recorded s", "ratio", "gaps",
                                                           "rec MiB", "rec CPU s", "wire B/step", "store"))
        for world in ranks:
            plain, _ = job(world, steps, folder)
            out = os.path.join(folder, "export-%d" % world)
            log = tempfile.TemporaryFile("w+")  # its progress lines: a pipe nobody reads would fill and block it
            proc = subprocess.Popen([cli, "record", "--out", out, "--address", "unix:" + os.path.join(folder, "s.sock"),
                                     "--timeout", "120", "--hook", "*", "--kinds", "activation,gradient", "--force"],
                                    stdout=subprocess.PIPE, stderr=log, text=True)
            address = proc.stdout.readline().strip().split("=", 1)[1]
            recorded, reports = job(world, steps, folder, address)
            _, status, usage = os.wait4(proc.pid, 0)
            log.seek(0)
            err = log.read()
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit("record failed: " + err[-2000:])
            with open(os.path.join(out, "manifest.json")) as f:
                manifest = json.load(f)
            gaps = sum(g["captures"] for g in manifest["gaps"])
            assert all(r["steps"] == steps for r in manifest["ranks"]) if world > 1 else manifest["steps"] == steps
            sent = sum(r["bytes_sent"] for r in reports) / world / steps
            thinning = manifest["thinning"]
            store = ("every %d steps kept (cap %d MiB)" % (thinning[-1]["stride"], manifest["memory_cap_bytes"] >> 20)
                     if thinning else "every step kept")
            print("%5d %10.1f %10.1f %7.2f %8d %10.1f %10.1f %12.0f %s" % (
                world, plain, recorded, recorded / plain, gaps, usage.ru_maxrss / 1024.0,
                usage.ru_utime + usage.ru_stime, sent, store), flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
