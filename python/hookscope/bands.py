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
MAX_WINDOW = 10000  # the most it may be (kMaxBandWindow): a step's score moves up to half the band's values
WARMUP = 8         # values a band needs before it scores a step
SIGMA = 6.0        # how far out counts as having left the band
LOOKBACK = 8       # steps before the loss left its band (or the step judged) where a cause may begin
# Without a loss spike, an excursion is a finding from FINDING_BAND steps into the run (its band
# holding that many values less the warm-up: a series ticked at any step of the warm-up is
# judged alike) where it went FINDING_FACTOR times sigma out: a narrow young band, or a few
# sigmas among hundreds of series, is what an untouched run shows too.
FINDING_BAND = 30
FINDING_FACTOR = 2
# The smallest spread a band assumes: a tenth of a decade's 1/40 (about 6% in value) for the
# magnitudes, 0.01 for the zero fraction.
FLOOR = {"l2norm": 0.025, "std": 0.025, "amax": 0.025, "zero_frac": 0.01, "loss": 0.025}
STATISTICS = ("l2norm", "std", "amax", "zero_frac")
FLOAT32_NORMAL = 1.1754943508222875e-38  # float32's smallest normal number
# The fewest values a tensor's zero fraction needs for a band: in a smaller one, one more zero
# moves it by more than its floor (a bias's gradient of 8 values read 12.5 sigmas out as one of
# them rounded to 0).
ZERO_FRACTION_VALUES = 100
# CaptureKind's order in HookScope's C++ (core/common/CaptureKind.h): ties within a place.
KINDS = ("activation", "input", "gradient", "param", "param_grad", "update")
PARAMETER_KINDS = ("param", "param_grad", "update")


def _measure(statistic, value):
    """The number a band is made of, or None for a value that has none (not finite, or a zero
    magnitude, whose log has no place on the band's scale)."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    if statistic == "zero_frac":
        return float(value)
    # Below float32's smallest normal number, a few subnormal steps of rounding (each a
    # 0.3-decade jump): all that smallest number on the band (core/store/BandTracker.cpp).
    return math.log10(max(abs(value), FLOAT32_NORMAL)) if value != 0 else None


def band_value(row, statistic, kind="activation"):
    """The value of `statistic` a band is made of, from a stats.csv row (load_run's Series.stats)
    of a series of `kind`: the L2 norm of a tensor holding NaN is NaN (inf where it holds Inf and
    no NaN), as torch's norm of it is, so NaN appearing in a layer is that layer leaving its band;
    the zero fraction of a tensor under ZERO_FRACTION_VALUES values, or of a parameter (its
    values, gradient or update: a weight's gradient is zero by whole rows where a unit before it
    was silent for the batch; that unit's output is where a dead unit shows), has none (None); a
    tensor none of whose values reaches FLOAT32_NORMAL has the zero fraction 1 (its values not 0
    are a subnormal step or two of rounding, as where a deep model's gradient underflows; its
    magnitudes are FLOAT32_NORMAL on the band). As HookScope's C++ store
    (core/store/CaptureStore.cpp bandedValues)."""
    value = row.get(statistic)
    if statistic == "l2norm":
        if row.get("nan_count"):
            return math.nan
        if row.get("inf_count"):
            return math.inf
    elif statistic == "zero_frac":
        if (row.get("numel") or 0) < ZERO_FRACTION_VALUES or kind in PARAMETER_KINDS:
            return None
        if _underflowed(row):
            return 1.0
    return value


def _underflowed(row):
    """Whether no value of a stats row reaches float32's smallest normal number (False where its
    min or max is missing or not a number)."""
    return all(isinstance(v, (int, float)) and abs(v) < FLOAT32_NORMAL for v in (row.get("min"), row.get("max")))


def series_points(series, statistic, last=None):
    """[(step, band_value)] of a Series over its steps (up to `last`)."""
    return [(s, band_value(row, statistic, series.kind)) for s, row in zip(series.steps, series.stats)
            if last is None or s <= last]


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
    binary search each), not sorted again each step: a value costs a move of up to half the band."""
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
    if series.kind in PARAMETER_KINDS:
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
        return (phase, time, s.call, KINDS.index(s.kind) if s.kind in KINDS else len(KINDS), s.index, s.rank, s.module)
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
    if not _whole(window) or not 2 <= window <= MAX_WINDOW:
        raise ValueError("window must be 2 to %d steps, as hookscope-cli explain's --window (got %r)" % (MAX_WINDOW, window))
    if not _whole(warmup) or warmup < 0:
        raise ValueError("warmup must be a whole number of values, 0 or more (got %r)" % (warmup,))


def first_excursion(scored, low, high, sigma, ended=None):
    """The first excursion of `scored` ([(step, score or None, value)] in step order) that begins
    at a step in [low, high] and counts: one still out at `high` at `sigma`, one already back
    only where its furthest step went `ended` sigmas out (default: `sigma`). Returns (start,
    back, score, value), `score` and `value` those of its first step, `back` the first step at
    or before `high` inside its band again (an unscored step ends it too), None while it is
    still out; None when none counts (one that began before `low` and goes on is not one)."""
    ended = sigma if ended is None else ended
    found, peak, was_out = None, 0.0, False
    for step, z, value in scored:
        if step > high:
            break
        out = z is not None and abs(z) >= sigma
        if found is None and out and not was_out and step >= low:
            found, peak = (step, z, value), 0.0
        if found is not None:
            if out:
                peak = max(peak, abs(z))
            else:
                if peak >= ended:
                    return found[0], step, found[1], found[2]
                found = None
        was_out = out
    return None if found is None else (found[0], None, found[1], found[2])


def _band_sizes(points, statistic, window):
    """How many values the band of each of `points` held (scores' band: measured values before it)."""
    sizes, seen = [], 0
    for _, value in points:
        sizes.append(min(seen, window))
        seen += _measure(statistic, value) is not None
    return sizes


def finding_terms(first, window, warmup):
    """(the first step judged, the fewest values its band needs) for an excursion with no loss
    spike: FINDING_BAND steps into the run (from its loss's `first` step), less the warm-up in
    values, so that a series ticked at any step of the warm-up is judged from the same step."""
    full = min(FINDING_BAND, window)
    return first + full, max(full - warmup, 0)


def unfollowed(run, ordered, sigma, window, warmup, statistics, judged_from, needed):
    """The series that left their band with no loss spike to explain: in each, the first
    excursion FINDING_FACTOR x sigma or more out of its band from step `judged_from` on, with a
    band of `needed` values or more (finding_terms), begun at the first of the steps before it
    as far out of a younger band, as first_movers' movers (start, back, statistic, value and
    score at its start), the earliest start first, then the order the step made them."""
    found = []
    strong = FINDING_FACTOR * sigma
    for series in ordered:
        best, best_rank = None, None
        for statistic in statistics:
            points = series_points(series, statistic)
            if all(v is None for _, v in points):
                continue
            young = scores(points, statistic, window, warmup)
            scored = [(s, z if size >= needed and s >= judged_from else None, v)
                      for (s, z, v), size in zip(young, _band_sizes(points, statistic, window))]
            excursion = first_excursion(scored, -math.inf, math.inf, strong)
            if excursion is None:
                continue
            start, back, z, value = excursion
            # Begun where it began: back over the steps just before, as far out of their younger
            # band (a series ticked a few steps later has a younger band at the same step).
            i = [s for s, _, _ in young].index(start)
            while i > 0 and young[i - 1][1] is not None and abs(young[i - 1][1]) >= strong:
                i -= 1
            start, z, value = young[i]
            rank = (start, -abs(z))
            if best is None or rank < best_rank:
                best, best_rank = {"series": series, "start": start, "back": back, "statistic": statistic,
                                   "value": value, "score": z}, rank
        if best is not None:
            found.append(best)
    found.sort(key=lambda e: e["start"])
    return found


def first_movers(run, step=None, sigma=SIGMA, window=WINDOW, warmup=WARMUP, statistics=STATISTICS):
    """Where the loss's spike started: the series whose excursion out of their band began from
    LOOKBACK steps before the loss left its band (by default its largest excursion; or before
    `step`) up to that step, whether or not they are still out there, ranked by the step their
    excursion began, then by the order the step made them. When the loss never left its band
    (and no step is given), the series that left theirs all the same (see `unfollowed`).
    Returns a dict: step, why (how the step was chosen, or why none is named), loss (step,
    score, value) or None, since (the first step an excursion may begin at), movers and
    unfollowed: [{series, start, back, statistic, value, score}] with the value and score of the
    excursion's first step and `back` the step it was inside its band again (None: still out),
    furthest: the series furthest from their band, inside it, at the step when none is named."""
    _check_settings(sigma, window, warmup)
    if step is not None and (not _whole(step) or step not in set(run.steps)):
        raise ValueError("step %r holds no captures in %s" % (step, getattr(run, "path", "the run")))
    result = {"step": step, "why": "", "loss": None, "since": None, "movers": [], "furthest": [], "unfollowed": [],
              "judged_from": None, "band_needed": None, "sigma": sigma, "window": window}
    loss_points = run.scalars.get("loss") or []
    spiked = True
    since = None if step is None else step - LOOKBACK
    if step is None:
        spike = loss_spike(run, window=window, warmup=warmup)
        result["loss"] = spike
        if spike is None:
            result["why"] = ("the loss has %d steps; a band needs %d before the step it judges"
                             % (len(loss_points), warmup + 1))
            return result
        step = result["step"] = spike[0]
        left = excursion_start(scores(loss_points, "loss", window, warmup), step, sigma)
        since = (step if left is None else left) - LOOKBACK
        spiked = spike[1] >= sigma
        if not spiked:
            held = _band_sizes(loss_points, "loss", window)[[s for s, _ in loss_points].index(step)]
            rise = ("its largest rise: step %d, %+.1f sigma" % (step, spike[1]) if spike[1] > 0
                    else "no rise: at most %+.1f sigma, at step %d," % (spike[1], step))
            result["why"] = ("the loss never left its band (%s against a band of its last %d steps; %.1f needed)"
                             % (rise, held, sigma))
    result["since"] = since
    ordered = in_step_order(run.all_series(), [m.get("path", "") for m in run.modules])
    if not spiked:
        result["judged_from"], result["band_needed"] = finding_terms(loss_points[0][0], window, warmup)
        result["unfollowed"] = unfollowed(run, ordered, sigma, window, warmup, statistics, result["judged_from"],
                                          result["band_needed"])
    found, near = [], []
    for series in ordered:
        if not series.steps or series.steps[0] > step:
            continue
        best, best_rank, nearest = None, None, None
        for statistic in statistics:
            points = series_points(series, statistic, step)
            if all(v is None for _, v in points):
                continue
            scored = scores(points, statistic, window, warmup)
            # One back in its band by the step must have gone twice as far out: a young band's
            # few sigmas come and go in an untouched run.
            excursion = first_excursion(scored, since, step, sigma, FINDING_FACTOR * sigma) if spiked else None
            if excursion is not None:
                start, back, z, value = excursion
                # The earlier start; then the further out (the first such in STATISTICS' order on a tie).
                rank = (start, -abs(z))
                if best is None or rank < best_rank:
                    best, best_rank = {"series": series, "start": start, "back": back, "statistic": statistic,
                                       "value": value, "score": z}, rank
            last_step, z, value = scored[-1]
            if last_step == step and z is not None and (nearest is None or abs(z) > abs(nearest["score"])):
                nearest = {"series": series, "start": None, "back": None, "statistic": statistic, "value": value,
                           "score": z}
        if best is not None:
            found.append(best)
        elif nearest is not None and abs(nearest["score"]) < sigma:  # out since before `since`: neither
            near.append(nearest)
    found.sort(key=lambda e: e["start"])  # stable: within a start, the order the step made them
    result["movers"] = found
    if not found and not result["unfollowed"]:
        result["furthest"] = sorted(near, key=lambda e: -abs(e["score"]))[:5]  # stable, as above
        if not result["why"]:
            result["why"] = ("no series left its band (%.1f sigma or more) from step %d to step %d"
                             % (sigma, since, step))
    return result


def _name(series):
    """A series as describe names it: its kind and module, and its rank in a job."""
    where = " (whole tensor)" if series.rank == -1 else " (rank %d)" % series.rank if series.rank else ""
    return "%s '%s'%s" % (series.kind, series.module or "(root)", where)


def _excursion_text(e):
    """"step 45, activation 'conv1' (amax 2621, 118.0 sigma above its band), back in it at step 46"."""
    return "step %d, %s (%s %.4g, %.1f sigma %s its band)%s" % (
        e["start"], _name(e["series"]), e["statistic"], e["value"], abs(e["score"]),
        "above" if e["score"] > 0 else "below", "" if e["back"] is None else ", back in it at step %d" % e["back"])


def describe(result, limit=5):
    """The result of first_movers as lines a person reads."""
    lines = []
    if result["why"]:
        lines.append(result["why"])
    movers = result["movers"]
    for i, e in enumerate(movers[:limit]):
        tie = i > 0 and e["start"] == movers[i - 1]["start"]
        lines.append("%s: %s%s" % ("first to move" if i == 0 else "then", _excursion_text(e),
                                   " (the same step as the one before)" if tie else ""))
    later = result["unfollowed"]
    if later:
        lines.append("but %d series left %s band all the same (%.1f sigma or more, from step %d on, against a band "
                     "of %d values or more), and the loss did not follow:"
                     % (len(later), "its" if len(later) == 1 else "their", FINDING_FACTOR * result["sigma"],
                        result["judged_from"], result["band_needed"]))
    for e in later[:limit]:
        lines.append("  " + _excursion_text(e))
    for e in result["furthest"]:
        s = e["series"]
        lines.append("furthest inside its band at step %d: %s (%s, %.1f sigma)" % (
            result["step"], _name(s), e["statistic"], abs(e["score"])))
    return lines
