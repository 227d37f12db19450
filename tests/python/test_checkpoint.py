"""`hookscope-cli checkpoint` and `compare` of checkpoints (state_dict pickles, safetensors) run by
HookScope's Python engine: their statistics against torch's own, what damage and hostile files
get (a message naming what is wrong, never a traceback or code run), and two checkpoints
compared. Split from test_engine.py, which checks models that run."""
import csv
import json
import math
import os
import shutil
import sys
import tempfile
import zipfile

import pytest
import torch

from engine_support import cli, write_opening_pickle

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from hookscope.engine.checkpoint import CheckpointError, read_checkpoint  # noqa: E402


@pytest.fixture
def tmp():
    path = tempfile.mkdtemp(prefix="hs-checkpoint-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def write_safetensors(path, tensors, header_patch=None, length=None):
    """A safetensors file written by hand from the documented format (8-byte length, JSON, data)."""
    header, data = {}, b""
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": {torch.float32: "F32", torch.int64: "I64"}[t.dtype], "shape": list(t.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if header_patch:
        header_patch(header)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write((len(text) if length is None else length).to_bytes(8, "little") + text + data)


def weights(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def table(stdout):
    """{tensor: [min, max, mean, std, l2norm, NaN, Inf]} from `checkpoint`'s table (module rows
    hold one word; a tensor's row its leaf name under its module)."""
    rows, module = {}, ""
    for line in stdout.splitlines()[2:]:
        words = line.split()
        if len(words) == 1:
            module = words[0]
            continue
        name = (module + "." + words[0]) if line.startswith("  ") else words[0]
        rows[name] = [float(w) for w in words[3:8]] + [int(words[8]), int(words[9])]
    return rows


@pytest.mark.parametrize("form", ["state_dict", "safetensors"])
def test_a_checkpoints_statistics_equal_torchs(tmp, form):
    sd = weights(0)
    sd["2.bias"][1] = float("nan")
    sd["0.weight"][0, 0] = float("inf")
    path = os.path.join(tmp, "w.pt" if form == "state_dict" else "w.safetensors")
    torch.save(sd, path) if form == "state_dict" else write_safetensors(path, sd)
    result = cli("checkpoint", path)
    assert result.returncode == 0, result.stderr
    assert "NaN or Inf in 2 of them" in result.stdout.splitlines()[0]
    rows = table(result.stdout)
    assert set(rows) == set(sd)
    for name, t in sd.items():
        d = t.double().flatten()
        finite = d[torch.isfinite(d)]
        expected = [finite.min().item(), finite.max().item(), finite.mean().item(), finite.std().item(),
                    finite.norm().item()]
        for ours, theirs in zip(rows[name][:5], expected):
            assert abs(ours - theirs) <= 1e-5 * max(abs(theirs), 1e-3), (name, rows[name], expected)
        assert rows[name][5:] == [int(torch.isnan(d).sum()), int(torch.isinf(d).sum())]


def test_a_flipped_byte_in_a_checkpoints_tensor_data_is_named_not_measured(tmp):
    """torch.load does not check a record's CRC-32: checkpoint does, and a damaged record is exit
    4 naming it, never statistics of altered values (min -6.5e36 for -0.019)."""
    from zip_damage import flip_a_byte_in
    path = os.path.join(tmp, "weights.pt")
    torch.save(weights(0), path)
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if "/data/" in i.filename and i.file_size >= 16)
    flip_a_byte_in(path, info.filename, offset=3, mask=0x40)
    for args in (("checkpoint", path), ("checkpoint", path, "--compare", path)):
        result = cli(*args)
        assert result.returncode == 4, (args, result.stdout, result.stderr)
        assert "its record %s does not match the CRC-32" % info.filename in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_a_checkpoint_with_cycles_deep_nesting_or_tensors_without_values_says_what_never_a_traceback(tmp):
    """A list that holds itself, nesting past 64 levels: refused by path; meta and sparse tensors
    listed as having no values; a quantized one measured dequantized; a view that repeats one
    stored value 10^12 times is not walked (a 1.7 KB file kept checkpoint busy for minutes)."""
    looped = [torch.ones(2)]
    looped.append(looped)
    deep = torch.ones(1)
    for _ in range(200):
        deep = [deep]
    for name, value, says in (("cycle", {"w": torch.ones(2), "loop": looped}, "'loop.1' holds a container it is"),
                              ("deep", {"deep": deep}, "nested more than 64 containers deep")):
        path = os.path.join(tmp, name + ".pt")
        torch.save(value, path)
        result = cli("checkpoint", path)
        assert result.returncode == 4 and says in result.stderr, (name, result.stderr)
        assert "Traceback" not in result.stderr
    odd = {"meta": torch.empty(3, 4, device="meta"), "sparse": torch.eye(3).to_sparse(),
           "quantized": torch.quantize_per_tensor(torch.tensor([-1.0, 0.5, 2.0]), 0.1, 0, torch.qint8),
           "repeated": torch.ones(1).expand(10 ** 12), "plain": torch.arange(4.0)}
    path = os.path.join(tmp, "odd.pt")
    torch.save(odd, path)
    assert os.path.getsize(path) < 10_000
    result = cli("checkpoint", path)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()[2:] if not line.startswith("measured")}
    assert "a meta tensor: no values to measure" in lines["meta"]
    assert "a sparse_coo tensor: no values to measure" in lines["sparse"]
    assert "a view of 1 stored values seen as 1000000000000" in lines["repeated"]
    assert lines["quantized"].split()[2] == "qint8" and lines["quantized"].split()[-7:-5] == ["-1", "2"]
    assert "measured dequantized (quantized tensors): quantized" in result.stdout
    assert lines["plain"].split()[-7:-5] == ["0", "3"]
    compared = cli("checkpoint", path, "--compare", path)
    assert compared.returncode == 0, compared.stderr
    assert "not measured (no values, or a view repeating its storage): meta, repeated, sparse" in compared.stdout


def test_checkpoint_leaves_no_scratch_folder_and_says_when_its_python_cannot_run_the_engine(tmp):
    """The confined engine cannot remove its own scratch folder: hookscope-cli makes and removes it,
    on every exit. A --python that cannot run the engine is said to be so (exit 8), not a bare 1."""
    path = os.path.join(tmp, "weights.pt")
    torch.save(weights(0), path)
    scratch = os.path.join(tmp, "scratch")
    os.mkdir(scratch)
    for args in ((path,), (path, "--compare", path), (os.path.join(tmp, "missing.pt"),)):
        result = cli("checkpoint", *args, env={"TMPDIR": scratch})
        assert result.returncode in (0, 4), result.stderr
        assert os.listdir(scratch) == [], (args, os.listdir(scratch))
    result = cli("checkpoint", path, "--python", "/bin/false")
    assert result.returncode == 8, result.stderr
    assert "/bin/false could not run hookscope.engine (exit 1)" in result.stderr, result.stderr


def test_a_checkpoints_buffers_are_not_counted_as_parameters_and_its_nan_is_an_alert(tmp):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(16), torch.nn.Linear(4, 2))
    state = model.state_dict()
    state["2.weight"][0, 0] = float("nan")
    path = os.path.join(tmp, "bn.pt")
    torch.save(state, path)
    result = cli("inspect", path)
    assert result.returncode == 0, result.stderr
    norm = [line for line in result.stdout.splitlines() if line.strip().startswith("1 ")][0]
    assert norm.split()[-2:] == ["32", "32"], norm  # weight and bias; not running_mean, running_var, num_batches_tracked
    out = os.path.join(tmp, "run")
    result = cli("capture", path, "--out", out, "--steps", "1", "--kinds", "param", "--hook", "*")
    assert result.returncode == 0, result.stderr
    with open(os.path.join(out, "alerts.csv")) as f:
        alerts = list(csv.DictReader(f))
    assert [(a["module"], a["rule"]) for a in alerts] == [("2.weight", "non_finite")], alerts


def test_comparing_two_checkpoints_names_what_fine_tuning_changed_and_what_went_nan(tmp):
    before, after = weights(0), weights(0)
    after["2.weight"] += 0.05            # the head, fine-tuned
    after["0.bias"] += 1e-4              # barely
    after["2.bias"][0] = float("nan")    # gone bad
    a, b = os.path.join(tmp, "before.pt"), os.path.join(tmp, "after.safetensors")
    torch.save(before, a)
    write_safetensors(b, after)
    result = cli("checkpoint", a, "--compare", b)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == ("before.pt -> after.safetensors: 4 tensors in both, 3 changed, 1 unchanged; NaN or Inf in 1 "
                        "(the change is measured over the values finite in both)")
    order = [line.split()[0] for line in lines[2:6]]
    assert order == ["2.bias", "2.weight", "0.bias", "0.weight"]  # NaN first, then the largest relative change
    # The bias that went NaN: its change over its finite values (not nan, relative not inf), and
    # the NaN counted in the file that holds it, whichever way round the files are given.
    nan_bias = lines[2].split()
    finite = torch.arange(1, before["2.bias"].numel())
    assert abs(float(nan_bias[1]) - (after["2.bias"][finite] - before["2.bias"][finite]).double().norm().item()) <= 1e-9
    # NaN and Inf of each file in columns of their own: NaN 1st, Inf 1st, NaN 2nd, Inf 2nd.
    assert lines[1].split()[-8:] == ["NaN", "1st", "Inf", "1st", "NaN", "2nd", "Inf", "2nd"], lines[1]
    assert math.isfinite(float(nan_bias[2])) and nan_bias[3:] == ["0", "0", "1", "0"], nan_bias
    reverse = cli("checkpoint", b, "--compare", a)
    assert reverse.returncode == 0, reverse.stderr
    assert reverse.stdout.splitlines()[2].split()[3:] == ["1", "0", "0", "0"], reverse.stdout
    with_inf = dict(after)
    with_inf["2.bias"] = after["2.bias"].clone()
    with_inf["2.bias"][1] = float("inf")
    c = os.path.join(tmp, "inf.pt")
    torch.save(with_inf, c)
    both = cli("checkpoint", a, "--compare", c)
    assert both.stdout.splitlines()[2].split()[3:] == ["0", "0", "1", "1"], both.stdout
    table = cli("checkpoint", a, "--compare", c, "--csv")
    rows = list(csv.DictReader(table.stdout.splitlines()))
    bias = next(r for r in rows if r["tensor"] == "2.bias")
    assert (bias["nonfinite"], bias["nan_first"], bias["inf_first"], bias["nan_second"], bias["inf_second"]) == \
        ("2", "0", "0", "1", "1"), bias
    head = lines[3].split()
    delta = (after["2.weight"].double() - before["2.weight"].double()).norm().item()
    assert abs(float(head[1]) - delta) <= 1e-5 * delta
    assert abs(float(head[2]) - delta / before["2.weight"].double().norm().item()) <= 1e-5


@pytest.mark.parametrize("damage,says", [
    ("truncated", "outside the"),
    ("huge header", "claims a 1152921504606846976-byte header"),
    ("offsets out of range", "outside the"),
    ("wrong length", "bytes of data"),
    ("not json", "not JSON"),
    ("bad dtype", "does not read"),
    ("dtype as a list", "has dtype ['F32'], which HookScope does not read (a dtype is a name"),
    ("dtype as an object", "has dtype {'F32': 1}, which HookScope does not read"),
    ("overlapping", "(they overlap)"),
    ("gap", "belong to no tensor"),
    ("bytes after", "the bytes after belong to no tensor"),
    ("booleans as offsets", "not two whole numbers"),
    ("duplicate name", "the key '0.bias' is given twice"),
])
def test_a_damaged_or_hostile_safetensors_file_is_refused_with_what_is_wrong(tmp, damage, says):
    path = os.path.join(tmp, "bad.safetensors")
    sd = weights(1)
    if damage == "truncated":
        write_safetensors(path, sd)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 7)
    elif damage == "huge header":
        write_safetensors(path, sd, length=1 << 60)
    elif damage == "offsets out of range":
        write_safetensors(path, sd, header_patch=lambda h: h["0.weight"].update(data_offsets=[0, 1 << 62]))
    elif damage == "wrong length":
        write_safetensors(path, sd, header_patch=lambda h: h["0.weight"].update(shape=[6, 6]))
    elif damage == "not json":
        with open(path, "wb") as f:
            f.write((5).to_bytes(8, "little") + b"{oops")
    elif damage in ("overlapping", "gap", "bytes after", "booleans as offsets", "duplicate name"):
        # What the safetensors library refuses: the tensors must tile the data, once each.
        a, b = torch.arange(4, dtype=torch.float32), torch.arange(4, dtype=torch.float32) + 10
        body = a.numpy().tobytes() + b.numpy().tobytes()
        entries = {"overlapping": '"a": [0, 16], "b": [8, 24]', "gap": '"a": [0, 16], "b": [24, 40]',
                   "bytes after": '"a": [0, 16], "b": [16, 32]', "booleans as offsets": '"a": [false, 16], "b": [16, 32]',
                   "duplicate name": '"a": [0, 16], "0.bias": [16, 32], "0.bias": [16, 32]'}[damage]
        fields = []
        for pair in entries.split("], "):
            name, offsets = pair.split(": ", 1)
            fields.append('%s: {"dtype": "F32", "shape": [4], "data_offsets": %s}' % (name, offsets.rstrip("]") + "]"))
        text = ("{" + ", ".join(fields) + "}").encode()
        extra = {"gap": 8, "bytes after": 8}.get(damage, 0)
        with open(path, "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text + body + b"\0" * extra)
    elif damage == "dtype as a list":  # was a TypeError, reported as "could not run hookscope.engine"
        write_safetensors(path, sd, header_patch=lambda h: h["0.bias"].update(dtype=["F32"]))
    elif damage == "dtype as an object":
        write_safetensors(path, sd, header_patch=lambda h: h["0.bias"].update(dtype={"F32": 1}))
    else:
        write_safetensors(path, sd, header_patch=lambda h: h["0.bias"].update(dtype="F8_E4M3X"))
    result = cli("checkpoint", path)
    assert result.returncode == 4, result.stdout + result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_checkpoint_that_needs_code_is_not_run(tmp):
    victim = os.path.join(tmp, "victim.txt")
    with open(victim, "w") as f:
        f.write("original\n")
    path = os.path.join(tmp, "evil.pt")
    write_opening_pickle(victim, path, extra="'w': torch.ones(2), ")
    result = cli("checkpoint", path, "--no-confine")  # weights_only alone keeps it from running
    assert result.returncode == 4 and "cannot be read as weights alone" in result.stderr
    with open(victim) as f:
        assert f.read() == "original\n"


def test_any_damage_to_a_checkpoint_is_a_checkpoint_error_never_another(tmp):
    """Random byte changes, truncations and extensions of a safetensors file and a torch zip: each
    either reads or raises CheckpointError (the message the CLI prints), nothing else."""
    import random
    rng = random.Random(0)
    sd = weights(2)
    sources = [os.path.join(tmp, "good.safetensors"), os.path.join(tmp, "good.pt")]
    write_safetensors(sources[0], sd)
    torch.save(sd, sources[1])
    outcomes = {"read": 0, "refused": 0}
    for i in range(400):
        with open(sources[i % 2], "rb") as f:
            data = bytearray(f.read())
        for _ in range(rng.randint(1, 6)):
            where = rng.randrange(len(data))
            choice = rng.random()
            if choice < 0.6:
                data[where] = rng.randrange(256)
            elif choice < 0.8:
                del data[where:]
            else:
                data[where:where] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
            if not data:
                data = bytearray(b"\0")
        path = os.path.join(tmp, "mutant-%d" % i)
        with open(path, "wb") as f:
            f.write(data)
        try:
            read_checkpoint(path)
            outcomes["read"] += 1
        except CheckpointError:
            outcomes["refused"] += 1
        os.remove(path)
    assert outcomes["refused"] > 100 and sum(outcomes.values()) == 400
