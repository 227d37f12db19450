"""The first-mover scenario suite (issue 57), each scenario once: ten kinds of fault put in small
CPU models at a known step, attached to `hookscope-cli record` and explained, must be named
first at their layer and step; the untouched models must name nothing; hookscope.bands must say
the same, word for word, and give the same answer whichever step of the band's warm-up the ticks
took effect at. tests/bench/first_mover_suite.py runs it over several seeds for the figures."""

import os
import sys

import pytest

import first_mover_suite as suite

sys.path.insert(0, os.path.join(suite.ROOT, "python"))
import hookscope  # noqa: E402
from hookscope import bands  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(suite.CLI), reason="hookscope-cli is not built")

AT, STEPS = 36, 48  # a band of 30 values by the fault: a finding even where the loss does not follow


@pytest.mark.parametrize("scenario", suite.SCENARIOS, ids=[s.fault + "-" + s.model for s in suite.SCENARIOS])
def test_the_fault_is_named_first_at_its_layer_and_step(folder, scenario):
    named, lines, run = suite.run_scenario(folder, scenario, AT, STEPS)
    assert suite.hit(named, scenario, AT), lines
    assert bands.describe(bands.first_movers(hookscope.load_run(run))) == lines
    answers = suite.tick_answers(run, bands.WARMUP)
    assert set(answers.values()) == {named}, answers


@pytest.mark.parametrize("model", suite.CLEAN)
def test_the_clean_twin_names_nothing(folder, model):
    named, lines, run = suite.run_clean(folder, model, STEPS)
    assert named is None, lines
    assert lines[0].startswith("the loss never left its band ("), lines
    assert bands.describe(bands.first_movers(hookscope.load_run(run))) == lines
    answers = suite.tick_answers(run, bands.WARMUP)
    assert set(answers.values()) == {None}, answers
