"""Writes a HookScope run as TensorBoard event files, with PyTorch's own writer
(``torch.utils.tensorboard.SummaryWriter``, which needs the ``tensorboard`` package).

``hookscope-cli export-tensorboard RUN LOGDIR`` reads the export folder and runs
``python -m hookscope.tensorboard_export LOGDIR`` with the series on standard input, one JSON
object a line::

    {"type": "begin", "ranks": [0, 1], "histograms": H, "scalars": S}   (the totals: optional)
    {"type": "histogram", "rank": 0, "tag": "activation/fc1/0/0", "step": 3, "min": ..., "max": ...,
     "num": ..., "sum": ..., "sum_squares": ..., "limits": [...], "counts": [...]}
    {"type": "scalar", "rank": 0, "tag": "loss", "step": 3, "value": 2.3}     (null: NaN)
    {"type": "end", "histograms": H, "scalars": S}

One rank is written to LOGDIR itself; several become the runs LOGDIR/rank0, LOGDIR/rank1, ...
LOGDIR is written beside under a temporary name and moved into place only when complete, and an
existing non-empty LOGDIR is refused: TensorBoard reads every event file under it, so a second
export into it would show both.
Exit codes as hookscope-cli's: 4 the input is not what the CLI writes, 5 LOGDIR cannot be
written, 8 this Python lacks torch or tensorboard.
"""

import json
import os
import shutil
import sys
import time

PREFIX = "hookscope-cli: "


def fail(code, message):
    sys.stderr.write(PREFIX + message + "\n")
    sys.exit(code)


def number(value):
    return float("nan") if value is None else float(value)


def writer_class():
    try:
        import torch  # noqa: F401
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        fail(8, "%s cannot write TensorBoard logs (%s): install TensorBoard there (pip install tensorboard), "
                "or name another Python with --python" % (sys.executable, exc))
    return SummaryWriter


def check_target(logdir):
    if os.path.lexists(logdir):
        if not os.path.isdir(logdir) or os.path.islink(logdir):
            fail(5, "%s exists and is not a folder; name a new folder for the TensorBoard log" % logdir)
        if os.listdir(logdir):
            fail(5, "%s is not empty; TensorBoard would show every log under it together, so name a new or "
                    "empty folder (or delete this one)" % logdir)


WHOLE = -1  # the rank of a sharded tensor's whole-tensor series


def run_name(rank):
    """A rank's run: rank0, rank1, ...; a sharded tensor's whole, made from every rank's shard: whole."""
    return "whole" if rank == WHOLE else "rank%d" % rank


class Progress:
    """What has been written, on standard error once the export takes more than a second: on a
    terminal one line rewritten in place, otherwise a line every 10 s."""

    def __init__(self, stream=None):
        self.stream, self.total, self.said = stream or sys.stderr, None, None
        self.terminal = self.stream.isatty()
        self.started = self.last = time.monotonic()

    def update(self, done, final=False):
        now = time.monotonic()
        if not self.total or now - self.started < 1.0 or done == self.said or \
                (not final and (done >= self.total or now - self.last < (0.5 if self.terminal else 10))):
            return
        self.last, self.said = now, done
        took = now - self.started
        line = "export-tensorboard: %d of %d histograms and scalars written (%d%%), %s" % (
            done, self.total, 100 * done // self.total,
            "in %d s" % round(took) if final else "about %d s left" % round(took * (self.total - done) / max(done, 1)))
        self.stream.write(("\r%s\033[K" if self.terminal else "%s\n") % line)
        if final and self.terminal:
            self.stream.write("\n")
        self.stream.flush()


def write(logdir, lines, SummaryWriter):
    """Writes the stream's runs into `logdir` (a fresh folder); returns (histograms, scalars, ranks)."""
    writers = {}
    ranks = None
    counts = [0, 0]
    ended = None
    progress = Progress()
    try:
        for number_, line in enumerate(lines, 1):
            if not line.strip():
                continue
            progress.update(counts[0] + counts[1])
            try:
                item = json.loads(line)
                kind = item["type"]
                if kind == "begin":
                    ranks = [int(r) for r in item["ranks"]]
                    if "histograms" in item:
                        progress.total = int(item["histograms"]) + int(item["scalars"])
                    for r in ranks:
                        path = logdir if len(ranks) == 1 else os.path.join(logdir, run_name(r))
                        writers[r] = SummaryWriter(log_dir=path)
                elif kind == "histogram":
                    writers[int(item["rank"])].add_histogram_raw(
                        item["tag"], min=number(item["min"]), max=number(item["max"]), num=int(item["num"]),
                        sum=number(item["sum"]), sum_squares=number(item["sum_squares"]),
                        bucket_limits=[number(v) for v in item["limits"]],
                        bucket_counts=[int(v) for v in item["counts"]], global_step=int(item["step"]))
                    counts[0] += 1
                elif kind == "scalar":
                    writers[int(item["rank"])].add_scalar(item["tag"], number(item["value"]), int(item["step"]))
                    counts[1] += 1
                elif kind == "end":
                    ended = (int(item["histograms"]), int(item["scalars"]))
            except (KeyError, TypeError, ValueError) as exc:
                fail(4, "line %d of the series is not what hookscope-cli writes (%s: %s)"
                     % (number_, type(exc).__name__, exc))
    finally:
        for w in writers.values():
            w.close()
    progress.update(counts[0] + counts[1], final=True)
    if ended is None or ended != tuple(counts):
        fail(4, "the series ended early (%d histograms and %d scalars received); nothing was written"
             % tuple(counts))
    return counts[0], counts[1], ranks or []


def main(argv):
    if len(argv) != 1:
        fail(2, "usage: python -m hookscope.tensorboard_export LOGDIR  (the series on standard input)")
    logdir = os.path.abspath(argv[0])
    check_target(logdir)
    SummaryWriter = writer_class()
    parent = os.path.dirname(logdir)
    temporary = os.path.join(parent, ".%s.hookscope-tmp-%d" % (os.path.basename(logdir), os.getpid()))
    try:
        os.makedirs(temporary)
    except OSError as exc:
        fail(5, "cannot write %s (%s)" % (parent, exc.strerror or exc))
    moved = False
    try:
        histograms, scalars, ranks = write(temporary, sys.stdin, SummaryWriter)
        check_target(logdir)  # still free: nothing else wrote there meanwhile
        os.rename(temporary, logdir)  # onto an empty folder, or a new name
        moved = True
    except OSError as exc:
        fail(5, "cannot write %s (%s)" % (logdir, exc.strerror or exc))
    finally:
        if not moved:
            shutil.rmtree(temporary, ignore_errors=True)
    names = [run_name(r) for r in sorted(ranks, key=lambda r: (r == WHOLE, r))]
    runs = "1 run" if len(ranks) == 1 else "%d runs (%s)" % (len(ranks), ", ".join(names) if len(names) <= 4
                                                             else "%s ... %s" % (names[0], names[-1]))
    sys.stderr.write("wrote %s: %d histograms and %d scalars in %s; view it with: tensorboard --logdir %s\n"
                     % (argv[0], histograms, scalars, runs, argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
