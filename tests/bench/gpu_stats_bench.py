"""Where an attached GPU step's statistics time goes (attach_bench.py --device cuda calls these):
the share of captures read once, the host time of a capture inside a real step (hook entered to
kernels queued), the statistics kernels' device time a step (CUDA events around each capture's
launches), and each backend's bandwidth on a 51M-value bf16 tensor. Prints RESULT lines."""

import time

import torch

from hookscope import _stats


def instrumented_steps(hs, run_one):
    """Two more attached steps, instrumented: the host time inside each capture (perf_counter
    around the hook's work), then the device time of each capture's kernels (CUDA events, which
    cost host time of their own, so in a step of their own). Returns a dict of figures."""
    stats = hs._stats
    real_capture, real_add, real_reads = hs._capture, stats.add, stats.take_reads
    host = [0.0, 0]
    reads = []

    def capture(*args):
        start = time.perf_counter()
        try:
            return real_capture(*args)
        finally:
            host[0] += time.perf_counter() - start
            host[1] += 1

    def take_reads():
        counted = real_reads()
        reads.append(counted)
        return counted

    hs._capture, stats.take_reads = capture, take_reads
    try:
        run_one()
    finally:
        del hs._capture
    events = []

    def add(*args, **kwargs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        try:
            return real_add(*args, **kwargs)
        finally:
            end.record()
            events.append((start, end))

    stats.add = add
    try:
        run_one()
    finally:
        del stats.add, stats.take_reads
    torch.cuda.synchronize()
    kernel_ms = sum(s.elapsed_time(e) for s, e in events)
    one = sum(r["one"] for r in reads if r)
    two = sum(r["two"] for r in reads if r)
    shared = sum(r["shared"] for r in reads if r)
    figures = {"host_us": host[0] / max(host[1], 1) * 1e6, "captures": host[1], "kernel_ms": kernel_ms,
               "one": one, "two": two, "shared": shared,
               "one_share": one / max(one + two, 1)}
    print(f"  inside an attached step: {figures['host_us']:.1f} us of host time a capture ({host[1]} captures, hook "
          f"entered to kernels queued); statistics kernels {kernel_ms:.2f} ms a step (CUDA events); reads: "
          f"{one} one, {two} two, {shared} shared ({figures['one_share'] * 100:.0f}% of those read were read once)")
    print(f"RESULT gpu_step host_us_per_capture={figures['host_us']:.2f} kernel_ms={kernel_ms:.3f} one={one} two={two} "
          f"shared={shared} one_read_share={figures['one_share']:.3f}")
    return figures


def backend_bandwidth(bandwidth, numel=51_380_224, rounds=20):
    """Each GPU backend's row on a 51M-value bf16 tensor (normal values, and ReLU's: half of them
    zero, in one bin), against the device's copy bandwidth. The CUDA kernels twice: a series'
    later capture (one read) and a tensor on its own (two reads, as tensor_statistics)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    for label, x in (("normal", torch.randn(numel, device="cuda", generator=g).bfloat16()),
                     ("relu", torch.relu(torch.randn(numel, device="cuda", generator=g)).bfloat16())):
        nbytes = x.numel() * x.element_size()
        for backend, history in (("cuda", True), ("cuda", False), ("triton", False), ("torch", False)):
            step = _stats.StepStatistics(bins=64, backend=backend)
            if step.choose(x.device) != backend:
                print(f"  {backend}: does not run here ({'; '.join(step.fallbacks)})")
                continue
            n = 1 if backend == "torch" else rounds
            step.add('"module":0', x, history=history)  # compiles; a series' first capture
            step.take()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for i in range(n):
                step.add('"module":%d' % (i + 1 if not history else 0), x, history=history)
                step._read.clear()  # the same tensor again on purpose: read it, do not copy its row
            end.record()
            end.synchronize()
            step.take()
            ms = start.elapsed_time(end) / n
            name = backend + (" (one read)" if backend == "cuda" and history else
                              " (two reads)" if backend == "cuda" else "")
            print(f"  {name} on {numel / 1e6:.1f}M bf16 {label} values: {ms:.3f} ms, {nbytes / ms / 1e9:.2f} TB/s "
                  f"({nbytes / ms * 1e3 / bandwidth * 100:.0f}% of the copy bandwidth)")
            print(f"RESULT backend_bandwidth values={label} backend={name.replace(' ', '_')} ms={ms:.4f} "
                  f"tb_s={nbytes / ms / 1e9:.3f}")
