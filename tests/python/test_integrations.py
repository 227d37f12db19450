"""HookScope's Lightning and Hugging Face callbacks, end to end against `hookscope-cli record`.

Each test runs a real fit (tests/python/integrations/) with the library from the Python index
that setup.sh installs into the venv (pinned, with torch left at its version); a Python without
the library skips them. Parity is with PyTorch's own hooks on the same fit, training forwards
only, as train_script.Reference computes it.
"""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from test_attach import CLI, Recorder, assert_matches, manifest, read_csv, tmp  # noqa: F401 (tmp: fixture)

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


def run(script, address, *args, timeout=600):
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
