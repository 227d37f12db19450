"""How often a band says "out" on a run that is fine, and how many series it finds out at a fault's
step: the median/MAD band HookScope keeps (hookscope.bands) against an exponential one (mean and
mean deviation of the same log values, no window: the cheaper design core-bench bands times).

    python tests/bench/band_false_alarms.py CLEAN_EXPORT [FAULTY_EXPORT FAULT_STEP]

Judges every series' statistic at every step once 30 values came before it (the anomaly rule's
band age), at 4, 6, 8 and 12 sigma. Prints figures; asserts nothing.
"""
import csv
import math
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from hookscope import bands  # noqa: E402

AGE = 30


def exponential_scores(points, statistic, window=bands.WINDOW, warmup=bands.WARMUP):
    """[(step, score or None)] as bands.scores gives them, from an exponential mean and mean
    absolute deviation (x 1.2533, a normal distribution's sigma) of the last ~window values."""
    mean = spread = 0.0
    seen = 0
    out = []
    floor = bands.FLOOR.get(statistic, 0.025)
    for step, value in points:
        x = bands._measure(statistic, value)
        score = None
        if x is not None and seen >= max(warmup, 1):
            score = (x - mean) / max(spread * 1.2533, floor)
        elif x is None and isinstance(value, float) and not math.isfinite(value) and seen >= max(warmup, 1):
            score = math.inf
        out.append((step, score))
        if x is not None:
            seen += 1
            a = 1.0 / min(seen, window)
            mean += a * (x - mean)
            spread += a * (abs(x - mean) - spread)
    return out


def series_of(folder):
    series = defaultdict(list)
    with open(os.path.join(folder, "stats.csv"), newline="") as f:
        for row in csv.DictReader(f):
            series[(row["module"], row["kind"], row["call"], row["index"], row["rank"])].append(row)
    return series


def judge(folder, design, sigma, at=None):
    out = judged = 0
    out_at = set()
    for key, rows in series_of(folder).items():
        rows.sort(key=lambda r: int(r["step"]))
        for statistic in bands.STATISTICS:
            points = [(int(r["step"]), float(r[statistic]) if r.get(statistic) not in (None, "") else None)
                      for r in rows]
            if design == "median/MAD":
                scored = [(s[0], s[1]) for s in bands.scores(points, statistic)]
            else:
                scored = exponential_scores(points, statistic)
            for i, (step, score) in enumerate(scored):
                if score is None or i < AGE:
                    continue
                judged += 1
                if abs(score) >= sigma:
                    out += 1
                    if step == at:
                        out_at.add(key)
    return out, judged, len(out_at)


def main():
    if len(sys.argv) not in (2, 4):
        sys.exit(__doc__)
    clean = sys.argv[1]
    faulty, at = (sys.argv[2], int(sys.argv[3])) if len(sys.argv) == 4 else (None, None)
    for sigma in (4, 6, 8, 12):
        for design in ("median/MAD", "exponential"):
            out, judged, _ = judge(clean, design, sigma)
            line = "sigma %2d  %-11s  clean run: %5d of %d judgements out" % (sigma, design, out, judged)
            if faulty:
                out_faulty, _, out_at = judge(faulty, design, sigma, at)
                line += "; faulty run: %d out, %d series out at step %d" % (out_faulty, out_at, at)
            print(line)


if __name__ == "__main__":
    main()
