"""Where a HookScope window or recorder listens: unix:PATH or tcp://HOST:PORT[?token=T]."""

import os
from urllib.parse import parse_qs, urlsplit


def default_address():
    """The address the window and the recorder listen on unless told otherwise."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return "unix:" + os.path.join(runtime, "hookscope.sock")
    return "unix:" + os.path.join("/tmp", "hookscope-%d" % os.getuid(), "hookscope.sock")


def parse_address(text):
    """Returns ("unix", path, None) or ("tcp", (host, port), token); raises ValueError."""
    text = text.strip()
    if text.startswith("unix:"):
        path = text[len("unix:"):]
        if path.startswith("//"):
            path = path[2:]
        if not path:
            raise ValueError("address %r names no socket path: write unix:PATH or tcp://HOST:PORT?token=T" % text)
        return "unix", path, None
    if text.startswith("tcp://"):
        parts = urlsplit(text)
        if not parts.hostname or parts.port is None:
            raise ValueError("address %r has no host and port: write unix:PATH or tcp://HOST:PORT?token=T" % text)
        token = parse_qs(parts.query).get("token", [None])[0] or os.environ.get("HOOKSCOPE_TOKEN")
        return "tcp", (parts.hostname, parts.port), token
    raise ValueError("address %r: write unix:PATH or tcp://HOST:PORT?token=T" % text)
