"""Each series against its own history: a normal band per series and statistic, a deviation
score per step, and the first series to leave its band before a step (issue 49's first mover),
over a run read by ``hookscope.load_run``. Standard library only.

The band of a statistic at step t is the median and the median absolute deviation (MAD, scaled
by 1.4826 to a normal distribution's sigma) of its last ``window`` values before t, of log10|v|
for the magnitudes (L2 norm, std, amax) and of v itself for the zero fraction. A step's score
is how many such sigmas its value lies from the median; a series needs ``warmup`` earlier
values before it has a band (its earlier steps score None). The MAD is floored at
``FLOOR[statistic]`` so that a series that never moved does not call a rounding change a spike.
"""

import bisect
import collections
import math

WINDOW = 200       # the last steps a band is made of
WARMUP = 8         # values a band needs before it scores a step
SIGMA = 6.0        # how far out counts as having left the band
# The smallest spread a band assumes: a tenth of a decade's 1/40 (about 6% in value) for the
# magnitudes, 0.01 for the zero fraction.
FLOOR = {"l2norm": 0.025, "std": 0.025, "amax": 0.025, "zero_frac": 0.01, "loss": 0.025}
STATISTICS = ("l2norm", "std", "amax", "zero_frac")
# CaptureKind's order in HookScope's C++ (core/common/CaptureKind.h): ties within a place.
KINDS = ("activation", "input", "gradient", "param", "param_grad", "update")


def _measure(statistic, value):
    """The number a band is made of, or None for a value that has none (not finite, or a zero
    magnitude, whose log has no place on the band's scale)."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    if statistic == "zero_frac":
        return float(value)
    return math.log10(abs(value)) if value != 0 else None


def _median(sorted_values):
    n = len(sorted_values)
    middle = n // 2
    return sorted_values[middle] if n % 2 else 0.5 * (sorted_values[middle - 1] + sorted_values[middle])


def _mad(ordered, median):
    """The median of |v - median| over `ordered` (ascending) without sorting the deviations: those
    of the values below the middle grow leftwards, those from the middle on rightwards, so they
    are two sorted runs and their k-th smallest is a binary search (as HookScope's C++ band)."""
    n = len(ordered)
    left = n // 2
    right = n - left

    def low(i):
        return abs(ordered[left - 1 - i] - median)

    def high(j):
        return abs(ordered[left + j] - median)

    def kth(k):  # the k-th smallest deviation (from 0) and the one after it
        lo, hi = max(k + 1 - right, 0), min(k + 1, left)
        while True:
            i = lo + (hi - lo) // 2
            j = k + 1 - i
            if i < hi and j > 0 and high(j - 1) > low(i):
                lo = i + 1
            elif i > lo and j < right and low(i - 1) > high(j):
                hi = i - 1
            else:
                best = max(low(i - 1) if i > 0 else -1.0, high(j - 1) if j > 0 else -1.0)
                after = min(low(i) if i < left else math.inf, high(j) if j < right else math.inf)
                return best, after

    if n % 2:
        return kth(n // 2)[0]
    lower, upper = kth(n // 2 - 1)
    return 0.5 * (lower + upper)


def scores(points, statistic, window=WINDOW, warmup=WARMUP):
    """[(step, score or None, value)] of [(step, value)] in step order: each step against the
    band of the `window` values before it. The band is kept sorted as values come and go (a
    binary search each), not sorted again each step: a window of 100,000 costs what one of 200 does."""
    if not (isinstance(window, int) and not isinstance(window, bool) and window >= 1):
        raise ValueError("window must be a whole number of steps, 1 or more (got %r)" % (window,))
    out = []
    ordered, recent = [], collections.deque()
    seen = 0
    warmup = max(warmup, 1)  # a band of no values has no median
    floor = FLOOR.get(statistic, 0.025)
    for step, value in points:
        x = _measure(statistic, value)
        score = None
        if x is not None and seen >= warmup:
            median = _median(ordered)
            score = (x - median) / max(_mad(ordered, median) * 1.4826, floor)
        elif value is not None and isinstance(value, float) and not math.isfinite(value) and seen >= warmup:
            score = math.inf  # NaN or Inf where the band had numbers: as far out as it gets
        out.append((step, score, value))
        if x is not None:
            seen += 1
            recent.append(x)
            bisect.insort(ordered, x)
            if len(recent) > window:
                del ordered[bisect.bisect_left(ordered, recent.popleft())]
    return out


def excursion_start(scored, step, sigma):
    """The first step of the run of out-of-band steps that holds `step` (None when `step` is in
    its band): how far back the excursion began."""
    by_step = {s: z for s, z, _ in scored}
    z = by_step.get(step)
    if z is None or abs(z) < sigma:
        return None
    steps = [s for s, _, _ in scored if s <= step]
    start = step
    for s in reversed(steps[:-1]):
        z = by_step[s]
        if z is None or abs(z) < sigma:
            break
        start = s
    return start


def _owner(series):
    """The module a series belongs to: a parameter's module for the parameter kinds."""
    if series.kind in ("param", "param_grad", "update"):
        return series.module.rsplit(".", 1)[0] if "." in series.module else ""
    return series.module


def _is_ancestor(ancestor, path):
    return bool(path) if not ancestor else path.startswith(ancestor + ".")


def call_times(order):
    """({module: when its call begins}, {module: when it returns}), walking the modules in the
    model's order (a parent before its children; a parent returns after its last child)."""
    begins, returns, open_, clock = {}, {}, [], 0
    for path in order:
        if path in begins:
            continue
        while open_ and not _is_ancestor(open_[-1], path):
            returns[open_.pop()] = clock
            clock += 1
        begins[path] = clock
        clock += 1
        open_.append(path)
    while open_:
        returns[open_.pop()] = clock
        clock += 1
    return begins, returns


def in_step_order(series_list, modules):
    """The series in the order a step makes them (as compare-runs orders them: inputs as a
    call begins, outputs as it returns, then gradients backward, then the parameter kinds),
    modules the tree does not list after it by name (core/store/RunCompare.cpp inStepOrder)."""
    order = list(modules)
    listed = set(order)
    order += sorted({_owner(s) for s in series_list} - listed)
    begins, returns = call_times(order)

    def place(s):
        owner = _owner(s)
        if s.kind == "input":
            phase, time = 0, begins[owner]
        elif s.kind == "activation":
            phase, time = 0, returns[owner]
        elif s.kind == "gradient":
            phase, time = 1, -returns[owner]
        else:
            phase, time = 2, begins[owner]
        return (phase, time, s.call, KINDS.index(s.kind) if s.kind in KINDS else len(KINDS), s.index, s.rank)
    return sorted(series_list, key=place)


def loss_spike(run, name="loss", rank=0, window=WINDOW, warmup=WARMUP):
    """(step, score, value) of the loss's largest excursion above its band, or None when the run
    has too few steps of it for a band."""
    points = (run.scalars.get(name) if rank == 0 else run.rank_scalars.get((name, rank))) or []
    scored = [p for p in scores(points, "loss", window, warmup) if p[1] is not None]
    if not scored:
        return None
    return max(scored, key=lambda p: p[1])


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_settings(sigma, window, warmup):
    """What `hookscope-cli explain` refuses, refused alike: sigma 0, negative or NaN named series
    4.9 sigma out (or silently meant 6)."""
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError("sigma must be a positive number of deviations, such as 6 (got %r)" % (sigma,))
    if not _whole(window) or window < 2:
        raise ValueError("window must be 2 steps or more (got %r)" % (window,))
    if not _whole(warmup) or warmup < 0:
        raise ValueError("warmup must be a whole number of values, 0 or more (got %r)" % (warmup,))


def first_movers(run, step=None, sigma=SIGMA, window=WINDOW, warmup=WARMUP, statistics=STATISTICS):
    """The series out of their band at `step` (by default the loss's largest excursion), ranked
    by the step their excursion began, then by the order the step made them. Returns a dict:
    step, why (how the step was chosen, or why none is named), loss (step, score, value) or
    None, movers: [{series, start, statistic, value, score}], furthest: the series furthest from
    their band at the step when none left it."""
    _check_settings(sigma, window, warmup)
    if step is not None and (not _whole(step) or step not in set(run.steps)):
        raise ValueError("step %r holds no captures in %s" % (step, getattr(run, "path", "the run")))
    result = {"step": step, "why": "", "loss": None, "movers": [], "furthest": [], "sigma": sigma}
    loss_points = run.scalars.get("loss") or []
    if step is None:
        spike = loss_spike(run, window=window, warmup=warmup)
        result["loss"] = spike
        if spike is None:
            result["why"] = ("the loss has %d steps; a band needs %d before the step it judges"
                             % (len(loss_points), warmup + 1))
            return result
        step = result["step"] = spike[0]
        if spike[1] < sigma:
            result["why"] = ("the loss never left its band (its largest rise: step %d, %+.1f sigma against its last "
                             "%d steps; %.1f needed)" % (spike[0], spike[1], window, sigma))
    found, near = [], []
    ordered = in_step_order(run.all_series(), [m.get("path", "") for m in run.modules])
    for series in ordered:
        if step not in series.steps:
            continue
        best, best_rank = None, None
        for statistic in statistics:
            points = [(s, row.get(statistic)) for s, row in zip(series.steps, series.stats)]
            if all(v is None for _, v in points):
                continue
            scored = scores(points, statistic, window, warmup)
            z = dict((s, z) for s, z, _ in scored).get(step)
            if z is None:
                continue
            value = dict(points)[step]
            start = excursion_start(scored, step, sigma)
            # A statistic out of its band beats one inside; then the earlier start; then the
            # further out (the first such in STATISTICS' order on a tie).
            rank = (0, start, -abs(z)) if start is not None else (1, 0, -abs(z))
            if best is None or rank < best_rank:
                best, best_rank = {"series": series, "start": start, "statistic": statistic, "value": value,
                                   "score": z}, rank
        if best is None:
            continue
        (found if best["start"] is not None else near).append(best)
    found.sort(key=lambda e: e["start"])  # stable: within a start, the order the step made them
    result["movers"] = found
    if not found:
        result["furthest"] = sorted(near, key=lambda e: -abs(e["score"]))[:5]  # stable, as above
        if not result["why"]:
            result["why"] = "no series was %.1f sigma or more from its band at step %d" % (sigma, step)
    return result


def _name(series):
    """A series as describe names it: its kind and module, and its rank in a job."""
    where = " (whole tensor)" if series.rank == -1 else " (rank %d)" % series.rank if series.rank else ""
    return "%s '%s'%s" % (series.kind, series.module or "(root)", where)


def describe(result, limit=5):
    """The result of first_movers as lines a person reads."""
    lines = []
    if result["why"]:
        lines.append(result["why"])
    movers = result["movers"]
    for i, e in enumerate(movers[:limit]):
        s = e["series"]
        tie = i > 0 and e["start"] == movers[i - 1]["start"]
        lines.append("%s: step %d, %s (%s %.4g, %.1f sigma %s its band)%s" % (
            "first to move" if i == 0 else "then", e["start"], _name(s), e["statistic"],
            e["value"], abs(e["score"]), "above" if e["score"] > 0 else "below",
            " (the same step as the one before)" if tie else ""))
    for e in result["furthest"]:
        s = e["series"]
        lines.append("furthest from its band: %s (%s, %.1f sigma)" % (_name(s), e["statistic"], abs(e["score"])))
    return lines
