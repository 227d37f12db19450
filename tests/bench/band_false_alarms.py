"""How often a band says "out" on a run that is fine, and how many series it finds out at a fault's
step: the median/MAD band HookScope keeps (hookscope.bands) against two exponential ones (mean
and mean deviation of the same log values, no window: the cheaper design core-bench bands times;
and the same with each step's pull on the band clipped at 3 of its sigmas, a robust variant).

    python tests/bench/band_false_alarms.py CLEAN_EXPORT [FAULTY_EXPORT FAULT_STEP [SECOND_STEP]]

Judges every series' statistic at every step once 30 values came before it (the anomaly rule's
band age), at 4, 6, 8 and 12 sigma. With SECOND_STEP (a second fault a few steps after the
first: spike_script.py --fault batch --again), also how many series each design finds out at
it, and the first layer's amax score at both: a band that the first spike widened finds less.
Prints figures; asserts nothing.
"""
import csv
import math
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from hookscope import bands  # noqa: E402

AGE = 30


def exponential_scores(points, statistic, window=bands.WINDOW, warmup=bands.WARMUP, clip=None):
    """[(step, score or None)] as bands.scores gives them, from an exponential mean and mean
    absolute deviation (x 1.2533, a normal distribution's sigma) of the last ~window values.
    With `clip`, once warm a step moves the band by at most `clip` of its sigmas: one spike
    barely widens it."""
    mean = spread = 0.0
    seen = 0
    out = []
    floor = bands.FLOOR.get(statistic, 0.025)
    for step, value in points:
        x = bands._measure(statistic, value)
        sigma = max(spread * 1.2533, floor)
        warm = seen >= max(warmup, 1)
        score = None
        if x is not None and warm:
            score = (x - mean) / sigma
        elif x is None and isinstance(value, float) and not math.isfinite(value) and warm:
            score = math.inf
        out.append((step, score))
        if x is None:
            continue
        seen += 1
        a = 1.0 / min(seen, window)
        if clip is None:
            mean += a * (x - mean)
            spread += a * (abs(x - mean) - spread)
        else:
            r = max(-clip * sigma, min(clip * sigma, x - mean)) if warm else x - mean
            mean += a * r
            spread += a * (abs(r) - spread)
    return out


DESIGNS = {
    "median/MAD": lambda points, statistic: [(s[0], s[1]) for s in bands.scores(points, statistic)],
    "exponential": exponential_scores,
    "clipped": lambda points, statistic: exponential_scores(points, statistic, clip=3.0),
}


def series_of(folder):
    series = defaultdict(list)
    with open(os.path.join(folder, "stats.csv"), newline="") as f:
        for row in csv.DictReader(f):
            series[(row["module"], row["kind"], row["call"], row["index"], row["rank"])].append(row)
    return series


def judge(folder, design, sigma, at=()):
    """(judgements out, judgements, {step in `at`: series out there}, {step in `at`: the largest
    score of a first layer's amax there})."""
    out = judged = 0
    out_at = {step: set() for step in at}
    first = {}
    for key, rows in series_of(folder).items():
        rows.sort(key=lambda r: int(r["step"]))
        for statistic in bands.STATISTICS:
            points = [(int(r["step"]), float(r[statistic]) if r.get(statistic) not in (None, "") else None)
                      for r in rows]
            for i, (step, score) in enumerate(DESIGNS[design](points, statistic)):
                if score is None or i < AGE:
                    continue
                judged += 1
                if abs(score) >= sigma:
                    out += 1
                    if step in out_at:
                        out_at[step].add(key)
                if step in out_at and key[1] == "activation" and statistic == "amax":
                    first.setdefault(step, {})[key[0]] = score
    return out, judged, {s: len(k) for s, k in out_at.items()}, first


def main():
    if len(sys.argv) not in (2, 4, 5):
        sys.exit(__doc__)
    clean = sys.argv[1]
    faulty = sys.argv[2] if len(sys.argv) >= 4 else None
    at = tuple(int(a) for a in sys.argv[3:])
    for sigma in (4, 6, 8, 12):
        for design in DESIGNS:
            out, judged, _, _ = judge(clean, design, sigma)
            line = "sigma %2d  %-11s  clean run: %5d of %d judgements out" % (sigma, design, out, judged)
            if faulty:
                out_faulty, _, out_at, first = judge(faulty, design, sigma, at)
                line += "; faulty run: %d out, series out at " % out_faulty
                line += ", ".join("step %d: %d" % (s, out_at[s]) for s in at)
                if len(at) == 2 and sigma == 4:
                    name = max(first[at[0]], key=lambda m: abs(first[at[0]][m] or 0))
                    line += " (%s's amax: %.1f then %.1f sigma)" % (name, first[at[0]][name], first[at[1]][name])
            print(line)


if __name__ == "__main__":
    main()
