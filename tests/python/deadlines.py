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
