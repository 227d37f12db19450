#!/usr/bin/env python3
"""The script's host time a capture on the CPU path (issue 58): the N-block model of
scale_bench.py (Linear(32, 32) + ReLU, batch 16, SGD), every module hooked for activations and
gradients, attached to `hookscope-cli record`, against the same loop with no hooks (plain) and
with empty Python hooks on the same modules and outputs (a forward hook that registers a
gradient hook returning None: what torch's own hook dispatch costs, which no capture can avoid),
and with those hooks each copying its tensor's values into a buffer (ctypes.memmove) and doing
nothing else (copies: the least a capture in Python does that reads the values as they were in
its hook, before any statistic is computed or anything is sent).

HookScope's time a capture is measured two ways: (attached - empty hooks) / captures a step
(host_us_per_capture: everything the attached step adds, the recorder's share of the cores too),
and inside (inside_us_per_capture: an attached run whose hooks and hs.step are each timed from
their entry to their return, summed, over the captures: the hook's entry to the row queued, the
step's sending included). The loops run in turn ROUNDS times; each figure is the fastest round
(other work on the machine only ever adds). The garbage collector's share of the attached step
(collections timed through gc.callbacks) is printed beside it.

    PYTHON capture_cpu_bench.py HOOKSCOPE_CLI [N] [STEPS] [ROUNDS]   (default 100 blocks, 40 steps, 3)
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "..", "..", "python")
SCRIPT = r"""
import gc, sys, time, torch, torch.nn as nn
sys.path.insert(0, %(package)r)
import hookscope
blocks, steps, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.ReLU()) for _ in range(blocks)])
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
inside = [0.0]
if mode == "inside":  # attached, each of HookScope's hooks and its step timed from entry to return
    from hookscope import _hooks
    def timing(call):
        def timed_call(*args):
            started = time.perf_counter()
            try:
                return call(*args)
            finally:
                inside[0] += time.perf_counter() - started
        return timed_call
    _hooks.Hook.__call__ = timing(_hooks.Hook.__call__)
    if hasattr(_hooks, "GradientHook"):  # before it, a gradient hook was a Hook too
        _hooks.GradientHook.__call__ = timing(_hooks.GradientHook.__call__)
if mode in ("attached", "inside"):
    hs = hookscope.attach(model, opt, wait=True, timeout=300)
    if mode == "inside":
        hs.step = timing(hs.step)
elif mode == "hooks":
    def on_gradient(grad):
        return None
    def on_output(module, inputs, output):
        if output.requires_grad:
            output.register_hook(on_gradient)
    for module in model.modules():
        module.register_forward_hook(on_output)
elif mode == "copies":  # the empty hooks, each copying its tensor's values and nothing more
    import ctypes
    kept = ctypes.create_string_buffer(1 << 22)
    base, used = ctypes.addressof(kept), [0]
    def keep(t):
        size = t.numel() * t.element_size()
        if used[0] + size > len(kept):
            used[0] = 0
        ctypes.memmove(base + used[0], t.contiguous().data_ptr(), size)
        used[0] += size
    def on_gradient(grad):
        keep(grad)
        return None
    def on_output(module, inputs, output):
        keep(output)
        if output.requires_grad:
            output.register_hook(on_gradient)
    for module in model.modules():
        module.register_forward_hook(on_output)
collected = [0.0, 0.0]
def timed(phase, info):
    if phase == "start":
        collected[1] = time.perf_counter()
    else:
        collected[0] += time.perf_counter() - collected[1]
started = None
for step in range(steps):
    if step == 5:  # the first steps warm up allocators and caches
        started = time.perf_counter()
        gc.callbacks.append(timed)
        inside[0] = 0.0
    loss = model(torch.randn(16, 32)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if mode in ("attached", "inside"):
        hs.step(loss)
elapsed = time.perf_counter() - started
gc.callbacks.remove(timed)
if mode in ("attached", "inside"):
    hs.close()
print("STEP_MS %%.3f GC_MS %%.3f INSIDE_MS %%.3f" %% (1000 * elapsed / (steps - 5), 1000 * collected[0] / (steps - 5),
                                                  1000 * inside[0] / (steps - 5)))
""" % {"package": PACKAGE}


def run(cli, script, blocks, steps, mode, tmp):
    command = [sys.executable, script, str(blocks), str(steps), mode]
    if mode in ("plain", "hooks", "copies"):
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        return parse(done.stdout)
    address = "unix:" + os.path.join(tmp, "hs.sock")
    out = os.path.join(tmp, "export")
    recorder = subprocess.Popen([cli, "record", "--address", address, "--hook", "*", "--kinds",
                                 "activation,gradient", "--out", out, "--force"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, HOOKSCOPE_ADDRESS=address))
    _, err = recorder.communicate(timeout=3600)
    if done.returncode != 0 or recorder.returncode != 0:
        sys.exit("the attached run failed:\n%s\n%s" % (done.stderr[-2000:], err[-2000:]))
    dropped = re.search(r"(\d+) captures dropped by the script", err)
    if dropped:
        print("note: %s captures dropped (the recorder was behind)" % dropped.group(1))
    return parse(done.stdout)


def parse(output):
    found = re.search(r"STEP_MS ([0-9.]+) GC_MS ([0-9.]+) INSIDE_MS ([0-9.]+)", output)
    return float(found.group(1)), float(found.group(2)), float(found.group(3))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cli = sys.argv[1]
    blocks = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    captures = 2 * (1 + 3 * blocks)  # every module's output and its gradient
    best = {}
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "capture_script.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        for _ in range(rounds):
            for mode in ("plain", "hooks", "copies", "attached", "inside"):
                figures = run(cli, script, blocks, steps, mode, tmp)
                key = 2 if mode == "inside" else 0  # the fastest round: by its step, or by its time inside
                if mode not in best or figures[key] < best[mode][key]:
                    best[mode] = figures
    plain, hooks, attached = best["plain"][0], best["hooks"][0], best["attached"][0]
    copies = best["copies"][0]
    print("RESULT capture_cpu N=%d captures=%d plain=%.2fms hooks=%.2fms copies=%.2fms attached=%.2fms ratio=%.2f "
          "hooks_ratio=%.2f copies_ratio=%.2f host_us_per_capture=%.1f inside_us_per_capture=%.1f gc_ms=%.2f (attached) %.2f (hooks)"
          % (blocks, captures, plain, hooks, copies, attached, attached / plain, hooks / plain, copies / plain,
             1000 * (attached - hooks) / captures, 1000 * best["inside"][2] / captures, best["attached"][1],
             best["hooks"][1]))


if __name__ == "__main__":
    main()
