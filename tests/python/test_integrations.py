"""HookScope's Lightning and Hugging Face callbacks, end to end against `hookscope-cli record`.

Each test runs a real fit (tests/python/integrations/) with the library from the Python index
that setup.sh installs into the venv (pinned, with torch left at its version); a Python without
the library skips them. Parity is with PyTorch's own hooks on the same fit, training forwards
only, as train_script.Reference computes it.
"""
import importlib.util
import math
import json
import os
import subprocess
import sys

import pytest

from test_attach import CLI, Recorder, assert_matches, manifest, read_csv, tmp  # noqa: F401 (tmp: fixture)
from deadlines import DEADLINE, LONG_DEADLINE

HERE = os.path.dirname(os.path.abspath(__file__))
LIGHTNING = os.path.join(HERE, "integrations", "lightning_script.py")
TRANSFORMERS = os.path.join(HERE, "integrations", "transformers_script.py")


def have(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


needs_lightning = pytest.mark.skipif(not have("lightning"), reason="lightning is not installed (scripts/setup.sh)")
needs_transformers = pytest.mark.skipif(not (have("transformers") and have("accelerate")),
                                        reason="transformers and accelerate are not installed (scripts/setup.sh)")


def run(script, address, *args, timeout=LONG_DEADLINE):
    env = dict(os.environ, HOOKSCOPE_ADDRESS=address, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, script, *args], env=env, capture_output=True, text=True, timeout=timeout)


def steps_of(rows):
    return sorted({int(r["step"]) for r in rows})


def check_fit(tmp, script, *args, ranks=1, steps=3, accumulate=2):
    """Runs `script` against a recorder hooking every module and checks parity and step count."""
    recorder = Recorder(tmp, "--hook", "*", *(["--ranks", str(ranks)] if ranks > 1 else []))
    reference = os.path.join(tmp, "reference.json")
    fit = run(script, recorder.address, "--steps", str(steps), "--accumulate", str(accumulate),
              "--reference", reference, *args)
    assert fit.returncode == 0, fit.stdout + fit.stderr
    code, err = recorder.wait()
    assert code == 0, err
    rows = read_csv(recorder.out, "stats.csv")
    for rank in range(ranks):
        mine = [r for r in rows if int(r["rank"]) == rank]
        with open(reference + (".rank%d" % rank if ranks > 1 else "")) as f:
            ref = json.load(f)
        assert ref and {r["step"] for r in ref} == set(range(steps))
        assert_matches(mine, ref)
        # Nothing the reference did not see: validation and evaluation are kept out of the steps.
        assert len([r for r in mine if r["kind"] in ("activation", "gradient")]) == len(ref)
        # One HookScope step per optimizer step, and `accumulate` calls of a module in each.
        assert steps_of(mine) == list(range(steps))
        for step in range(steps):
            calls = {int(r["call"]) for r in mine if r["module"].endswith("inp") and int(r["step"]) == step
                     and r["kind"] == "activation"}
            assert calls == set(range(accumulate)), (step, calls)
    return rows, read_csv(recorder.out, "scalars.csv"), fit


@needs_lightning
def test_lightning_one_step_per_optimizer_step_with_pytorch_hooks_numbers(tmp):
    _, scalars, fit = check_fit(tmp, LIGHTNING)
    assert "fit returned at step 3, should_stop=False" in fit.stdout
    names = {(int(r["step"]), r["name"]) for r in scalars}
    # The loss, the optimizer's lr and what the module logged with self.log, at every step.
    for step in range(3):
        assert {(step, "loss"), (step, "lr"), (step, "batch_mean")} <= names


@needs_lightning
def test_lightning_bf16_mixed_and_a_compiled_module(tmp):
    check_fit(tmp, LIGHTNING, "--precision", "bf16-mixed", "--compile", steps=2)


@needs_lightning
def test_lightning_ddp_every_rank_attaches(tmp):
    rows, _, fit = check_fit(tmp, LIGHTNING, "--devices", "2", ranks=2, steps=2, accumulate=1)
    assert {int(r["rank"]) for r in rows} == {0, 1}
    assert fit.stdout.count("fit returned at step 2") == 2


def check_stop(tmp, script, *args):
    recorder = Recorder(tmp, "--break", "non_finite")
    fit = run(script, recorder.address, "--steps", "20", "--nan-at", "2", *args)
    code, err = recorder.wait()
    assert code == 6, err
    assert fit.returncode == 0, fit.stdout + fit.stderr
    assert "Traceback" not in fit.stderr, fit.stderr
    assert "HookScope stopped the run" in fit.stderr
    # The step where the rule fired is the last one the trainer ran.
    assert manifest(recorder.out)["steps"] == 3
    return fit


@needs_lightning
def test_lightning_a_break_in_the_recorder_ends_the_fit_cleanly(tmp):
    fit = check_stop(tmp, LIGHTNING)
    assert "fit returned at step 3, should_stop=True" in fit.stdout


@pytest.mark.skipif(not have("pytorch_lightning"), reason="pytorch_lightning is not installed")
def test_the_pytorch_lightning_package_takes_its_own_callback(tmp):
    fit = check_stop(tmp, LIGHTNING, "--package", "pytorch_lightning")
    assert "should_stop=True" in fit.stdout


@needs_transformers
def test_transformers_one_step_per_optimizer_step_with_pytorch_hooks_numbers(tmp):
    _, scalars, fit = check_fit(tmp, TRANSFORMERS)
    assert "train returned at step 3" in fit.stdout
    names = {(int(r["step"]), r["name"]) for r in scalars}
    for step in range(3):
        assert {(step, "loss"), (step, "lr"), (step, "grad_norm")} <= names


@needs_transformers
def test_transformers_a_break_in_the_recorder_ends_training_cleanly(tmp):
    fit = check_stop(tmp, TRANSFORMERS)
    assert "train returned at step 3" in fit.stdout


def test_importing_the_integrations_imports_no_trainer():
    code = ("import sys; sys.path.insert(0, %r); import hookscope, hookscope.integrations; "
            "bad = [m for m in ('lightning', 'pytorch_lightning', 'transformers') if m in sys.modules]; "
            "assert not bad, bad" % os.path.join(HERE, "..", "..", "python"))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------------ TensorBoard

FIXTURES = os.environ.get("HOOKSCOPE_FIXTURES", os.path.join(HERE, "..", "..", "build", "fixtures"))
MODELS = os.environ.get("HOOKSCOPE_MODELS", os.path.join(HERE, "..", "..", "resources", "models"))
needs_tensorboard = pytest.mark.skipif(not have("tensorboard"), reason="tensorboard is not installed (scripts/setup.sh)")


def load_events(logdir):
    from tensorboard.backend.event_processing import event_accumulator
    events = event_accumulator.EventAccumulator(logdir, size_guidance={"histograms": 0, "scalars": 0})
    events.Reload()
    return events


def capture(tmp, *args):
    out = os.path.join(tmp, "run")
    result = subprocess.run([CLI, "capture", os.path.join(MODELS, "small_cnn.pt"), "--out", out, "--hook", "*",
                             "--kinds", "activation,gradient,param_grad", *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return out


def export_tensorboard(run, logdir, python=sys.executable):
    return subprocess.run([CLI, "export-tensorboard", run, logdir, "--python", python],
                          capture_output=True, text=True, timeout=DEADLINE)


def near(a, b, rel):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


@needs_tensorboard
@pytest.mark.parametrize("data", [None, "nan_input.data.pt"])
def test_tensorboard_reads_back_every_histogram_and_scalar_of_an_export(tmp, data):
    import torch
    run = capture(tmp, "--steps", "3", *(["--data", os.path.join(FIXTURES, data)] if data else []))
    logdir = os.path.join(tmp, "tb")
    result = export_tensorboard(run, logdir)
    assert result.returncode == 0, result.stderr
    events = load_events(logdir)
    tags = events.Tags()
    stats = {(int(r["step"]), r["kind"], r["module"], int(r["call"]), int(r["index"])): r
             for r in read_csv(run, "stats.csv")}
    histograms = torch.load(os.path.join(run, "histograms.pt"), weights_only=True)
    checked = 0
    for key, series in histograms.items():
        _, kind, module, call, index = key.split("/")
        tag = "%s/%s/%s/%s" % (kind, module or "(root)", call, index)
        written = {e.step: e.histogram_value for e in events.Histograms(tag)} if tag in tags["histograms"] else {}
        for i, step in enumerate(series["steps"].tolist()):
            row = stats[(step, kind, module, int(call), int(index))]
            finite = int(row["numel"]) - int(row["nan_count"]) - int(row["inf_count"])
            if finite == 0:  # nothing finite to count: no histogram, the NaN count says why
                assert step not in written
                continue
            h = written[step]
            assert list(h.bucket) == series["counts"][i].tolist()
            assert list(h.bucket_limit) == series["edges"][i, 1:].tolist()
            assert (h.min, h.max, h.num) == (float(row["min"]), float(row["max"]), finite)
            assert near(h.sum, float(row["mean"]) * finite, 1e-9)
            std, mean = float(row["std"]), float(row["mean"])
            assert near(h.sum_squares, (finite - 1) * std * std + finite * mean * mean, 1e-9)
            checked += 1
    assert checked >= (3 * 20 if data is None else 10)
    # Every scalar of the export (float32 in TensorBoard), each gradient's norm, and NaN counts.
    for row in read_csv(run, "scalars.csv"):
        values = {e.step: e.value for e in events.Scalars(row["name"])}
        assert near(values[int(row["step"])], float(row["value"]), 1e-6), row
    for (step, kind, module, call, index), row in stats.items():
        path = "%s/%s/%d/%d" % (kind, module or "(root)", call, index)
        if kind in ("gradient", "param_grad"):
            values = {e.step: e.value for e in events.Scalars("grad_norm/" + path)}
            assert near(values[step], float(row["l2norm"]), 1e-6)
        if int(row["nan_count"]):
            assert {e.step: e.value for e in events.Scalars("nan_count/" + path)}[step] == int(row["nan_count"])
    assert any(t.startswith("nan_count/") for t in tags["scalars"]) == (data is not None)
    # What float16 and fp8 would lose, as fractions of a tensor, for each series that ever lost any.
    precision = ("f16_overflow", "f16_underflow", "e4m3_underflow", "e5m2_underflow")
    lost = {(name, kind, module, call, index) for (step, kind, module, call, index), row in stats.items()
            for name in precision if int(row[name]) > 0}
    assert any(name == "e4m3_underflow" for name, *_ in lost) or data is not None  # a CNN's ReLU outputs have some
    for (step, kind, module, call, index), row in stats.items():
        for name in precision:
            tag = "precision/%s/%s/%s/%d/%d" % (name, kind, module or "(root)", call, index)
            if (name, kind, module, call, index) in lost:
                value = {e.step: e.value for e in events.Scalars(tag)}[step]
                assert near(value, int(row[name]) / int(row["numel"]), 1e-6), (tag, step, value, row[name])
            else:
                assert tag not in tags["scalars"]


@needs_tensorboard
def test_tensorboard_ranks_become_runs_and_a_used_logdir_is_refused(tmp):
    recorder = Recorder(tmp, "--hook", "*", "--ranks", "2")
    fit = run(LIGHTNING, recorder.address, "--steps", "2", "--devices", "2") if have("lightning") else None
    if fit is None:
        recorder.kill()
        pytest.skip("lightning is not installed: no two-rank run to export")
    assert fit.returncode == 0, fit.stderr
    assert recorder.wait()[0] == 0
    logdir = os.path.join(tmp, "tb")
    result = export_tensorboard(recorder.out, logdir)
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(logdir)) == ["rank0", "rank1"]
    for rank in (0, 1):
        steps = {e.step for e in load_events(os.path.join(logdir, "rank%d" % rank)).Scalars("loss")}
        assert steps == {0, 1}
    # A folder that already holds a log: refused, and left as it was.
    before = sorted(os.listdir(logdir))
    again = export_tensorboard(recorder.out, logdir)
    assert again.returncode == 5 and "not empty" in again.stderr
    assert sorted(os.listdir(logdir)) == before
    assert not [n for n in os.listdir(tmp) if "hookscope-tmp" in n]
    # A Python without tensorboard: says what to install, exit 8.
    bare = export_tensorboard(recorder.out, os.path.join(tmp, "tb2"), "/nonexistent/python")
    assert bare.returncode == 8 and "--python" in bare.stderr


def test_export_tensorboard_says_how_far_it_is_once_it_takes_more_than_a_second(monkeypatch):
    """export-tensorboard of a long run wrote 185,000 histograms in 2.5 minutes without a word:
    the writer says how many of how many are written, a line every 10 s off a terminal, once
    past a second (a clock that moves 0.25 s a histogram here, and a writer that keeps nothing)."""
    import io
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
    from hookscope import tensorboard_export

    class Writer:
        def __init__(self, log_dir):
            pass

        def add_histogram_raw(self, *args, **kwargs):
            clock[0] += 0.25

        add_scalar = add_histogram_raw

        def close(self):
            pass

    clock = [100.0]
    monkeypatch.setattr(tensorboard_export.time, "monotonic", lambda: clock[0])
    said = io.StringIO()
    monkeypatch.setattr(tensorboard_export.sys, "stderr", said)
    histogram = json.dumps({"type": "histogram", "rank": 0, "tag": "activation/fc/0/0", "step": 0, "min": 0, "max": 1,
                            "num": 1, "sum": 1, "sum_squares": 1, "limits": [1.0], "counts": [1]})
    lines = [json.dumps({"type": "begin", "ranks": [0], "histograms": 200, "scalars": 0})] + [histogram] * 200 + \
        [json.dumps({"type": "end", "histograms": 200, "scalars": 0})]
    assert tensorboard_export.write("unused", lines, Writer) == (200, 0, [0])
    progress = said.getvalue().splitlines()
    # 50 s of writing: a line at 10, 20, 30 and 40 s, and the last.
    assert progress[0] == "export-tensorboard: 40 of 200 histograms and scalars written (20%), about 40 s left", progress
    assert len(progress) == 5 and progress[-1] == "export-tensorboard: 200 of 200 histograms and scalars written (100%), in 50 s", progress
