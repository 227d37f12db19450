"""The first-mover scenario suite (issue 57): faults of ten kinds put in small CPU models at a
known step (attach/spike_script.py), each with the layer it must be found at, and the models
untouched as their clean twins. A scenario is recorded by `hookscope-cli record` as a user would
record it and judged on what `hookscope-cli explain` prints: a hit names the fault's layer first
at the fault's step (as the first to move before a loss spike, or, where the loss did not
follow, as the first layer that left its band all the same); a clean twin must name nothing.

Used by test_first_mover_suite.py (each scenario once) and tests/bench/first_mover_suite.py
(several seeds and fault steps: recall and false alarms, printed for docs/performance.md).
"""

import os
import re
import subprocess
import sys
from collections import namedtuple

from deadlines import DEADLINE, LONG_DEADLINE

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
CLI = os.environ.get("HOOKSCOPE_CLI", os.path.join(ROOT, "build/cli/hookscope-cli"))
SCRIPT = os.path.join(HERE, "attach", "spike_script.py")
# What every scenario records: the optimizer's update too, where a learning-rate spike shows first.
KINDS = "activation,gradient,param_grad,update"

# kind and layer: the series a hit names first (for the parameter kinds, a parameter of that layer).
Scenario = namedtuple("Scenario", "name fault model kind layer")

SCENARIOS = [
    Scenario("a bad sample (x1000), no BatchNorm", "batch", "cnn", "activation", "conv1"),
    Scenario("a bad sample (x1000), BatchNorm", "batch", "cnn-bn", "activation", "conv1"),
    Scenario("NaN in one sample", "nan", "cnn", "activation", "conv1"),
    Scenario("one layer's weights x30", "weights", "transformer", "activation", "blocks.2.mlp.fc1"),
    Scenario("one layer's weights x40 under a LayerNorm", "absorbed", "mlp", "activation", "blocks.3.fc1"),
    Scenario("a learning-rate spike (x100, one step)", "lr", "cnn", "update", "conv1"),
    Scenario("a gradient blow-up in one layer", "grad", "cnn", "param_grad", "fc"),
    Scenario("a layer killed (bias -100, its ReLU dead)", "dead", "cnn", "activation", "conv2"),
    Scenario("attention logits x64 in one head of 4", "attention", "transformer-4h", "activation", "blocks.1.attn.qkv"),
    Scenario("an embedding row x100", "embedding", "transformer", "activation", "embed"),
]
CLEAN = ["transformer", "transformer-4h", "cnn", "cnn-bn", "mlp"]

_NAMED = re.compile(r"^(?:first to move: |  )step (\d+), (\w+) '([^']*)'")


def record(folder, fault, at, steps, *options, model=None, seed=0, kinds="activation,gradient,param_grad",
           script_exit=0, recorder_exit=0, name=None):
    """spike_script.py run with `fault` at step `at`, attached to `hookscope-cli record` (every
    module hooked for `kinds`); (the export's path, what the script printed, what the recorder
    said on stderr)."""
    out = os.path.join(folder, name or fault)
    socket = os.path.join(folder, (name or fault) + ".sock")
    recorder = subprocess.Popen([CLI, "record", "--out", out, "--address", "unix:" + socket, "--timeout", "120",
                                 "--kinds", kinds, *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = recorder.stdout.readline().strip()
        assert line.startswith("HOOKSCOPE_ADDRESS="), line + recorder.stderr.read()
        env = dict(os.environ, HOOKSCOPE_ADDRESS=line.split("=", 1)[1])
        command = [sys.executable, SCRIPT, "--fault", fault, "--at", str(at), "--steps", str(steps), "--seed", str(seed)]
        if model:
            command += ["--model", model]
        script = subprocess.run(command, env=env, capture_output=True, text=True, timeout=LONG_DEADLINE)
        assert script.returncode == script_exit, script.stdout + script.stderr
        _, err = recorder.communicate(timeout=DEADLINE)
        assert recorder.returncode == recorder_exit, err
    finally:
        if recorder.poll() is None:
            recorder.kill()
            recorder.communicate()
    return out, script.stdout, err


def explain(run):
    result = subprocess.run([CLI, "explain", run], capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def named_first(lines):
    """(step, kind, module) that explain's lines name first (the first to move, or the first
    layer that left its band with no loss spike), or None where they name none."""
    for line in lines:
        match = _NAMED.match(line)
        if match:
            return int(match.group(1)), match.group(2), match.group(3)
    return None


def hit(named, scenario, at):
    """Whether `named` (named_first's) is the scenario's layer at step `at`."""
    if named is None:
        return False
    step, kind, module = named
    layer = module.rsplit(".", 1)[0] if kind in ("param", "param_grad", "update") else module
    return (step, kind, layer) == (at, scenario.kind, scenario.layer)


def run_scenario(folder, scenario, at, steps, seed=0):
    """(what explain names first, explain's lines, the export's path) of one faulty run (see hit)."""
    run, _, _ = record(folder, scenario.fault, at, steps, model=scenario.model, seed=seed, kinds=KINDS,
                       name="%s-%s-%d-%d" % (scenario.fault, scenario.model, at, seed))
    lines = explain(run)
    return named_first(lines), lines, run


def run_clean(folder, model, steps, seed=0):
    """(what explain names first, None where nothing, explain's lines, the export's path) of a
    clean twin."""
    run, _, _ = record(folder, "none", steps // 2, steps, model=model, seed=seed, kinds=KINDS,
                       name="none-%s-%d" % (model, seed))
    lines = explain(run)
    return named_first(lines), lines, run


def ticked_later(run, start):
    """`run` (hookscope.load_run's) as if each series had been ticked at step `start(i)`, i its
    place among run.all_series(): its earlier steps left out, the loss kept whole (a script logs
    it whatever is ticked). Changes `run` in place and returns it."""
    for i, series in enumerate(run.all_series()):
        kept = [j for j, step in enumerate(series.steps) if step >= start(i)]
        series.steps = [series.steps[j] for j in kept]
        series.stats = [series.stats[j] for j in kept]
    return run


def tick_answers(path, warmup):
    """What hookscope.bands names first in the export at `path` when the ticks took effect at
    each step from 0 to `warmup` (every series at that step), and at steps one apart (series i
    at step i mod (warmup + 1)): {how: (step, kind, module) or None}."""
    import hookscope
    from hookscope import bands

    def first(run):
        return named_first(bands.describe(bands.first_movers(run)))
    answers = {"at step %d" % k: first(ticked_later(hookscope.load_run(path), lambda i, k=k: k))
               for k in range(warmup + 1)}
    answers["one step apart"] = first(ticked_later(hookscope.load_run(path), lambda i: i % (warmup + 1)))
    return answers
