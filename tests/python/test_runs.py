"""Two runs compared (`hookscope-cli compare`) and a run read back in Python
(`hookscope.load_run`), on captures of the sample model made by this test."""

import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch
from deadlines import DEADLINE

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import hookscope  # noqa: E402

CLI = os.environ.get("HOOKSCOPE_CLI", os.path.join(ROOT, "build/cli/hookscope-cli"))
MODEL = os.path.join(os.environ.get("HOOKSCOPE_MODELS", os.path.join(ROOT, "resources/models")), "small_cnn.pt")


def cli(*args):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=DEADLINE)


@pytest.fixture(scope="module")
def runs():
    """Captures of the sample model: lr 0.01 twice, lr 0.02, and another model."""
    folder = tempfile.mkdtemp(prefix="hookscope-runs-")
    made = {}
    for name, lr in (("a", "0.01"), ("same", "0.01"), ("faster", "0.02")):
        made[name] = os.path.join(folder, name)
        result = cli("capture", MODEL, "--input", "8x1x28x28", "--steps", "4", "--hook", "*", "--lr", lr,
                     "--kinds", "activation,gradient,param", "--out", made[name])
        assert result.returncode == 0, result.stderr
    other = os.path.join(folder, "other.pt")
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    torch.jit.script(net).save(other)
    made["other"] = os.path.join(folder, "other_run")
    result = cli("capture", other, "--input", "8x1x28x28", "--steps", "2", "--hook", "*", "--out", made["other"])
    assert result.returncode == 0, result.stderr
    yield made
    shutil.rmtree(folder, ignore_errors=True)


def test_learning_rates_agree_at_step_0_and_diverge_first_at_step_1_in_the_first_module(runs):
    out = os.path.join(os.path.dirname(runs["a"]), "divergence.csv")
    result = cli("compare", runs["a"], runs["faster"], "--csv", out)
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    # The sample's forward begins with conv1: the first series to return with new weights.
    assert first.startswith("first divergence: step 1, activation conv1 ("), result.stdout
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows] == ["1", "2", "3"]  # step 0 agrees: same weights, same input
    assert rows[0]["module"] == "conv1" and rows[0]["kind"] == "activation"
    a, b = float(rows[0]["a"]), float(rows[0]["b"])
    assert abs(a - b) > 1e-4 * max(abs(a), abs(b))


def test_the_same_run_twice_does_not_diverge(runs):
    result = cli("compare", runs["a"], runs["same"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("no divergence over 4 steps and "), result.stdout


def test_runs_of_different_models_compare_on_what_they_share_and_list_the_rest(runs):
    result = cli("compare", runs["a"], runs["other"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("these runs are of different models"), result.stdout
    assert "only in %s" % runs["a"] in result.stdout and "activation conv1" in result.stdout
    assert "only in %s" % runs["other"] in result.stdout
    assert "note: the runs kept different steps (4 and 2" in result.stdout


def test_an_unreadable_run_is_exit_4_and_a_bad_tolerance_exit_2(runs):
    result = cli("compare", runs["a"], os.path.join(runs["a"], "stats.csv"))
    assert result.returncode == 4, result.stderr
    assert cli("compare", runs["a"], runs["same"], "--tolerance", "0").returncode == 2


def test_an_older_export_still_compares(runs):
    # Version 1: no rank column, histogram keys without rank{r}/ (docs/export-format.md).
    old = os.path.join(os.path.dirname(runs["a"]), "version1")
    shutil.copytree(runs["same"], old)
    with open(os.path.join(old, "manifest.json")) as f:
        manifest = json.load(f)
    manifest["version"] = 1
    manifest.pop("ranks", None)
    with open(os.path.join(old, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    for name in ("stats.csv", "scalars.csv", "alerts.csv"):
        with open(os.path.join(old, name)) as f:
            rows = list(csv.reader(f))
        # Version 1 also predates the low-precision counts (version 3).
        for column in ("rank", "amax", "f16_overflow", "f16_underflow", "e4m3_underflow", "e5m2_underflow"):
            if rows and column in rows[0]:
                at = rows[0].index(column)
                rows = [r[:at] + r[at + 1:] for r in rows]
        with open(os.path.join(old, name), "w", newline="") as f:
            csv.writer(f).writerows(rows)
    hist = torch.load(os.path.join(old, "histograms.pt"))
    torch.save({k.split("/", 1)[1]: {f: v[f] for f in ("steps", "counts", "edges")} for k, v in hist.items()},
               os.path.join(old, "histograms.pt"))
    result = cli("compare", runs["a"], old)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("no divergence over 4 steps"), result.stdout
    run = hookscope.load_run(old)
    assert run.version == 1 and run.series("activation", "conv1").rank == 0
    assert run.series("activation", "conv1").counts is not None
    assert run.series("activation", "conv1").stats[0].get("f16_overflow") is None  # not measured then


def test_load_run_gives_what_the_export_holds(runs):
    run = hookscope.load_run(runs["a"])
    conv1 = run.series("activation", "conv1")
    assert conv1.steps == [0, 1, 2, 3]
    with open(os.path.join(runs["a"], "stats.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["module"] == "conv1" and r["kind"] == "activation"]
    for row, stats in zip(sorted(rows, key=lambda r: int(r["step"])), conv1.stats):
        for column in ("min", "max", "mean", "std", "l2norm"):
            assert stats[column] == float(row[column])  # 17 digits: exact
        assert stats["numel"] == int(row["numel"]) and stats["shape"] == row["shape"]
    assert tuple(conv1.counts.shape) == (4, 64) and tuple(conv1.edges.shape) == (4, 65)
    assert int(conv1.counts[0].sum()) == conv1.stats[0]["numel"] - conv1.stats[0]["nan_count"] - conv1.stats[0]["inf_count"]
    assert [s for s, _ in run.scalars["loss"]] == [0, 1, 2, 3]
    assert all(math.isfinite(v) for _, v in run.scalars["loss"])
    assert run.series("param", "conv1.weight").values("numel")[0] == (0, 72)
    assert run.steps == [0, 1, 2, 3]
    # The whole model, hooked or not (every module of the sample was hooked here, and pool1's
    # shape is its own).
    tree = {m["path"]: m for m in run.modules}
    assert not run.modules_from_series and len(tree) == 11
    assert tree["conv1"]["type"] == "Conv2d" and tree["conv1"]["params"] == 80 and tree[""]["total"] == 52138
    assert tree["pool1"]["shapes"] == ["8x8x14x14"]
    with pytest.raises(KeyError, match="has activation, gradient of it|has gradient, activation"):
        run.series("input", "conv1")


def test_load_run_says_what_is_wrong_with_a_folder_that_is_not_a_run(runs):
    with pytest.raises(hookscope.RunReadError, match="no manifest.json"):
        hookscope.load_run(os.path.dirname(MODEL))
    with pytest.raises(hookscope.RunReadError, match="is not a folder"):
        hookscope.load_run(MODEL)
    damaged = os.path.join(os.path.dirname(runs["a"]), "damaged")
    shutil.copytree(runs["a"], damaged)
    with open(os.path.join(damaged, "histograms.pt"), "wb") as f:
        f.write(b"not a zip")
    with pytest.raises(hookscope.RunReadError, match="histograms.pt cannot be read"):
        hookscope.load_run(damaged)


def test_load_run_checks_every_record_of_histograms_pt_against_its_crc(runs):
    """torch.load does not check a record's CRC-32: load_run does, naming the damaged record,
    rather than return other numbers: the pickle's and every table's steps as the run is loaded,
    a series' counts and edges as they are read (the run opens without reading them)."""
    import zipfile
    from zip_damage import flip_a_byte_in
    from hookscope import _torch_zip
    source = os.path.join(runs["a"], "histograms.pt")
    opened = _torch_zip.File(source)
    tables = opened.root
    opened.close()
    name = "rank0/activation/conv1/0/0"
    for part in ("data.pkl", tables[name]["steps"].record, tables[name]["counts"].record,
                 tables[name]["edges"].record):
        damaged = os.path.join(os.path.dirname(runs["a"]), "flipped")
        shutil.copytree(runs["a"], damaged)
        path = os.path.join(damaged, "histograms.pt")
        with zipfile.ZipFile(path) as z:
            record = next(n for n in z.namelist() if n.endswith("/" + part) or n == part)
        flip_a_byte_in(path, record, mask=0x01)
        said = "its record %s does not match the CRC-32" % record
        if part in ("data.pkl", tables[name]["steps"].record):
            with pytest.raises(hookscope.RunReadError, match=said):
                hookscope.load_run(damaged)
        else:
            with hookscope.load_run(damaged) as run:
                assert run.series("activation", "conv2").counts.shape == (4, 64)  # another table reads
                with pytest.raises(hookscope.RunReadError, match=said):
                    run.series("activation", "conv1").counts
        shutil.rmtree(damaged)


def test_histograms_read_on_demand_are_what_torch_load_reads(runs):
    """A series' counts and edges, read from their records when first asked for, equal
    torch.load's of the whole file; the same file saved again by torch.save reads the same; and a
    file whose pickle holds what the lazy reader does not know (a torch.Size) is read whole by
    torch.load, with the same numbers."""
    whole = torch.load(os.path.join(runs["a"], "histograms.pt"), weights_only=True)

    def same(folder):
        with hookscope.load_run(folder) as run:
            assert len(run.all_series()) == len(whole) > 20
            for series in run.all_series():
                table = whole["rank%d/%s/%s/%d/%d" % (series.rank, series.kind, series.module, series.call,
                                                       series.index)]
                assert table["steps"].tolist() == series.steps
                assert torch.equal(series.counts, table["counts"]) and torch.equal(series.edges, table["edges"])

    same(runs["a"])
    # A table's rows in another order than its steps' (HookScope writes them in order, and then
    # keeps no list of rows for the series): each series' histograms still come in step order.
    for change in ("saved again", "a torch.Size in a table", "rows out of order",
                   "rows out of order and a torch.Size"):
        folder = os.path.join(os.path.dirname(runs["a"]), change.replace(" ", "-"))
        shutil.copytree(runs["a"], folder)
        tables = dict(whole)
        name = sorted(tables)[0]
        if "out of order" in change:
            order = torch.tensor([2, 0, 3, 1])
            tables[name] = {k: (v[order] if torch.is_tensor(v) and v.dim() and len(v) == 4 else v)
                            for k, v in tables[name].items()}
            assert tables[name]["steps"].tolist() == [2, 0, 3, 1]
        if "torch.Size" in change:
            tables[name] = dict(tables[name], shape=torch.Size([4, 64]))
        torch.save(tables, os.path.join(folder, "histograms.pt"))
        if "torch.Size" in change:
            from hookscope import _torch_zip
            with pytest.raises(_torch_zip.Unknown, match="torch.Size"):
                _torch_zip.File(os.path.join(folder, "histograms.pt"))
        same(folder)
        shutil.rmtree(folder)


def test_stats_csv_with_quotes_or_crlf_reads_as_the_plain_file(runs):
    """HookScope writes stats.csv as plain lines, split at their commas as a series is read; a
    file another tool rewrote (every field quoted, CRLF line ends) is read by the csv module and
    gives the same run."""
    with hookscope.load_run(runs["a"]) as run:
        plain = {s.key: (s.steps, s.stats) for s in run.all_series()}
    folder = os.path.join(os.path.dirname(runs["a"]), "quoted")
    shutil.copytree(runs["a"], folder)
    with open(os.path.join(runs["a"], "stats.csv"), newline="") as f:
        rows = list(csv.reader(f))
    with open(os.path.join(folder, "stats.csv"), "w", newline="") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\r\n").writerows(rows)
    with hookscope.load_run(folder) as run:
        quoted = {s.key: (s.steps, s.stats) for s in run.all_series()}
    assert quoted == plain  # NaN-free: the sample's statistics are finite
    with open(os.path.join(folder, "stats.csv"), "a") as f:
        f.write("4,0,conv1,0,activation,0,8x8,float32,not-a-number,1,2,3,4,5,6,0,0,1,0,0,0,0\n")
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    manifest["rows"]["stats.csv"] += 1
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    os.remove(os.path.join(folder, "histograms.pt"))
    run = hookscope.load_run(folder)
    with pytest.raises(hookscope.RunReadError, match="stats.csv line %d holds a number that is not one" % (len(rows) + 1)):
        run.series("activation", "conv1").stats
    shutil.rmtree(folder)


def test_stats_csv_is_read_row_by_row_and_a_file_changed_after_loading_is_said(runs):
    """A stats.csv of plain lines is never held whole (a 1.6 GB one held as text took 5.6 GB): each
    series notes where its rows start and reads them when its statistics are asked for. A quote
    past the first line still reads as the plain file (the csv module then reads it all); a
    stats.csv replaced after load_run is said, never read as the run's numbers."""
    with hookscope.load_run(runs["a"]) as run:
        plain = {s.key: (s.steps, s.stats) for s in run.all_series()}
    folder = os.path.join(os.path.dirname(runs["a"]), "late_quote")
    shutil.copytree(runs["a"], folder)
    stats = os.path.join(folder, "stats.csv")
    with open(stats, newline="") as f:
        lines = f.read().split("\n")
    original = "\n".join(lines)
    lines[-2] = ",".join('"%s"' % field for field in lines[-2].split(","))  # the last row, quoted
    with open(stats, "w", newline="") as f:
        f.write("\n".join(lines))
    with hookscope.load_run(folder) as run:
        assert {s.key: (s.steps, s.stats) for s in run.all_series()} == plain
    with open(stats, "w", newline="") as f:
        f.write(original)
    with hookscope.load_run(folder) as run:
        conv1 = run.series("activation", "conv1")
        with open(stats, "w", newline="") as f:
            f.write(lines[0] + "\n")  # replaced: its header alone
        with pytest.raises(hookscope.RunReadError, match="stats.csv changed since the run was loaded"):
            conv1.stats
    shutil.rmtree(folder)


@pytest.mark.parametrize("said", ['"88"', "88.5", "-1", "true", "null", "[88]", "1e300"])
def test_a_row_count_that_is_not_a_whole_number_is_refused_by_load_run_as_by_the_cli(runs, said):
    """manifest.json's "rows" says how many rows each CSV was written with: load_run took "88"
    (or 88.0 cut to 10 rows) for "nothing said" and returned a 10-row run of an 88-row export."""
    folder = os.path.join(os.path.dirname(runs["a"]), "rows-%d" % len(os.listdir(os.path.dirname(runs["a"]))))
    shutil.copytree(runs["a"], folder)
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    manifest["rows"]["stats.csv"] = json.loads(said)
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    result = cli("show", folder)
    assert result.returncode == 4 and "manifest.json cannot be read" in result.stderr, result.stderr
    assert '"stats.csv" is ' in result.stderr and ", not a" in result.stderr, result.stderr
    with pytest.raises(hookscope.RunReadError, match="manifest.json cannot be read: \"stats.csv\" is .*, not a whole"):
        hookscope.load_run(folder)


def test_a_whole_row_count_written_as_a_float_is_that_count(runs):
    folder = os.path.join(os.path.dirname(runs["a"]), "rows-float")
    shutil.copytree(runs["a"], folder)
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    rows = manifest["rows"]["stats.csv"]
    with open(os.path.join(folder, "stats.csv")) as f:
        lines = f.readlines()
    with open(os.path.join(folder, "stats.csv"), "w") as f:
        f.writelines(lines[:11])  # cut to 10 rows
    for said in (float(rows), rows):
        manifest["rows"]["stats.csv"] = said
        with open(os.path.join(folder, "manifest.json"), "w") as f:
            json.dump(manifest, f)
        says = "stats.csv is cut after step"
        with pytest.raises(hookscope.RunReadError, match=says):
            hookscope.load_run(folder)
        result = cli("show", folder)
        assert result.returncode == 4 and says in result.stderr, result.stderr


@pytest.mark.parametrize("damage,says", [
    ("a table removed", "histograms.pt has no table for it"),
    ("a table of no series", "is of a series stats.csv does not have"),
    ("a row removed", "has 3 rows where stats.csv has 4 steps"),
    ("a step renumbered", "has no row for step 3"),
    ("a step given twice", "(a step given twice)"),
    ("a table named badly", "names no series (HookScope writes rank/kind/module/call/index)"),
])
def test_histograms_that_do_not_match_stats_csv_are_named_by_every_reader(runs, damage, says):
    """histograms.pt holds a table for each series of stats.csv, a row for each of its steps: a
    table or row left out (or of another run) was read as a run with fewer histograms, and
    export-tensorboard wrote 0 or 66 of 88 without a word. Every reader now refuses it, exit 4."""
    folder = os.path.join(os.path.dirname(runs["a"]), "mismatch-" + damage.replace(" ", "-"))
    shutil.copytree(runs["a"], folder)
    path = os.path.join(folder, "histograms.pt")
    tables = torch.load(path, weights_only=True)
    name = sorted(tables)[0]
    table = tables[name]
    assert table["steps"].tolist() == [0, 1, 2, 3]
    if damage == "a table removed":
        del tables[name]
    elif damage == "a table of no series":
        rank, kind, _, call, index = name.split("/")
        tables["/".join((rank, kind, "nowhere", call, index))] = table
    elif damage == "a table named badly":
        tables["rank0/activation"] = table
    else:
        keep = {"a row removed": [0, 1, 2], "a step renumbered": [0, 1, 2, 3],
                "a step given twice": [0, 1, 2, 2]}[damage]
        tables[name] = {k: (v[keep] if torch.is_tensor(v) and v.dim() and len(v) == 4 else v) for k, v in table.items()}
        if damage == "a step renumbered":
            tables[name]["steps"] = torch.tensor([0, 1, 2, 7])
        elif damage == "a step given twice":
            tables[name]["steps"] = torch.tensor([0, 1, 2, 2])
    torch.save(tables, path)
    for args in (("show", folder), ("export-tensorboard", folder, os.path.join(folder + "-tb")),
                 ("compare", runs["a"], folder)):
        result = cli(*args)
        assert result.returncode == 4, (args, result.stdout, result.stderr)
        assert says in result.stderr and "histograms.pt" in result.stderr, (args, result.stderr)
        assert not os.path.exists(folder + "-tb")
    with pytest.raises(hookscope.RunReadError, match="histograms.pt") as caught:
        hookscope.load_run(folder)
    assert says in str(caught.value)


def test_a_series_of_another_shape_is_not_compared_and_is_named_with_both_shapes(runs):
    """The same model at another batch size: every activation has another shape; nothing of
    them is compared (a 16x10 output against an 8x10 one is no divergence), each is named."""
    folder = os.path.dirname(runs["a"])
    bigger = os.path.join(folder, "batch16")
    result = cli("capture", MODEL, "--input", "16x1x28x28", "--steps", "4", "--hook", "*", "--lr", "0.01",
                 "--kinds", "activation,gradient,param", "--out", bigger)
    assert result.returncode == 0, result.stderr
    result = cli("compare", runs["a"], bigger)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith("series differ in shape between the runs and are not compared"), result.stdout
    assert "activation (root): 8x10 vs 16x10" in result.stdout, result.stdout
    shown = [line for line in lines if line.startswith("  step")]
    assert all("activation" not in line and "gradient" not in line for line in shown), result.stdout


def test_a_csv_cut_at_a_line_end_or_missing_is_damage_not_a_smaller_run(runs):
    """The manifest says how many rows each CSV was written with: a stats.csv cut after a whole
    line is named as cut (after which step) by load_run and by the CLI's readers, not read as a
    run of fewer steps; a missing scalars.csv or a row with another field count is damage too."""
    with open(os.path.join(runs["a"], "manifest.json")) as f:
        rows = json.load(f)["rows"]
    with open(os.path.join(runs["a"], "scalars.csv")) as f:
        assert rows["scalars.csv"] == len(f.readlines()) - 1 > 4  # the loss, lr and timings at four steps
    cut = os.path.join(os.path.dirname(runs["a"]), "cut")
    shutil.copytree(runs["a"], cut)
    with open(os.path.join(cut, "stats.csv")) as f:
        lines = f.readlines()
    last_step = int(lines[-2].split(",")[0])
    with open(os.path.join(cut, "stats.csv"), "w") as f:
        f.writelines(lines[:-1])  # the last row gone, at a line end
    said = "stats.csv is cut after step %d: it holds %d of the %d rows" % (last_step, len(lines) - 2, len(lines) - 1)
    with pytest.raises(hookscope.RunReadError, match=said):
        hookscope.load_run(cut)
    for command in (("show", cut), ("report", cut, "--out", os.path.join(cut, "..", "cut.html"), "--force"),
                    ("compare", runs["a"], cut)):
        result = cli(*command)
        assert result.returncode == 4 and said in result.stderr, (command, result.returncode, result.stderr)
    shutil.rmtree(cut)

    missing = os.path.join(os.path.dirname(runs["a"]), "no_scalars")
    shutil.copytree(runs["a"], missing)
    os.remove(os.path.join(missing, "scalars.csv"))
    with pytest.raises(hookscope.RunReadError, match="has no scalars.csv"):
        hookscope.load_run(missing)
    result = cli("show", missing)
    assert result.returncode == 4 and "has no scalars.csv" in result.stderr, result.stderr
    with open(os.path.join(missing, "scalars.csv"), "w") as f:
        f.write("step,rank,name,value\n0,0,loss,1.5,extra\n1,0,loss,1.4\n2,0,loss,1.3\n3,0,loss,1.2\n")
    with pytest.raises(hookscope.RunReadError, match="line 2 has more fields than its header"):
        hookscope.load_run(missing)
    result = cli("show", missing)
    assert result.returncode == 4 and "scalars.csv line 2 has 5 fields where 4 are expected" in result.stderr
    shutil.rmtree(missing)


def test_a_manifest_nested_past_what_hookscope_writes_is_refused_not_a_crash(runs):
    deep = os.path.join(os.path.dirname(runs["a"]), "deep")
    shutil.copytree(runs["a"], deep)
    with open(os.path.join(deep, "manifest.json"), "w") as f:
        f.write('{"format": "hookscope-capture", "version": 3, "modules": ' + "[" * 200000 + "]" * 200000 + "}")
    with pytest.raises(hookscope.RunReadError, match="deeper than HookScope ever writes"):
        hookscope.load_run(deep)
    result = cli("show", deep)
    assert result.returncode == 4 and "deeper than 64 levels" in result.stderr, (result.returncode, result.stderr)
    shutil.rmtree(deep)

