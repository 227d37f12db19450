"""Every rank of a torch.distributed job (gloo, CPU, 2 ranks by torch.multiprocessing) attached
to one `hookscope-cli record`: one export with a rank column, each rank's statistics equal to
its own PyTorch hooks, rank_divergence, a break that stops every rank at the same step, a rank
that dies, and version-1 exports that still open.
"""
import json
import os
import socket
import subprocess
import sys

import pytest

from test_attach import CLI, Recorder, assert_matches, manifest, read_csv, tmp  # noqa: F401  (tmp: fixture)
from deadlines import DEADLINE

HERE = os.path.dirname(os.path.abspath(__file__))
DDP_SCRIPT = os.path.join(HERE, "attach", "ddp_script.py")

pytestmark = pytest.mark.skipif(not os.path.exists(CLI), reason="hookscope-cli is not built")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(address, *args, timeout=DEADLINE, script=DDP_SCRIPT):
    """A job of `script` (spawning its ranks itself) on a free port, attaching to `address`."""
    env = dict(os.environ, HOOKSCOPE_ADDRESS=address)
    return subprocess.run([sys.executable, script, "--port", str(free_port()), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def report(folder, rank):
    with open(os.path.join(folder, "rank-%d.json" % rank)) as f:
        return json.load(f)


def test_both_ranks_in_one_export_each_equal_to_its_own_hooks(tmp):
    recorder = Recorder(tmp, "--hook", "*")
    job = run_job(recorder.address, "--steps", "5", "--reference", tmp)
    assert job.returncode == 0, job.stderr
    code, err = recorder.wait()
    assert code == 0, err
    assert "attached rank 0 of 2" in err and "attached rank 1 of 2" in err
    m = manifest(recorder.out)
    assert m["version"] == 3 and m["world_size"] == 2
    assert [r["rank"] for r in m["ranks"]] == [0, 1]
    assert all(r["steps"] == 5 and r["ended"].startswith("closed by the script") for r in m["ranks"])
    assert m["ranks"][0]["job"] == m["ranks"][1]["job"] != ""
    rows = read_csv(recorder.out, "stats.csv")
    for rank in (0, 1):
        mine = [r for r in rows if r["rank"] == str(rank)]
        assert {int(r["step"]) for r in mine} == set(range(5))
        with open(os.path.join(tmp, "reference-%d.json" % rank)) as f:
            reference = json.load(f)
        assert reference
        assert_matches([r for r in mine if r["step"] == "0"], reference)
    # The model's own paths, not DDP's "module.".
    assert not any(r["module"].startswith("module") for r in rows)
    # Each rank saw its own data: their step-0 inputs differ.
    first = {r["rank"]: r["mean"] for r in rows if r["step"] == "0" and r["module"] == "inp" and r["kind"] == "activation"}
    assert first["0"] != first["1"]
    scalars = read_csv(recorder.out, "scalars.csv")
    assert {(r["rank"], r["name"]) for r in scalars if r["step"] == "4"} >= {("0", "loss"), ("1", "loss")}
    # DDP kept the ranks equal: no divergence.
    assert not [a for a in read_csv(recorder.out, "alerts.csv") if a["rule"] == "rank_divergence"]
    show = subprocess.run([CLI, "show", recorder.out], capture_output=True, text=True)
    assert show.returncode == 0, show.stderr
    assert "2 ranks" in show.stdout, show.stdout


def test_a_nudged_parameter_fires_rank_divergence_at_that_step(tmp):
    recorder = Recorder(tmp, "--hook", "inp", "--kinds", "activation")
    job = run_job(recorder.address, "--steps", "6", "--nudge", "1:3")
    assert job.returncode == 0, job.stderr
    code, err = recorder.wait()
    assert code == 0, err
    alerts = [a for a in read_csv(recorder.out, "alerts.csv") if a["rule"] == "rank_divergence"]
    assert len(alerts) == 1, alerts
    alert = alerts[0]
    assert alert["step"] == "3" and alert["module"] == "body.0.0.weight" and alert["rank"] == "1"
    assert alert["kind"] == "param" and "rank 1 from rank 0" in alert["message"]
    assert float(alert["value"]) > 1e-6
    # It stays apart from then on: the same alert, steps 3 to 5.
    assert alert["last_step"] == "5" and alert["count"] == "3"


def test_a_break_on_one_ranks_nan_stops_every_rank_at_that_step(tmp):
    recorder = Recorder(tmp, "--hook", "*", "--break", "non_finite")
    job = run_job(recorder.address, "--steps", "8", "--nan", "1:3", "--report", tmp)
    assert job.returncode == 0, job.stderr
    code, err = recorder.wait()
    assert code == 6, err
    assert "on non_finite (rank 1)" in err, err
    for rank in (0, 1):
        r = report(tmp, rank)
        assert r["stopped"] is not None and r["stopped"][0] == 3, r
        assert r["steps"] == 4
    first = [a for a in read_csv(recorder.out, "alerts.csv") if a["rule"] == "non_finite" and a["step"] == "3"]
    assert first and first[0]["rank"] == "1" and first[0]["module"] == "inp", first
    m = manifest(recorder.out)
    assert [r["steps"] for r in m["ranks"]] == [4, 4]
    assert all(r["ended"] == "stopped by HookScope after 4 steps" for r in m["ranks"]), m["ranks"]


def test_a_killed_rank_is_recorded_and_the_other_kept(tmp):
    recorder = Recorder(tmp, "--hook", "inp", "--kinds", "activation")
    job = run_job(recorder.address, "--steps", "6", "--die", "1:3", "--collective-timeout", "5")
    assert job.returncode != 0  # the surviving rank's all-reduce fails, as torch.distributed does
    code, err = recorder.wait()
    assert code == 7, err
    assert "rank 1 the script disconnected without closing after 3 steps" in err, err
    m = manifest(recorder.out)
    ranks = {r["rank"]: r for r in m["ranks"]}
    assert ranks[1]["steps"] == 3 and "disconnected" in ranks[1]["ended"]
    rows = read_csv(recorder.out, "stats.csv")
    assert {int(r["step"]) for r in rows if r["rank"] == "1"} == {0, 1, 2}
    assert {int(r["step"]) for r in rows if r["rank"] == "0"} >= {0, 1, 2}


V1_STATS = ("step,module,call,kind,index,shape,dtype,numel,min,max,mean,std,l2norm,zero_frac,nan_count,inf_count\n"
            "0,fc,0,activation,0,2x3,float32,6,-1,2,0.5,1,2.5,0,0,0\n"
            "1,fc,0,activation,0,2x3,float32,6,-2,3,0.25,1.5,3.5,0,0,0\n")


def write_v1_export(folder):
    os.makedirs(folder)
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump({"format": "hookscope-capture", "version": 1, "model": {"file": "m.pt", "sha256": ""},
                   "steps": 2, "hooked": [{"module": "fc", "kinds": ["activation"]}], "source": "model"}, f)
    with open(os.path.join(folder, "stats.csv"), "w") as f:
        f.write(V1_STATS)
    with open(os.path.join(folder, "scalars.csv"), "w") as f:
        f.write("step,name,value\n0,loss,1.5\n1,loss,1.25\n")
    with open(os.path.join(folder, "alerts.csv"), "w") as f:
        f.write("step,module,kind,rule,value,message,last_step,count\n1,fc,activation,dead_units,0.95,dead,1,1\n")


def test_a_version_1_export_still_opens(tmp):
    folder = os.path.join(tmp, "v1")
    write_v1_export(folder)
    show = subprocess.run([CLI, "show", folder], capture_output=True, text=True)
    assert show.returncode == 0, show.stderr
    assert "fc" in show.stdout and "2 steps" in show.stdout, show.stdout
