"""The abort of a gloo rank at exit ("terminate called without an active exception"), PyTorch's
own race (docs/distributed.md), made likely with sys.setswitchinterval(1.0): a plain two-rank DDP
job aborts in some runs; the same job attached to HookScope (no viewer listening) waits at exit
until gloo has let go of the last backward's context, and never aborts."""

import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "attach", "ddp_exit_race.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job(*args):
    done = subprocess.run([sys.executable, SCRIPT, "--port", str(free_port()), *args], capture_output=True, text=True,
                          timeout=300)
    aborted = "terminate called without an active exception" in done.stderr
    assert done.returncode == 0 or aborted, done.stderr[-3000:]  # nothing else may go wrong
    return aborted


def test_attached_ranks_wait_at_exit_for_gloo_and_never_abort():
    # The control: the race is there (about a run in three here), found within 30 plain runs.
    plain = 0
    while plain < 30 and not job():
        plain += 1
    assert plain < 30, "no plain run aborted in 30: the race this test is about did not show"
    aborted = [job("--attach") for _ in range(16)]
    assert not any(aborted), "%d of 16 attached runs aborted at exit" % sum(aborted)
