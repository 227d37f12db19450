"""Where a real spike started (issue 49): training scripts attached to `hookscope-cli record`
with a fault put in at a known step (attach/spike_script.py), and `explain` on what was recorded
must name the module the fault was put in, at that step, first — and the package's
hookscope.bands the same. Run by ctest with the venv's PyTorch 2.x and with Debian's 1.13."""

import os
import re
import subprocess
import sys

import pytest

import first_mover_suite as suite
from deadlines import DEADLINE

sys.path.insert(0, os.path.join(suite.ROOT, "python"))
import hookscope  # noqa: E402
from hookscope import bands  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(suite.CLI), reason="hookscope-cli is not built")
explain = suite.explain


def record(folder, fault, at, steps, *options, **expected):
    """The script run with `fault` at step `at`, recorded with every module's activations and
    gradients and the parameters' gradients; the export's path (what the script printed and what
    the recorder said: record.script_output, record.recorder_said)."""
    out, record.script_output, record.recorder_said = suite.record(folder, fault, at, steps, *options, **expected)
    return out


def package_says(run):
    return bands.describe(bands.first_movers(hookscope.load_run(run)))


def test_scaled_weights_in_one_block_are_named_at_their_step(folder):
    run = record(folder, "weights", at=30, steps=60)
    lines = explain(run)
    assert lines[0].startswith("first to move: step 30, activation 'blocks.2.mlp.fc1' "), lines
    # The recorder said so as it wrote the export.
    assert "the loss left its band at step 30; " + lines[0] in record.recorder_said, record.recorder_said
    # Nothing before the block it was put in moved: the blocks before it come later in the list.
    assert not any("'blocks.0." in line or "'blocks.1." in line for line in lines[:3]), lines
    assert package_says(run) == lines


def test_the_report_says_where_the_spike_started_and_draws_every_layer(folder):
    run = record(folder, "weights", at=30, steps=60)
    out = os.path.join(folder, "report.html")
    result = subprocess.run([suite.CLI, "report", run, "--out", out], capture_output=True, text=True, timeout=DEADLINE,
                            env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))
    assert result.returncode == 0, result.stderr
    with open(out) as f:
        html = f.read()
    section = html[html.index("<h2>Where the loss spiked</h2>"):]
    # At which step the loss spiked, then where it started.
    assert re.match(r"<h2>Where the loss spiked</h2>\n<p>The loss left its band at step 3[0-2] \([0-9.]+ sigma above "
                    r"it\); the layers whose excursion began from step 2[2-4] on:</p>\n<p class=\"warn\">first to move: "
                    r"step 30, activation 'blocks.2.mlp.fc1' ", section), section[:400]
    assert '<h3>every layer against its band</h3>\n<img alt="deviation"' in section
    # Its row outlined, and its histograms over steps first (past the first 16 layers in the
    # model's order, they were left out).
    assert "Outlined: blocks.2.mlp.fc1, where it started" in section, section[:2000]
    heatmaps = html[html.index("<h2>Histograms over steps</h2>"):]
    assert heatmaps.startswith("<h2>Histograms over steps</h2>\n<h3>blocks.2.mlp.fc1 "), heatmaps[:200]


def test_the_same_script_untouched_names_no_first_mover(folder):
    # With the anomaly rule on at its default: no series of the untouched run leaves its band.
    run = record(folder, "none", 30, 60, "--threshold", "anomaly=8")
    lines = explain(run)
    assert lines[0].startswith("the loss never left its band"), lines
    assert not any(line.startswith(("first to move", "then:", "but ")) for line in lines), lines
    assert "left its band" not in record.recorder_said
    assert package_says(run) == lines
    with open(os.path.join(run, "alerts.csv")) as f:
        assert ",anomaly," not in f.read()


def test_a_layer_out_of_its_band_that_the_loss_does_not_follow_is_said(folder):
    # Issue 57: blocks.3.fc1's output x40 at step 50, taken away by the LayerNorm after it. explain
    # said "the loss never left its band" and five series at a few sigmas, as if nothing moved.
    run = record(folder, "absorbed", at=50, steps=70)
    lines = explain(run)
    assert lines[0].startswith("the loss never left its band ("), lines
    assert lines[1].startswith("but ") and lines[1].endswith("and the loss did not follow:"), lines
    assert lines[2].startswith("  step 50, activation 'blocks.3.fc1' ("), lines
    assert "the loss never left its band, but " in record.recorder_said, record.recorder_said
    assert package_says(run) == lines


def test_a_bad_batch_is_named_at_the_first_layer_that_reads_it(folder):
    run = record(folder, "batch", at=25, steps=40)
    lines = explain(run)
    assert lines[0].startswith("first to move: step 25, activation 'conv1' "), lines
    assert package_says(run) == lines


def test_a_spike_that_starts_in_a_gradient_names_the_gradient(folder):
    run = record(folder, "grad", at=20, steps=40)
    lines = explain(run)
    assert lines[0].startswith("first to move: step 20, param_grad 'fc.weight' "), lines
    # No activation moved at the step: the forward pass was the same until the update.
    assert not any("activation" in line for line in lines), lines
    assert package_says(run) == lines


def test_breaking_on_anomaly_stops_the_script_at_the_step(folder):
    run = record(folder, "weights", 30, 60, "--break", "anomaly", script_exit=7, recorder_exit=6)
    assert "stopped at step 30: " in record.script_output, record.script_output
    assert "anomaly" in record.script_output and "blocks.2.mlp.fc1" in record.script_output, record.script_output
    # What it recorded up to the step explains it the same way.
    assert explain(run)[0].startswith("first to move: step 30, activation 'blocks.2.mlp.fc1' ")
