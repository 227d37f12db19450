"""Sharded training attached to `hookscope-cli record` (gloo, CPU ranks by torch.multiprocessing):
FSDP2's fully_shard and tensor parallel. Each parameter's and gradient's whole-tensor series
(rank hookscope.WHOLE) equals tensor_statistics of the tensor the script gathered itself
(DTensor.full_tensor()) at the same step: min, max, counts and the histogram exactly, moments to
1e-6. HookScope's one collective per step runs at the step's end, never in a hook, and a rank
that is not attached makes no rank wait.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import warnings

import pytest
import torch

from test_attach import CLI, Recorder, tmp  # noqa: F401  (tmp: fixture)
from test_distributed import run_job as distributed_job
from deadlines import DEADLINE

torch = pytest.importorskip("torch")
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "attach", "sharded_script.py")
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import hookscope  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CLI), reason="hookscope-cli is not built"),
    pytest.mark.skipif(tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 6),
                       reason="fully_shard and DTensor need PyTorch 2.6 or later"),
]

HOOKS = ("--hook", "*", "--kinds", "activation,param,param_grad,update")


def run_job(address, *args, timeout=DEADLINE):
    """The job; a rank killed at its exit by PyTorch's gloo race (docs/distributed.md: "terminate
    called without an active exception", with or without HookScope: seen twice in CI runs of
    these tests, in none of 47 jobs run under load here) after every rank said it finished counts as a job that
    ran: test_exit_race is the test of that exit. Anything else is returned as it is."""
    job = distributed_job(address, *args, timeout=timeout, script=SCRIPT)
    world = int(args[args.index("--world") + 1]) if "--world" in args else 2
    finished = all("rank %d finished" % rank in job.stderr for rank in range(world))
    if job.returncode != 0 and finished and "terminate called without an active exception" in job.stderr \
            and "terminated with signal SIGABRT" in job.stderr:
        warnings.warn("a rank aborted at exit after the job finished (PyTorch's gloo race at exit)")
        job.returncode = 0
    return job


def record(tmp, *args):
    recorder = Recorder(tmp, *HOOKS)
    job = run_job(recorder.address, *args)
    assert job.returncode == 0, job.stderr[-3000:]
    code, err = recorder.wait()
    assert code == 0, err
    return hookscope.load_run(recorder.out), job


def assert_whole_equals_gathered(run, reference):
    assert reference
    for ref in reference:
        series = run.series(ref["kind"], ref["name"], rank=hookscope.WHOLE)
        at = series.steps.index(ref["step"])
        got = series.stats[at]
        what = "%s %s step %d" % (ref["kind"], ref["name"], ref["step"])
        assert got["shape"] == "x".join(map(str, ref["shape"])), what
        for exact in ("min", "max", "amax"):
            assert got[exact] == ref[exact], (what, exact, got[exact], ref[exact])
        for count, column in (("nan", "nan_count"), ("inf", "inf_count"), ("f16_overflow", "f16_overflow"),
                              ("f16_underflow", "f16_underflow"), ("e4m3_underflow", "e4m3_underflow"),
                              ("e5m2_underflow", "e5m2_underflow")):
            assert got[column] == ref[count], (what, column)
        for moment, column in (("mean", "mean"), ("std", "std"), ("l2", "l2norm"), ("zeros", "zero_frac")):
            # The kernel sums float32 values in float lanes, grouped by where a shard starts: a mean
            # near zero (a sum that cancels) is as close as the values' spread allows, not closer.
            scale = abs(ref["std"]) if moment == "mean" else 0.0
            assert math.isclose(got[column], ref[moment], rel_tol=1e-6, abs_tol=max(1e-12, 1e-6 * scale)), \
                (what, moment, got[column], ref[moment])
        assert series.counts[at].tolist() == ref["hist"], what
        assert series.edges[at][0].item() == ref["lo"] and series.edges[at][-1].item() == ref["hi"], what


@pytest.mark.parametrize("world,model", [(2, "mlp"), (4, "mlp"), (2, "block"), (2, "tp")])
def test_sharded_parameters_and_gradients_are_whole_tensors(tmp, world, model):
    run, job = record(tmp, "--world", str(world), "--model", model, "--steps", "3", "--reference", tmp)
    with open(os.path.join(tmp, "reference.json")) as f:
        reference = json.load(f)
    assert_whole_equals_gathered(run, reference)
    # Every module's output on every rank, as the script's own forward hook saw it (tensor
    # parallel's RowwiseParallel returns an AsyncCollectiveTensor: it was dropped, "refused").
    assert "dropped" not in job.stderr, job.stderr[-2000:]
    for rank in range(world):
        with open(os.path.join(tmp, "outputs-%d.json" % rank)) as f:
            for seen in json.load(f):
                series = run.series("activation", seen["name"], rank=rank)
                got = series.stats[series.steps.index(seen["step"])]
                assert (got["min"], got["max"]) == (seen["min"], seen["max"]), (rank, seen)
    # The per-rank view stays: every rank's own shard of every parameter, at every step.
    names = {r["name"] for r in reference}
    for rank in range(world):
        for name in names:
            assert run.series("param", name, rank=rank).steps == [0, 1, 2]
    if model == "mlp":  # uneven: the 10 rows of layer 0 over 4 ranks are 3, 3, 3 and 1
        rows = [run.series("param", "0.weight", rank=r).stats[0]["shape"] for r in range(world)]
        assert rows == (["3x8", "3x8", "3x8", "1x8"] if world == 4 else ["5x8", "5x8"])
        assert run.series("param", "0.weight", rank=hookscope.WHOLE).stats[0]["shape"] == "10x8"
        # An update is relative to the whole parameter's norm: |update| * |before| = |after - before|.
        update = run.series("update", "0.weight", rank=hookscope.WHOLE)
        assert update.steps == [0, 1, 2] and 0 < update.stats[0]["l2norm"] < 1
    # Activations are each rank's own, as in any job; a job without ranks -1 in its rank list.
    assert hookscope.WHOLE not in {s.rank for s in run.all_series() if s.kind == "activation"}
    show = subprocess.run([CLI, "show", run.path], capture_output=True, text=True)
    assert show.returncode == 0 and "%d ranks" % world in show.stdout, show.stdout + show.stderr


def test_one_collective_per_step_at_its_end_never_in_a_hook(tmp):
    run, _ = record(tmp, "--world", "2", "--model", "mlp", "--steps", "4", "--count", tmp)
    # The package's frames only: "__call__" is a Hook's or a GradientHook's (a hook's entry).
    hooks = {"pre_hook", "forward_hook", "__call__", "before_update", "after_update", "capture", "capture_update"}
    for rank in (0, 1):
        with open(os.path.join(tmp, "collectives-%d.json" % rank)) as f:
            calls = json.load(f)
        assert [c["step"] for c in calls] == [0, 1, 2, 3], calls
        for call in calls:
            assert "step" in call["stack"] and "_finish_shards" in call["stack"], call
            assert not hooks & set(call["stack"]), call
    assert run.series("param_grad", "4.weight", rank=hookscope.WHOLE).steps == [0, 1, 2, 3]


def test_a_rank_that_is_not_attached_makes_no_rank_wait(tmp):
    recorder = Recorder(tmp, *HOOKS)
    job = run_job(recorder.address, "--world", "2", "--steps", "3", "--unattached-rank", "1", timeout=DEADLINE)
    assert job.returncode == 0, job.stderr[-3000:]
    assert "a rank of the job is not attached" in job.stderr
    code, err = recorder.wait()
    assert code == 0, err
    run = hookscope.load_run(recorder.out)
    # Rank 0's shards, alone: no whole tensor can be made without rank 1's.
    assert run.series("param", "0.weight", rank=0).steps == [0, 1, 2]
    assert not [s for s in run.all_series() if s.rank == hookscope.WHOLE]


def test_fsdp1_shows_the_models_own_tree_or_says_what_to_set(tmp):
    run, job = record(tmp, "--world", "2", "--model", "fsdp1", "--steps", "2")
    paths = [m["path"] for m in run.modules]
    assert paths == ["", "0", "1", "2"], paths
    # Each rank's flat slice of each parameter: 80 weights of layer 0 over 2 ranks.
    assert sum(run.series("param", "0.weight", rank=r).stats[0]["numel"] for r in (0, 1)) == 80
    assert "each rank's slice" in job.stderr
    flat = os.path.join(tmp, "flat")
    os.mkdir(flat)
    _, job = record(flat, "--world", "2", "--model", "fsdp1-flat", "--steps", "2")
    assert "use_orig_params=True" in job.stderr, job.stderr[-2000:]


@pytest.mark.skipif(__import__("importlib").util.find_spec("tensorboard") is None,
                    reason="tensorboard is not installed (scripts/setup.sh)")
def test_export_tensorboard_writes_the_whole_tensors_as_a_run_of_their_own(tmp):
    """A sharded run's whole-tensor series (rank -1) are TensorBoard's run "whole", beside rank0
    and rank1; none is dropped (a whole-only export gave "0 histograms")."""
    run, _ = record(tmp, "--world", "2", "--model", "mlp", "--steps", "2")
    logdir = os.path.join(tmp, "tb")
    done = subprocess.run([CLI, "export-tensorboard", run.path, logdir, "--python", sys.executable],
                          capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(logdir)) == ["rank0", "rank1", "whole"], os.listdir(logdir)
    assert "3 runs (rank0, rank1, whole)" in done.stderr, done.stderr
    from tensorboard.backend.event_processing import event_accumulator
    events = event_accumulator.EventAccumulator(os.path.join(logdir, "whole"), size_guidance={"histograms": 0})
    events.Reload()
    whole = [s for s in run.all_series() if s.rank == hookscope.WHOLE]
    assert whole
    for series in whole:
        tag = "%s/%s/%d/%d" % (series.kind, series.module or "(root)", series.call, series.index)
        written = {e.step: list(e.histogram_value.bucket) for e in events.Histograms(tag)}
        assert written == {step: series.counts[i].tolist() for i, step in enumerate(series.steps)}, tag


def test_report_draws_the_whole_tensors_of_a_whole_only_export(tmp):
    """A run whose only rows are whole tensors (rank -1: the ranks' rows taken out, as in an
    export kept of the whole tensors alone): the report draws each layer's weight as a whole
    tensor and lists its low-precision counts, rather than "No layer has activations…"."""
    run, _ = record(tmp, "--world", "2", "--model", "mlp", "--steps", "2")
    whole_only = os.path.join(tmp, "whole_only")
    shutil.copytree(run.path, whole_only)
    with open(os.path.join(run.path, "stats.csv")) as f:
        lines = f.readlines()
    kept = [lines[0]] + [line for line in lines[1:] if line.split(",")[1] == "-1"]
    assert 1 < len(kept) < len(lines)
    with open(os.path.join(whole_only, "stats.csv"), "w") as f:
        f.writelines(kept)
    with open(os.path.join(whole_only, "manifest.json")) as f:
        manifest = json.load(f)
    manifest["rows"]["stats.csv"] = len(kept) - 1
    with open(os.path.join(whole_only, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    histograms = os.path.join(whole_only, "histograms.pt")  # its tables match stats.csv's series
    torch.save({k: v for k, v in torch.load(histograms, weights_only=True).items() if k.startswith("rank-1/")},
               histograms)
    html = os.path.join(tmp, "whole.html")
    done = subprocess.run([CLI, "report", whole_only, "--out", html], capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0, done.stderr
    assert "(0 layer heatmaps)" not in done.stderr, done.stderr
    text = open(html).read()
    assert "No layer has activations" not in text
    assert "param of 0.weight, whole tensor" in text or "param_grad of 0.weight, whole tensor" in text
