"""How long a Python test waits for an event before it fails: one place for all of them, as
tests/gui/WindowTestSupport.h's deadlineMs() is for the window's tests. A test waits for the
event itself (a process's exit, a line, a file) and fails only past its deadline, which is
minutes, not seconds, and grows with HOOKSCOPE_TEST_DEADLINE_SCALE (default 1) on a machine
slower still. A passing test never waits for it."""

import os


def seconds(base=300):
    """`base` seconds (5 minutes unless said) times HOOKSCOPE_TEST_DEADLINE_SCALE."""
    try:
        scale = float(os.environ.get("HOOKSCOPE_TEST_DEADLINE_SCALE") or 1)
    except ValueError:
        scale = 1.0
    return base * max(scale, 1.0)


DEADLINE = seconds()        # a command, a script, a recorder: 5 minutes
LONG_DEADLINE = seconds(600)  # an install, a compile, a long scripted run: 10 minutes


def wait_until(condition, what, deadline=None):
    """Polls `condition` until it is true; fails past the deadline naming `what` was awaited."""
    import time
    end = time.monotonic() + (deadline or DEADLINE)
    while not condition():
        if time.monotonic() > end:
            raise AssertionError("waited %.0f s for %s" % (deadline or DEADLINE, what))
        time.sleep(0.05)


def catches(pid, signo):
    """Whether process `pid` has a handler installed for signal `signo` (/proc's SigCgt)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signo - 1) & 1)
    except OSError:
        pass
    return False


def cpu_seconds(pid):
    """The CPU time process `pid` (all its threads) has used so far: a looping process's clock,
    which the machine's load does not advance."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pids(pid):
    """The processes `pid` started, as /proc lists them."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []
