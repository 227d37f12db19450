#!/usr/bin/env python3
"""Cost of attaching a training script to HookScope, every module hooked for activations and
gradients, statistics computed in the training process.

CPU (with the recorder): resnet18 (eager, as torchvision's), batch 8x3x112x112, SGD. Steps of
four identical models are interleaved: plain, attached through `hookscope-cli record --hook '*'`,
the Python peer (hooks computing the same statistics and a 64-bin histogram in the hook), and
attached with no viewer listening; then the same attached model with the torch-ops statistics
instead of HookScope's kernel. Also: wire bytes per capture, captures dropped, attach cost of a
1,000-module model.

    PYTHON attach_bench.py HOOKSCOPE_CLI [ROUNDS] [--model resnet18|resnet50] [--batch N] [--size PX]

GPU (no C++ build needed: a minimal listener of its own takes the statistics):

    PYTHON attach_bench.py --device cuda [--model resnet50|gpt2] [--rounds N]

resnet50 batch 64 224 px or a GPT-2-small-sized transformer (12 layers, d=768, seq 1024,
batch 8), bf16 autocast, AdamW: attached/plain, host synchronisations per step (counted with
torch.cuda.set_sync_debug_mode), extra peak device memory.
"""
import argparse
import copy
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
import hookscope  # noqa: E402
from hookscope import _stats, _wire  # noqa: E402
import gpu_stats_bench  # noqa: E402


def recorder(cli, folder, *args):
    proc = subprocess.Popen([cli, "record", "--out", os.path.join(folder, "export"), "--address",
                             "unix:" + os.path.join(folder, "hs.sock"), "--timeout", "600", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    address = proc.stdout.readline().strip().split("=", 1)[1]
    return proc, address


class Listener:
    """The least a viewer does: welcome a script with every module hooked, acknowledge its steps
    and count what it sends (for a GPU machine without HookScope's C++ build)."""

    def __init__(self, folder, kinds=("activation", "gradient")):
        self.path = os.path.join(folder, "bench.sock")
        self.kinds = list(kinds)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(1)
        self.bytes = 0
        self.captures = 0
        self.dropped = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def address(self):
        return "unix:" + self.path

    def _serve(self):
        import json
        conn, _ = self.server.accept()
        reader = _wire.FrameReader.__new__(_wire.FrameReader)
        reader._buffer = bytearray()
        welcomed = False
        while True:
            data = conn.recv(1 << 20)
            if not data:
                return
            self.bytes += len(data)
            reader._buffer += data
            while len(reader._buffer) >= _wire.HEADER.size:
                _, _, _, length = _wire.HEADER.unpack_from(reader._buffer)
                if len(reader._buffer) < _wire.HEADER.size + length:
                    break
                message = json.loads(bytes(reader._buffer[_wire.HEADER.size:_wire.HEADER.size + length]))
                del reader._buffer[:_wire.HEADER.size + length]
                kind = message.get("type")
                if kind == "hello" and not welcomed:
                    hooks = {m["path"]: self.kinds for m in message["modules"]}
                    conn.sendall(_wire.json_frame({"type": "welcome", "hooks": hooks, "bins": 64}))
                    welcomed = True
                elif kind == "stats":
                    self.captures += len(message["captures"])
                elif kind == "step":
                    self.dropped += message.get("dropped", {}).get("captures", 0)
                    conn.sendall(_wire.json_frame({"type": "ack", "step": message["step"]}))
                elif kind == "bye":
                    return


def cpu_step(model, opt, x, y):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def cpu_bench(args):
    from architectures import resnet18
    from python_peer import forward_hook as peer_hook
    folder = tempfile.mkdtemp(prefix="hs-bench-")
    try:
        torch.manual_seed(0)
        if args.model == "resnet50":
            base = resnet50(num_classes=10).train()
        else:
            base = resnet18(num_classes=10).train()
        plain, attached, peer, alone, torchops = (base, copy.deepcopy(base), copy.deepcopy(base),
                                                  copy.deepcopy(base), copy.deepcopy(base))
        models = [("plain", plain), ("attached", attached), ("peer", peer), ("no viewer", alone)]
        if args.torch_ops:
            models.append(("torch ops", torchops))
        opts = {name: torch.optim.SGD(m.parameters(), lr=0.01) for name, m in models}
        for m in peer.modules():
            m.register_forward_hook(peer_hook)
        x = torch.randn(args.batch, 3, args.size, args.size)
        y = torch.randint(0, 10, (args.batch,))
        proc, address = recorder(args.cli, folder, "--hook", "*", "--kinds", "activation,gradient")
        hs = hookscope.attach(attached, address=address)
        assert hs.connected
        attachments = {"attached": hs}
        if args.torch_ops:
            proc2, address2 = recorder(args.cli, os.path.join(folder, "t") if os.makedirs(
                os.path.join(folder, "t")) is None else folder, "--hook", "*", "--kinds", "activation,gradient")
            ops = hookscope.attach(torchops, address=address2)
            ops._stats.requested = "torch"  # the torch-ops path, on the CPU
            attachments["torch ops"] = ops
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            attachments["no viewer"] = hookscope.attach(alone, address="unix:" + os.path.join(folder, "nobody.sock"))
        times = {name: [] for name, _ in models}
        for name, model in models:  # warm up
            loss = cpu_step(model, opts[name], x, y)
            if name in attachments:
                attachments[name].step(loss)
        sent0, steps0 = hs.bytes_sent, hs._step
        for _ in range(args.rounds):
            for name, model in models:
                for _ in range(3):
                    start = time.perf_counter()
                    loss = cpu_step(model, opts[name], x, y)
                    if name in attachments:
                        attachments[name].step(loss)
                    times[name].append((time.perf_counter() - start) * 1e3)
        steps = hs._step - steps0
        sent = (hs.bytes_sent - sent0) / steps
        backend = hs.statistics_backend
        for a in attachments.values():
            a.close()
        proc.wait(timeout=600)
        if args.torch_ops:
            proc2.wait(timeout=600)
        import csv
        import json
        with open(os.path.join(folder, "export", "manifest.json")) as f:
            dropped = sum(g["captures"] for g in json.load(f)["gaps"])
        with open(os.path.join(folder, "export", "stats.csv")) as f:
            captures = sum(1 for _ in csv.DictReader(f)) / hs._step
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"attach: {args.model}, batch {args.batch}x3x{args.size}x{args.size}, SGD, {torch.get_num_threads()} "
              f"threads, {args.rounds} rounds x 3 steps, every module hooked (activation, gradient), "
              f"CPU statistics by {backend}")
        for name, _ in models:
            print(f"  {name:9s} median {med[name]:9.2f} ms  ratio {med[name] / med['plain']:.3f}")
        print(f"  per step: {captures:.0f} captures, {sent / 1024:.1f} KiB on the socket "
              f"({sent / max(captures, 1):.0f} B per capture); captures dropped: {dropped}")

        attach_ms = attach_cost(args.cli, folder)
        print(f"  attach of a 1000-module model: {attach_ms:.1f} ms until the viewer has its tree")
        print(f"RESULT attach model={args.model} plain_ms={med['plain']:.3f} attached_ms={med['attached']:.3f} "
              f"ratio={med['attached'] / med['plain']:.4f} peer_ratio={med['peer'] / med['plain']:.4f} "
              f"no_viewer_ratio={med['no viewer'] / med['plain']:.4f} "
              + (f"torch_ops_ratio={med['torch ops'] / med['plain']:.4f} " if args.torch_ops else "")
              + f"socket_kib={sent / 1024:.1f} bytes_per_capture={sent / max(captures, 1):.0f} dropped={dropped} "
              f"attach_ms={attach_ms:.1f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Bottleneck(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes * 4:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity
        return self.relu(out)


def resnet50(num_classes):
    """torchvision.models.resnet50's modules (no torchvision needed on this CPU machine)."""
    layers, inplanes = [], 64
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        stage = [Bottleneck(inplanes, planes, stride)] + [Bottleneck(planes * 4, planes) for _ in range(blocks - 1)]
        inplanes = planes * 4
        layers.append(nn.Sequential(*stage))
    return nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
                         nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1), *layers,
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, num_classes))


def attach_cost(cli, folder):
    shutil.rmtree(os.path.join(folder, "export"), ignore_errors=True)
    big = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(333)])
    proc, address = recorder(cli, folder, "--hook", "*")
    start = time.perf_counter()
    hs = hookscope.attach(big, address=address)
    attach_ms = (time.perf_counter() - start) * 1e3
    assert hs.connected
    big(torch.randn(2, 4)).sum().backward()
    hs.step()
    hs.close()
    proc.wait(timeout=600)
    return attach_ms


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """GPT-2 small's shape: 12 layers, d=768, 12 heads, vocabulary 50,257, tied head."""

    def __init__(self, layers=12, d=768, heads=12, vocab=50257, seq=1024):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        t = idx.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf"), device=idx.device), 1)
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x))


def gpu_bench(args):
    device = torch.device("cuda")
    torch.manual_seed(0)
    if args.model == "gpt2":
        make = lambda: GPT().to(device)  # noqa: E731
        batch = (torch.randint(0, 50257, (8, 1024), device=device), None)
        loss_of = lambda m, b: nn.functional.cross_entropy(m(b[0]).flatten(0, 1).float(), b[0].flatten())  # noqa: E731
    else:
        import torchvision
        make = lambda: torchvision.models.resnet50(num_classes=1000).to(device)  # noqa: E731
        batch = (torch.randn(64, 3, 224, 224, device=device), torch.randint(0, 1000, (64,), device=device))
        loss_of = lambda m, b: nn.functional.cross_entropy(m(b[0]).float(), b[1])  # noqa: E731
    folder = tempfile.mkdtemp(prefix="hs-bench-")
    try:
        def run(model, opt, hs, steps):
            times = []
            for _ in range(steps):
                torch.cuda.synchronize()
                start = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                loss = gpu_step(model, batch, loss_of)
                opt.step()
                if hs is not None:
                    hs.step(loss.detach())
                torch.cuda.synchronize()
                times.append((time.perf_counter() - start) * 1e3)
            return times

        results = {}
        for name in ("plain", "attached"):
            model = make()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            hs = None
            if name == "attached":
                listener = Listener(folder)
                hs = hookscope.attach(model, opt, address=listener.address)
                assert hs.connected
            run(model, opt, hs, 3)  # warm up
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            times = run(model, opt, hs, args.rounds * 3)
            peak = torch.cuda.max_memory_allocated()
            syncs = None
            if hs is not None:
                syncs = count_syncs(lambda: run(model, opt, hs, 1))
                results["inside"] = gpu_stats_bench.instrumented_steps(hs, lambda: run(model, opt, hs, 1))
                rows = hs._stats.rows_bytes
                hs.close()
                listener.thread.join(timeout=60)
                results["captures"] = listener.captures / max(hs._step, 1)
                results["bytes"] = listener.bytes / max(hs._step, 1)
                results["dropped"] = listener.dropped
                results["rows_bytes"] = rows
            results[name] = (statistics.median(times), peak, syncs)
            del model, opt
            torch.cuda.empty_cache()
        inventory_model = make()
        found = count_captures(inventory_model, lambda: gpu_step(inventory_model, batch, loss_of), lambda shape: shape)
        del inventory_model
        torch.cuda.empty_cache()
        captured = sum(b for _, b in found.values())
        bandwidth = copy_bandwidth()
        plain, attached = results["plain"], results["attached"]
        print(f"attach (GPU): {args.model}, {torch.cuda.get_device_name()}, bf16 autocast, AdamW, every module "
              f"hooked (activation, gradient), {args.rounds * 3} steps")
        print(f"  plain    median {plain[0]:9.2f} ms, peak {plain[1] / 2**30:.2f} GiB")
        print(f"  attached median {attached[0]:9.2f} ms, peak {attached[1] / 2**30:.2f} GiB, "
              f"ratio {attached[0] / plain[0]:.3f}, extra peak {(attached[1] - plain[1]) / 2**20:.0f} MiB "
              f"(row buffers {results['rows_bytes'] / 2**20:.1f} MiB)")
        print(f"  host synchronisations in an attached step: {attached[2]} (outside the hooks: the step's end)")
        print(f"  per step: {results['captures']:.0f} captures, {results['bytes'] / 1024:.1f} KiB on the socket; "
              f"dropped: {results['dropped']}")
        one = captured / bandwidth * 1e3
        limit1, limit2 = (plain[0] + one) / plain[0], (plain[0] + 2 * one) / plain[0]
        print(f"  captured a step: {captured / 1e9:.2f} GB; device copy bandwidth {bandwidth / 1e12:.2f} TB/s: one read "
              f"{one:.2f} ms, two reads {2 * one:.2f} ms")
        print(f"  attached / plain {attached[0] / plain[0]:.3f}  (limit / plain: {limit1:.3f} one read, {limit2:.3f} two)")
        print(f"RESULT attach_gpu model={args.model} ratio={attached[0] / plain[0]:.4f} limit_one_read={limit1:.4f} "
              f"limit_two_reads={limit2:.4f} captured_gb={captured / 1e9:.3f} syncs={attached[2]} "
              f"extra_peak_mib={(attached[1] - plain[1]) / 2**20:.0f}")
        pass_bandwidth(bandwidth)
        gpu_stats_bench.backend_bandwidth(bandwidth)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class CudaAutocastOnCpu(torch.overrides.TorchFunctionMode):
    """CPU autocast gives these models CUDA autocast's dtypes but for one rule: CUDA runs
    layer_norm in float32 (its fp32 list), the CPU in bfloat16. This applies that rule."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is nn.functional.layer_norm:
            with torch.autocast("cpu", enabled=False):
                return func(*[a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                              for a in args], **kwargs)
        return func(*args, **kwargs)


def count_captures(model, step, scale_shape):
    """(kind, dtype) -> [captures, bytes] of one hooked training step, every module hooked for
    activations and gradients as attach() hooks them; scale_shape maps a shape to the full size's."""
    from hookscope._hooks import tensors_of
    found = {}

    def add(kind, t):
        numel = 1
        for d in scale_shape(tuple(t.shape)):
            numel *= d
        entry = found.setdefault((kind, str(t.dtype).replace("torch.", "")), [0, 0])
        entry[0] += 1
        entry[1] += numel * t.element_size()

    def hook(module, inputs, output):
        for t in tensors_of(output, []):
            add("activation", t)
            if t.requires_grad:
                t.register_hook(lambda g: add("gradient", g))
    handles = [m.register_forward_hook(hook) for m in model.modules()]
    step()
    for h in handles:
        h.remove()
    return found


def inventory(args):
    """What the GPU models hook in one step, by kind and dtype, computed on the CPU: small steps
    under CUDA autocast's dtypes (CudaAutocastOnCpu), every shape scaled to the benchmark's batch
    and sequence. At the GPU's copy bandwidth, reading those bytes once or twice is the limit."""
    torch.manual_seed(0)
    small_batch, small_seq = 2, 96
    models = {
        "resnet50": (lambda: resnet50(num_classes=1000), lambda: torch.randn(small_batch, 3, 224, 224),
                     lambda m, x: nn.functional.cross_entropy(m(x).float(), torch.zeros(small_batch, dtype=torch.long)),
                     lambda shape: (64,) + shape[1:] if shape and shape[0] == small_batch else shape, "b64, 224 px"),
        "gpt2": (GPT, lambda: torch.randint(0, 50257, (small_batch, small_seq)),
                 lambda m, x: nn.functional.cross_entropy(m(x).flatten(0, 1).float(), x.flatten()),
                 lambda shape: ((8, 1024) + shape[2:] if shape[:2] == (small_batch, small_seq) else
                                (1024,) + shape[1:] if shape and shape[0] == small_seq else shape), "b8, seq 1024"),
    }
    bandwidth = args.bandwidth * 1e12
    for name in args.models or ("resnet50", "gpt2"):
        make, data, loss_of, scale, size = models[name]
        model = make().train()
        x = data()

        def step():
            with CudaAutocastOnCpu(), torch.autocast("cpu", dtype=torch.bfloat16):
                loss = loss_of(model, x)
            loss.backward()
        found = count_captures(model, step, scale)
        total = sum(b for _, b in found.values())
        captures = sum(c for c, _ in found.values())
        print(f"inventory: {name} ({size}, bf16 autocast, every module: activation + gradient): "
              f"{captures} captures, {total / 1e9:.2f} GB a step")
        for (kind, dtype), (count, nbytes) in sorted(found.items()):
            print(f"  {kind:10s} {dtype:9s} {count:4d} captures {nbytes / 1e9:7.3f} GB")
        one = total / bandwidth * 1e3
        line = (f"  at {args.bandwidth:.2f} TB/s: one read {one:.2f} ms, two reads {2 * one:.2f} ms")
        plain = {"resnet50": args.plain_resnet50, "gpt2": args.plain_gpt2}[name]
        if plain:
            line += (f"; with a plain step of {plain:.1f} ms the limit is {(plain + one) / plain:.3f}x (one read), "
                     f"{(plain + 2 * one) / plain:.3f}x (two)")
        print(line)
        print(f"RESULT inventory model={name} captures={captures} bytes={total} one_read_ms={one:.3f}")


def gpu_step(model, batch, loss_of):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_of(model, batch)
    loss.backward()
    return loss


def copy_bandwidth(nbytes=2 << 30):
    """The device's memory bandwidth as a copy sees it (bytes read plus bytes written per second)."""
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        b.copy_(a)
    end.record()
    end.synchronize()
    return 2 * nbytes * 10 / (start.elapsed_time(end) / 1e3)


def pass_bandwidth(bandwidth, numel=51_380_224):
    """Each Triton pass alone on a 51M-value bf16 activation (resnet50's largest), against the
    copy bandwidth; and the torch-ops row on the same tensor. Twice: normal values, and ReLU's
    (half of them zero, in one bin: tl.histogram counts with one shared-memory atomic a value,
    which values crowding one bin may serialize)."""
    for name, x in (("normal", torch.randn(numel, device="cuda").bfloat16()),
                    ("relu", torch.relu(torch.randn(numel, device="cuda")).bfloat16())):
        print(f"  {name} values:")
        time_passes(x, bandwidth, name)
    launch_cost()


def launch_cost(captures=2000, numel=4096):
    """What a capture costs the host: the Python and Triton launch path of both passes, on a
    tensor small enough that the device finishes each pass before the host has launched the
    next (the rate a hook can go at). Timed on the host clock, one wait at the end."""
    from hookscope import _triton_stats
    kernels = _triton_stats.TritonStatistics()
    x = torch.randn(numel, device="cuda").bfloat16()
    row = torch.empty(_stats.HEADER + 64, dtype=torch.float64, device="cuda")
    kernels.row(x, 64, row)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(captures):
        kernels.row(x, 64, row)
    host = (time.perf_counter() - start) / captures * 1e6
    torch.cuda.synchronize()
    print(f"  host cost of a capture (2 launches, {numel} values): {host:.1f} us, {host / 2:.1f} us a launch")
    print(f"RESULT launch_cost host_us_per_capture={host:.2f} launches=2")


def time_passes(x, bandwidth, label):
    from hookscope import _triton_stats
    kernels = _triton_stats.TritonStatistics()
    numel = x.numel()
    bins = 64
    row = torch.empty(_stats.HEADER + bins, dtype=torch.float64, device="cuda")
    kernels.row(x, bins, row)  # compiles both passes
    launches = kernels.launches(x, bins, row)
    timings = {}
    for name, launch in launches:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            launch()
        end.record()
        end.synchronize()
        timings[name] = start.elapsed_time(end) / 20
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    _stats.torch_row(x, bins, row)
    end.record()
    end.synchronize()
    nbytes = x.numel() * x.element_size()
    for name, ms in timings.items():
        print(f"  {name} on {numel / 1e6:.1f}M bf16 values: {ms:.3f} ms, {nbytes / ms / 1e9:.2f} TB/s "
              f"({nbytes / ms * 1e3 / bandwidth * 100:.0f}% of the copy bandwidth)")
    print(f"  torch ops on the same tensor: {start.elapsed_time(end):.2f} ms")
    print(f"RESULT pass_bandwidth values={label} " +
          " ".join(f"{name.replace(' ', '')}_ms={ms:.4f}" for name, ms in timings.items()))


def count_syncs(fn):
    """Host synchronisations fn makes, as torch.cuda.set_sync_debug_mode("warn") reports them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return sum("synchroniz" in str(w.message) for w in caught)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cli", nargs="?", help="hookscope-cli (the CPU bench records through it)")
    parser.add_argument("rounds_pos", nargs="?", type=int)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--model", default=None)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=112)
    parser.add_argument("--torch-ops", action="store_true", help="also time the torch-ops statistics on the CPU")
    parser.add_argument("--inventory", action="store_true",
                        help="print what the GPU models hook a step (bytes by dtype) and the limit it sets, on the CPU")
    parser.add_argument("--models", nargs="*", help="with --inventory: resnet50, gpt2 (default both)")
    parser.add_argument("--bandwidth", type=float, default=3.35,
                        help="with --inventory: the GPU's memory bandwidth in TB/s (H100 SXM: 3.35)")
    parser.add_argument("--plain-resnet50", type=float, default=32.5,
                        help="with --inventory: a plain resnet50 step in ms (H100, measured 2026-11-24)")
    parser.add_argument("--plain-gpt2", type=float, default=52.4,
                        help="with --inventory: a plain gpt2 step in ms (H100, measured 2026-11-24)")
    args = parser.parse_args()
    if args.inventory:
        inventory(args)
        return
    if args.rounds_pos:
        args.rounds = args.rounds_pos
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("attach_bench: --device cuda needs a CUDA GPU; none is visible")
        args.model = args.model or "resnet50"
        gpu_bench(args)
    else:
        if not args.cli:
            raise SystemExit("attach_bench: give hookscope-cli for the CPU bench")
        args.model = args.model or "resnet18"
        cpu_bench(args)


if __name__ == "__main__":
    main()
