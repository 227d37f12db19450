"""The first-mover scenario suite's figures (issue 57): each fault kind of
tests/python/first_mover_suite.py recorded at several seeds (another initialisation and other
data each) attached to `hookscope-cli record` and explained, and each model untouched as its
clean twin. Prints, per fault kind, how often `explain` named the fault's layer first at the
fault's step (recall), what the clean twins named (false alarms), and whether the answer stayed
the same with the ticks taking effect at any step of the band's warm-up. Asserts nothing.

    python tests/bench/first_mover_suite.py [HOOKSCOPE_CLI] [SEEDS] [STEPS] [AT]

SEEDS (default 3) runs of each of the 10 fault kinds and of the 5 clean twins; the runs have
STEPS (default 48) recorded steps, the fault at step AT (default 36; a band of 30 values makes a
finding without a loss spike). Two runs at a time (about 10 s each on an idle 2-core machine).
"""
import os
import sys
import tempfile
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
if len(sys.argv) > 1:
    os.environ["HOOKSCOPE_CLI"] = os.path.abspath(sys.argv[1])
import first_mover_suite as suite  # noqa: E402
from hookscope import bands  # noqa: E402


def main():
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 48
    at = int(sys.argv[4]) if len(sys.argv) > 4 else 36
    folder = tempfile.mkdtemp(prefix="hs-")
    began = time.monotonic()
    try:
        def faulty(job):
            scenario, seed = job
            named, lines, path = suite.run_scenario(folder, scenario, at, steps, seed)
            ticks = suite.tick_answers(path, bands.WARMUP)
            shutil.rmtree(path, ignore_errors=True)
            return scenario, seed, named, lines, ticks

        def clean(job):
            model, seed = job
            named, lines, path = suite.run_clean(folder, model, steps, seed)
            ticks = suite.tick_answers(path, bands.WARMUP)
            shutil.rmtree(path, ignore_errors=True)
            return model, seed, named, lines, ticks

        with ThreadPoolExecutor(2) as pool:
            runs = list(pool.map(faulty, [(s, seed) for s in suite.SCENARIOS for seed in range(seeds)]))
            twins = list(pool.map(clean, [(m, seed) for m in suite.CLEAN for seed in range(seeds)]))
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    print("first-mover suite: %d fault kinds x %d seeds, fault at step %d of %d, %d clean twins x %d seeds (%.0f s)"
          % (len(suite.SCENARIOS), seeds, at, steps, len(suite.CLEAN), seeds, time.monotonic() - began))
    print("| fault | layer it must name | named first at step %d | same with later ticks |" % at)
    print("|---|---|---|---|")
    hits = steady = 0
    for scenario in suite.SCENARIOS:
        mine = [r for r in runs if r[0] is scenario]
        found = sum(suite.hit(r[2], scenario, at) for r in mine)
        same = sum(len(set(r[4].values())) == 1 and r[4]["at step 0"] == r[2] for r in mine)
        hits += found
        steady += same
        print("| %s | %s of '%s' | %d of %d | %d of %d |" % (scenario.name, scenario.kind, scenario.layer, found,
                                                           len(mine), same, len(mine)))
        for _, seed, named, lines, ticks in mine:
            if not suite.hit(named, scenario, at):
                print("    seed %d named %s: %s" % (seed, named, " / ".join(lines[:3])))
            if len(set(ticks.values())) != 1:
                print("    seed %d, ticks later: %s" % (seed, ticks))
    alarms = [t for t in twins if t[2] is not None]
    steady_clean = sum(len(set(t[4].values())) == 1 for t in twins)
    for model, seed, named, lines, ticks in alarms:
        print("    clean %s seed %d named %s: %s" % (model, seed, named, " / ".join(lines[:3])))
    print("recall: %d of %d faulty runs (%.0f%%) named the fault's layer first at its step; the same answer with "
          "the ticks taking effect at any step 0-%d: %d of %d" % (hits, len(runs), 100.0 * hits / len(runs),
                                                                    bands.WARMUP, steady, len(runs)))
    print("false alarms: %d of %d clean runs named a layer (%d named nothing whenever the ticks took effect)"
          % (len(alarms), len(twins), steady_clean))


if __name__ == "__main__":
    main()
