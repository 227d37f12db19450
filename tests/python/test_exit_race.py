"""The abort of a gloo rank at exit ("terminate called without an active exception"), PyTorch's
own race (docs/distributed.md), made likely with sys.setswitchinterval(1.0): a plain two-rank DDP
job aborts in some runs (about one in three on an idle 2-core machine); the same job attached to
HookScope (no viewer listening) waits at exit until gloo has let go of the last backward's
context, and never aborts. The race's timing depends on the machine's load: where no plain run
aborts, the test says so and still requires that no attached run aborts."""

import os
import socket
import subprocess
import sys

from deadlines import DEADLINE

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "attach", "ddp_exit_race.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job(*args):
    done = subprocess.run([sys.executable, SCRIPT, "--port", str(free_port()), *args], capture_output=True, text=True,
                          timeout=DEADLINE)
    aborted = "terminate called without an active exception" in done.stderr
    assert done.returncode == 0 or aborted, done.stderr[-3000:]  # nothing else may go wrong
    return aborted


def test_plain_jobs_abort_at_exit_in_some_runs():
    # The control: plain runs until one aborts (6 at most: one in three aborts on an idle machine,
    # so six clean ones say the race is hidden now; a busy machine can hide it). A test of its own
    # (ctest runs the two in parallel): it fails only if a job goes wrong otherwise, and says
    # whether the race showed on this machine now.
    plain = 0
    while plain < 6 and not job():
        plain += 1
    print("no plain run aborted in 6 on this machine now: the attached runs are not shown against it"
          if plain == 6 else "a plain run aborted at exit after %d that did not" % plain)


def test_attached_ranks_wait_at_exit_for_gloo_and_never_abort():
    aborted = [job("--attach") for _ in range(12)]
    assert not any(aborted), "%d of 12 attached runs aborted at exit" % sum(aborted)
