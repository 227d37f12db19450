"""A HookScope export read back in Python: ``hookscope.load_run(path)``.

What the window shows of a run, as plain Python and torch objects, so that a notebook can do
what the window does::

    run = hookscope.load_run("run1")
    fc1 = run.series("activation", "fc1")          # call 0, tensor 0, rank 0
    fc1.steps, [s["std"] for s in fc1.stats]        # one row of stats.csv per step, as numbers
    fc1.counts, fc1.edges                           # histograms: int64[S, bins], float64[S, bins + 1]
    run.scalars["loss"]                             # [(step, value), ...] of rank 0
    run.modules                                     # the model's tree: path, type, params, total, shapes
    run.series("param", "fc1.weight", rank=hookscope.WHOLE)  # a sharded parameter's whole tensor

A series' statistics and histograms are read when first asked for (its rows of stats.csv
parsed, its records of histograms.pt read and checked against their CRC-32): opening a long run
reads only its series, steps and scalars. The format is docs/export-format.md; versions 1 to 3
read (older ones have no ranks, or no low-precision counts: those read as rank 0, and as None).
Only the standard library is needed, and torch for the histograms (read by a restricted
unpickler of what torch.save writes; a file holding anything else by torch.load, with
``weights_only=True`` where the torch has it).
"""

import array
import csv
import io
import json
import math
import os

__all__ = ["load_run", "Run", "Series", "RunReadError", "WHOLE"]

# stats.csv columns read as integers; the rest of the numbers as floats ("nan", "inf" spelled so).
_INTEGERS = ("step", "rank", "call", "index", "numel", "nan_count", "inf_count", "f16_overflow", "f16_underflow",
             "e4m3_underflow", "e5m2_underflow")
_TEXT = ("module", "kind", "shape", "dtype")


WHOLE = -1  # the rank of a sharded tensor's whole-tensor series (docs/distributed.md)


class RunReadError(Exception):
    """The folder is not a HookScope export, or one of its files is damaged: the message says which."""


class Series:
    """One captured tensor over steps: a kind, a module (the parameter's name for the parameter
    kinds), a call and a tensor index within it, and a rank. Its steps are read with the run; its
    statistics when first asked for (stats.csv's rows of it, kept unparsed until then), and its
    histograms from histograms.pt when first asked for."""

    def __init__(self, kind, module, call, index, rank):
        self.kind, self.module, self.call, self.index, self.rank = kind, module, call, index, rank
        self.steps = []   # ascending
        self._rows = []   # stats.csv's rows of it read by the csv module (line number, fields), in steps' order
        self._at = None   # or, in a file of plain lines (what HookScope writes), where each row starts
        self._lines = None  # and its line number: the row read again when the series is parsed
        self._stats = None
        self._counts = self._edges = None
        self._run = None  # the Run its rows and histograms are read from

    @property
    def stats(self):
        """Per step: stats.csv's row as numbers (None where not measured), in steps' order."""
        if self._stats is None:
            self._stats = self._run._parse_rows(self) if self._run is not None else []
            self._rows, self._at, self._lines = [], None, None  # parsed: the text is not kept twice
        return self._stats

    @stats.setter
    def stats(self, rows):
        self._stats = list(rows)

    @property
    def counts(self):
        """torch.int64[S, bins] from histograms.pt, rows in the steps' order (None: no histograms.pt)."""
        if self._counts is None and self._run is not None:
            self._run._read_histograms_of(self)
        return self._counts

    @property
    def edges(self):
        """torch.float64[S, bins + 1], as counts."""
        if self._edges is None and self._run is not None:
            self._run._read_histograms_of(self)
        return self._edges

    @property
    def key(self):
        return (self.kind, self.module, self.call, self.index, self.rank)

    def values(self, statistic):
        """One statistic over the steps: ``[(step, value), ...]``."""
        return [(step, row[statistic]) for step, row in zip(self.steps, self.stats)]

    def __repr__(self):
        return "Series(%s %s call %d tensor %d rank %d: %d steps)" % (
            self.kind, self.module or "(root)", self.call, self.index, self.rank, len(self.steps))


class Run:
    """An export folder: its manifest, series, scalars, alerts and module tree (a series' numbers
    read when first asked for)."""

    def __init__(self, path, manifest):
        self.path = path
        self.manifest = manifest
        self.version = int(manifest.get("version", 1))
        self._series = {}
        self.scalars = {}       # name -> [(step, value)] of rank 0
        self.rank_scalars = {}  # (name, rank) -> [(step, value)]
        self.alerts = []        # alerts.csv's rows
        self.modules = []       # manifest "modules", or built from the series (older exports)
        self.modules_from_series = False
        self.rows_written = {}  # manifest "rows": {file: rows it was written with}
        self._header = []       # stats.csv's columns
        self._histograms = None  # histograms.pt open (_torch_zip.File) while its tables are read on demand
        self._stats_file = None  # stats.csv open while its series' rows are read on demand
        self._stats_stamp = None  # and what it was when read (_file_stamp)
        self._tables = {}       # series key -> (its table in histograms.pt, the table's row of each step)

    def series(self, kind, module, call=0, index=0, rank=0):
        """The series of that tensor; KeyError naming what the run holds when it has none."""
        key = (kind, module, call, index, rank)
        if key not in self._series:
            kinds = sorted({k[0] for k in self._series if k[1] == module})
            raise KeyError("%s has no %s series of %r (call %d, tensor %d, rank %d)%s" % (
                self.path, kind, module, call, index, rank,
                "; it has %s of it" % ", ".join(kinds) if kinds else "; the module is not among its series"))
        return self._series[key]

    def all_series(self):
        """Every series, ordered by kind, module, call, index and rank."""
        return [self._series[k] for k in sorted(self._series)]

    @property
    def steps(self):
        return sorted({step for s in self._series.values() for step in s.steps})

    def deviation(self, series, statistic="l2norm", window=None, warmup=None):
        """``[(step, score, value)]``: how many robust sigmas each step's `statistic` lies from
        the band of the series' own last `window` steps (hookscope.bands; None before the band
        has `warmup` values). `series`: a Series of this run, or its key tuple."""
        from . import bands
        if not isinstance(series, Series):
            series = self.series(*series)
        return bands.scores(bands.series_points(series, statistic), statistic, bands.WINDOW if window is None else window,
                            bands.WARMUP if warmup is None else warmup)

    def first_movers(self, step=None, sigma=None):
        """The series whose excursion out of their band began in the 8 steps before the loss left
        its band (by default its largest excursion; or before `step`) up to that step, the first to
        leave it first, and with no loss spike the layers that left theirs all the same: see
        hookscope.bands.first_movers, whose dict this returns;
        ``hookscope.bands.describe(result)`` says it in words."""
        from . import bands
        return bands.first_movers(self, step=step, sigma=bands.SIGMA if sigma is None else sigma)

    def close(self):
        """Closes histograms.pt and stats.csv, which the run keeps open to read a series' histograms
        and statistics when asked for (also done when the run is collected, or at the end of ``with
        load_run(...) as run``); a series' statistics asked for after it are read from stats.csv
        at the run's path again."""
        if self._histograms is not None:
            self._histograms.close()
            self._histograms = None
        if self._stats_file is not None:
            self._stats_file.close()
            self._stats_file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "Run(%r: %d series, %d steps)" % (self.path, len(self._series), len(self.steps))

    def _parse_rows(self, series):
        """stats.csv's rows of `series` as numbers: every column but the text ones and the key's."""
        path = os.path.join(self.path, "stats.csv")
        columns = [(i, name, name in _INTEGERS) for i, name in enumerate(self._header)
                   if name not in _TEXT and name not in ("step", "rank", "call", "index")]
        shape, dtype = (self._header.index(c) if c in self._header else None for c in ("shape", "dtype"))
        parsed = []
        for line, fields in self._row_fields(series):
            have = len(fields)
            try:
                values = {name: _number(fields[i], integer) if i < have else None for i, name, integer in columns}
            except ValueError as exc:
                raise RunReadError("%s line %d holds a number that is not one (%s): the file is damaged"
                                   % (path, line, exc))
            values["shape"] = fields[shape] if shape is not None and shape < have else ""
            values["dtype"] = fields[dtype] if dtype is not None and dtype < have else ""
            parsed.append(values)
        return parsed

    def _row_fields(self, series):
        """(line number, fields) of each of `series`' rows of stats.csv, in its steps' order: read
        again at the places the run noted, from the file it was read from (a file changed since
        is said), or as the csv module read them."""
        if series._at is None:
            return series._rows
        path = os.path.join(self.path, "stats.csv")
        rows = []
        try:
            # The file the run was read from, kept open (an export written again over it is a new
            # file: this one stays readable); once the run is closed, the one at its path.
            f = self._stats_file if self._stats_file is not None else open(path, "rb")
            try:
                if _file_stamp(f) != self._stats_stamp:
                    raise ValueError("it is not the file the run was read from")
                for line, at in zip(series._lines, series._at):
                    f.seek(at)
                    rows.append((line, f.readline().decode("utf-8").rstrip("\n").split(",")))
            finally:
                if f is not self._stats_file:
                    f.close()
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            raise RunReadError("%s changed since the run was loaded (%s): load the run again" % (path, exc))
        return rows

    def _read_histograms_of(self, series):
        """Reads `series`' counts and edges from its table in histograms.pt (its records checked
        against their CRC-32 as they are read)."""
        from . import _torch_zip
        table = self._tables.get(series.key)
        if table is None:
            return
        entry, rows = table
        path = os.path.join(self.path, "histograms.pt")
        if self._histograms is None:
            raise RunReadError("%s was closed (Run.close()): load the run again to read its histograms" % path)
        what = "its table %r" % entry["name"]
        try:
            counts, edges = (self._histograms.tensor(entry[part], "%s's %s" % (what, part))
                             for part in ("counts", "edges"))
        except _torch_zip.Damaged as exc:
            raise RunReadError("%s is damaged: %s" % (path, exc))
        series._counts, series._edges = _in_order(path, what, counts, edges, entry["rows"], rows)


def _in_order(path, what, counts, edges, steps, rows):
    """A table's counts and edges (each a row for each of its `steps` steps) in its series' step
    order (rows, from _table_rows; None: they are)."""
    for part, tensor in (("counts", counts), ("edges", edges)):
        if tensor.dim() != 2 or tensor.shape[0] != steps:
            raise RunReadError("%s does not match itself: %s's %s is %s where its steps are %d%s"
                               % (path, what, part, "x".join(map(str, tensor.shape)), steps, _MISMATCH))
    return (counts, edges) if rows is None else (counts[rows], edges[rows])


def _number(text, integer):
    if text == "" or text is None:
        return None
    try:
        return int(text) if integer else float(text)
    except ValueError:
        return float(text) if integer else math.nan


def _rows(path, required):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise RunReadError("cannot read %s (%s)" % (path, exc.strerror or exc))
    except csv.Error as exc:
        raise RunReadError("%s is not a CSV file HookScope wrote (%s)" % (path, exc))
    for number, row in enumerate(rows, 2):
        missing = [c for c in required if row.get(c) is None]
        if missing:
            raise RunReadError("%s line %d lacks %s: the file is damaged" % (path, number, ", ".join(missing)))
    return rows


_INT64_MAX = (1 << 63) - 1


def _rows_written(manifest, manifest_path):
    """{file: rows} of manifest.json's "rows" (exports that say), each a whole number from 0, as
    the CLI requires: 88.0 is 88; "88", 88.5, -1, true or null are a damaged manifest."""
    said = manifest.get("rows")
    if not isinstance(said, dict):
        return {}
    counts = {}
    for name, value in said.items():
        whole = isinstance(value, int) and not isinstance(value, bool)
        if isinstance(value, float) and math.isfinite(value) and value == math.floor(value):
            whole, value = True, int(value)
        if not whole or not 0 <= value <= _INT64_MAX:
            raise RunReadError("%s cannot be read: %s is %s, not a whole number from 0 to %d: the export is damaged"
                               % (manifest_path, json.dumps(name), json.dumps(value), _INT64_MAX))
        counts[name] = value
    return counts


def _check_rows(run, name, rows, last_step):
    """A CSV against the rows manifest.json says it was written with (exports that say)."""
    written = run.rows_written.get(name)
    if written is None or written == rows:
        return
    path = os.path.join(run.path, name)
    if rows < written:
        raise RunReadError("%s is cut%s: it holds %d of the %d rows manifest.json says were written; the export is "
                           "damaged (a copy that stopped short?): copy or export it again from its source"
                           % (path, " after step %d" % last_step if rows else " before its first row", rows, written))
    raise RunReadError("%s holds %d rows where manifest.json says %d were written: rows were added after the export"
                       % (path, rows, written))


def _stats_lines(path):
    """stats.csv's header and rows as (line number, fields), read by the csv module: a file with
    quotes or carriage returns (a module's name holding a comma, a quote or a line break)."""
    try:
        with open(path, newline="") as f:
            text = f.read()
    except OSError as exc:
        raise RunReadError("cannot read %s (%s)" % (path, exc.strerror or exc))
    except UnicodeDecodeError as exc:
        raise RunReadError("%s is not a CSV file HookScope wrote (%s)" % (path, exc))
    try:
        reader = csv.reader(io.StringIO(text))
        header = next(reader, [])
        return header, [(reader.line_num, fields) for fields in reader if fields]
    except csv.Error as exc:
        raise RunReadError("%s is not a CSV file HookScope wrote (%s)" % (path, exc))


def _file_stamp(f):
    """What tells an open file from another or from itself changed: its device, inode, size and
    modification time."""
    st = os.fstat(f.fileno())
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class _Quoted(Exception):
    """stats.csv holds a quote or a carriage return: the csv module reads it."""


def _plain_rows(path, f):
    """stats.csv's header, then (line number, where the row starts, its text) of each row, read
    from the open file f line by line where no line holds a quote or a carriage return (what
    HookScope writes): the file is never held whole (a 1.6 GB stats.csv held as text and lines
    took 5.6 GB). _Quoted where a line does."""
    first = f.readline()
    at = len(first)
    if b'"' in first or b"\r" in first:
        raise _Quoted()
    try:
        yield first.decode("utf-8").rstrip("\n").split(",") if first.strip() else []
        for line, raw in enumerate(f, 2):
            start, at = at, at + len(raw)
            if b'"' in raw or b"\r" in raw:
                raise _Quoted()
            if raw != b"\n":
                yield line, start, raw.decode("utf-8").rstrip("\n")
    except UnicodeDecodeError as exc:
        raise RunReadError("%s is not a CSV file HookScope wrote (%s)" % (path, exc))


def _read_stats(run):
    """stats.csv's rows sorted into series by their key, each series' steps read; the rest of a
    row is read and parsed when its series' statistics are first asked for (Series.stats)."""
    path = os.path.join(run.path, "stats.csv")
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise RunReadError("cannot read %s (%s)" % (path, exc.strerror or exc))
    try:
        rows = _plain_rows(path, f)
        _sort_rows(run, path, next(rows), rows, plain=True)
        run._stats_file, run._stats_stamp, f = f, _file_stamp(f), None  # kept: the series read their rows from it
    except _Quoted:
        run._series = {}
        header, rows = _stats_lines(path)
        _sort_rows(run, path, header, iter(rows), plain=False)
    finally:
        if f is not None:
            f.close()


def _sort_rows(run, path, header, rows, plain):
    """Each row's key read and the row noted in its series (where it starts in the file where
    `plain`, its fields else); the series put in step order and checked."""
    run._header = header
    where = {c: header.index(c) if c in header else None for c in ("step", "module", "call", "kind", "index", "rank")}
    required = ("step", "module", "call", "kind", "index")
    absent = [c for c in required if where[c] is None]
    need = max([where[c] for c in required if where[c] is not None] + [-1]) + 1
    split = max([i for i in where.values() if i is not None] + [-1]) + 1
    step_at, module_at, call_at, kind_at, index_at, rank_at = (where[c] for c in
                                                                ("step", "module", "call", "kind", "index", "rank"))
    series_of = run._series
    numbers = {}  # each step's number made once: thousands of series share them
    last_step = None
    count = 0
    for row in rows:
        if plain:
            line, start, text = row
            fields = text.split(",", split)  # the key's columns; the rest when parsed
        else:
            line, fields = row
        if absent:
            raise RunReadError("%s line %d lacks %s: the file is damaged" % (path, line, ", ".join(absent)))
        if len(fields) < need:
            missing = [c for c in required if where[c] >= len(fields)]
            raise RunReadError("%s line %d lacks %s: the file is damaged" % (path, line, ", ".join(missing)))
        try:
            step = numbers.get(fields[step_at])
            if step is None:
                step = numbers[fields[step_at]] = int(fields[step_at])
            call, index = int(fields[call_at] or 0), int(fields[index_at] or 0)
            rank = int(fields[rank_at] or 0) if rank_at is not None and rank_at < len(fields) else 0
        except ValueError:
            if fields[step_at] == "":
                raise RunReadError("%s has a row without a step (line %d): the file is damaged" % (path, line))
            raise RunReadError("%s line %d has a step, call, index or rank that is not a whole number: the file is "
                               "damaged" % (path, line))
        key = (fields[kind_at], fields[module_at], call, index, rank)
        series = series_of.get(key)
        if series is None:
            series = series_of[key] = Series(*key)
            series._run = run
            if plain:
                series._at, series._lines = array.array("q"), array.array("q")
        series.steps.append(step)
        if plain:
            series._at.append(start)
            series._lines.append(line)
        else:
            series._rows.append((line, fields))
        last_step = step
        count += 1
    _check_rows(run, "stats.csv", count, last_step)
    # In step order whatever the rows' order; a step given twice for one tensor is damage (every
    # row twice, or every row labelled step 0), not a series to judge.
    for key, series in series_of.items():
        if any(a >= b for a, b in zip(series.steps, series.steps[1:])):
            order = sorted(range(len(series.steps)), key=series.steps.__getitem__)
            series.steps = [series.steps[i] for i in order]
            if plain:
                series._at = array.array("q", (series._at[i] for i in order))
                series._lines = array.array("q", (series._lines[i] for i in order))
            else:
                series._rows = [series._rows[i] for i in order]
        twice = next((a for a, b in zip(series.steps, series.steps[1:]) if a == b), None)
        if twice is not None:
            raise RunReadError("%s has step %d of %s %r (call %d, index %d, rank %d) twice: the export is damaged; "
                               "export it again from its source" % (path, twice, key[0], key[1] or "(root)", key[2],
                                                                     key[3], key[4]))


def damaged_record(path):
    """The first record of the zip at `path` whose bytes fail their CRC-32 (torch.load does not
    check them), or None; a file that is not a zip is torch.load's to refuse."""
    import zipfile
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except Exception:  # a directory zipfile cannot read (names, lengths): torch.load says what is wrong
        return None


# Why a histograms.pt that does not match stats.csv is refused.
_MISMATCH = "; the export is damaged, or its files come from different runs"


def _table_key(path, name, entry):
    """The series key a table of histograms.pt names ("rank{r}/kind/module/call/index"; older
    exports without the rank)."""
    parts = str(name).split("/")
    rank = 0
    if parts and parts[0].startswith("rank") and parts[0][4:].lstrip("-").isdigit():
        rank = int(parts[0][4:])
        parts = parts[1:]
    if len(parts) >= 4 and isinstance(entry, dict) and all(k in entry for k in ("counts", "edges", "steps")):
        try:
            return (parts[0], "/".join(parts[1:-2]), int(parts[-2]), int(parts[-1]), rank)
        except ValueError:
            pass
    raise RunReadError("%s: its table %r names no series (HookScope writes rank/kind/module/call/index)%s"
                       % (path, name, _MISMATCH))


def _table_rows(path, name, steps, series):
    """The row of the table `name` for each of `series`' steps, or None where they are the table's
    rows in order (as HookScope writes them: no list of rows kept for each series of a long run);
    the table's steps must be the series'."""
    if steps == series.steps:  # the series' steps are ascending and each once (_sort_rows)
        return None
    where = {step: i for i, step in enumerate(steps)}
    if len(where) != len(steps) or len(steps) != len(series.steps):
        raise RunReadError("%s does not match stats.csv: its table %r has %d rows%s where stats.csv has %d steps%s"
                           % (path, name, len(steps), " (a step given twice)" if len(where) != len(steps) else "",
                              len(series.steps), _MISMATCH))
    missing = [s for s in series.steps if s not in where]
    if missing:
        raise RunReadError("%s does not match stats.csv: its table %r has no row for step %d%s"
                           % (path, name, missing[0], _MISMATCH))
    return [where[s] for s in series.steps]


def _open_histograms(path):
    """histograms.pt's dict of tables, and the file kept open to read their tensors on demand (None
    where the file is one the lazy reader does not know: then read whole by torch.load)."""
    from . import _torch_zip
    try:
        opened = _torch_zip.File(path)
    except _torch_zip.Unknown:
        return _load_histograms(path), None
    except _torch_zip.Damaged as exc:
        raise RunReadError("%s cannot be read: %s; the file is damaged" % (path, exc))
    return opened.root, opened


def _torch_tensor():
    import torch
    return torch.Tensor


def _load_histograms(path):
    """histograms.pt read whole by torch.load, every record's CRC-32 checked first."""
    import torch
    damaged = damaged_record(path)
    if damaged:
        raise RunReadError("%s is damaged: its record %s does not match the CRC-32 the archive records for it"
                           % (path, damaged))
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except TypeError:  # a torch before weights_only
            return torch.load(path, map_location="cpu")
    except Exception as exc:
        raise RunReadError("%s cannot be read (%s: %s): the file is damaged" % (path, type(exc).__name__, exc))


def _read_histograms(run):
    """Matches histograms.pt's tables to stats.csv's series (every table's steps read and checked
    now); their counts and edges are read when a series' are first asked for."""
    from . import _torch_zip
    path = os.path.join(run.path, "histograms.pt")
    if not os.path.exists(path):
        return
    data, opened = _open_histograms(path)
    if not isinstance(data, dict):
        if opened is not None:
            opened.close()
        raise RunReadError("%s holds no dict of histograms: it is not HookScope's" % path)
    run._histograms = opened
    # A table for every series of stats.csv, a row for each of its steps, as HookScope writes
    # them: anything else is a damaged export (or files of two runs), said, not left out.
    for name, entry in data.items():
        key = _table_key(path, name, entry)
        series = run._series.get(key)
        if series is None:
            raise RunReadError("%s does not match stats.csv: its table %r is of a series stats.csv does not have%s"
                               % (path, name, _MISMATCH))
        steps = entry["steps"]
        stored = _torch_zip.Stored if opened is not None else _torch_tensor()
        if not all(isinstance(entry[part], stored) for part in ("steps", "counts", "edges")):
            raise RunReadError("%s: its table %r has steps, counts or edges that are not tensors%s"
                               % (path, name, _MISMATCH))
        if opened is not None:
            try:
                steps = opened.tensor(steps, "its table %r's steps" % name)
            except _torch_zip.Damaged as exc:
                raise RunReadError("%s is damaged: %s" % (path, exc))
        steps = [int(s) for s in steps.tolist()]
        rows = _table_rows(path, name, steps, series)
        if opened is None:
            series._counts, series._edges = _in_order(path, "its table %r" % name, entry["counts"], entry["edges"],
                                                      len(steps), rows)
        else:
            run._tables[key] = ({"name": name, "counts": entry["counts"], "edges": entry["edges"],
                                 "rows": len(steps)}, rows)
    for key, series in sorted(run._series.items()):
        if series.steps and key not in run._tables and series._counts is None:
            raise RunReadError("%s does not match stats.csv: stats.csv has the series %s %r (call %d, index %d, "
                               "rank %d) and histograms.pt has no table for it%s"
                               % (path, key[0], key[1] or "(root)", key[2], key[3], key[4], _MISMATCH))


def _read_scalars(run):
    path = os.path.join(run.path, "scalars.csv")
    if not os.path.exists(path):
        raise RunReadError("%s has no scalars.csv (every export has one, if only its header): the export is "
                           "incomplete" % run.path)
    rows = _rows(path, ("step", "name", "value"))
    for number, row in enumerate(rows, 2):
        if None in row:  # more fields than the header names
            raise RunReadError("%s line %d has more fields than its header: the file is damaged" % (path, number))
    _check_rows(run, "scalars.csv", len(rows), _number(rows[-1].get("step"), True) if rows else None)
    for row in rows:
        rank = _number(row.get("rank"), True) or 0
        run.rank_scalars.setdefault((row["name"], rank), []).append((int(row["step"]), _number(row["value"], False)))
    for (name, rank), values in run.rank_scalars.items():
        values.sort(key=lambda point: point[0])
        twice = next((a for (a, _), (b, _) in zip(values, values[1:]) if a == b), None)
        if twice is not None:
            raise RunReadError("%s has step %d of %r (rank %d) twice: the export is damaged; export it again from its "
                               "source" % (path, twice, name, rank))
        if rank == 0:
            run.scalars[name] = values


def _modules_from_series(run):
    """An older export's tree: every module a series names, with its ancestors."""
    paths = {""}
    for kind, module, _, _, _ in run._series:
        owner = module.rsplit(".", 1)[0] if kind in ("param", "param_grad", "update") and "." in module else module
        if kind in ("param", "param_grad", "update") and "." not in module:
            owner = ""
        parts = owner.split(".") if owner else []
        for i in range(len(parts) + 1):
            paths.add(".".join(parts[:i]))
    return [{"path": p, "type": "", "params": None, "total": None, "shapes": []} for p in sorted(paths)]


def load_run(path):
    """Reads the export folder at `path` (docs/export-format.md); RunReadError says what is wrong."""
    manifest_path = os.path.join(path, "manifest.json")
    if not os.path.isdir(path):
        raise RunReadError("%s is not a folder: give the folder an export wrote (it holds manifest.json)" % path)
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
    except OSError:
        raise RunReadError("%s has no manifest.json: it is not a HookScope export" % path)
    except ValueError as exc:
        raise RunReadError("%s is not JSON (%s): the export is damaged" % (manifest_path, exc))
    except RecursionError:
        raise RunReadError("%s nests arrays and objects deeper than HookScope ever writes: the export is damaged or "
                           "crafted" % manifest_path)
    if not isinstance(manifest, dict) or manifest.get("format") != "hookscope-capture":
        raise RunReadError("%s does not say format hookscope-capture: it is not a HookScope export" % manifest_path)
    version = manifest.get("version", 1)
    if not isinstance(version, int) or version > 3:
        raise RunReadError("%s is an export of version %r; this hookscope package reads versions 1 to 3: "
                           "read it with a newer one" % (path, version))
    run = Run(path, manifest)
    run.rows_written = _rows_written(manifest, manifest_path)
    _read_stats(run)
    _read_histograms(run)
    _read_scalars(run)
    alerts = os.path.join(path, "alerts.csv")
    if os.path.exists(alerts):
        run.alerts = _rows(alerts, ("step", "module", "rule"))
    if isinstance(manifest.get("modules"), list):
        run.modules = manifest["modules"]
    else:
        run.modules = _modules_from_series(run)
        run.modules_from_series = True
    return run
