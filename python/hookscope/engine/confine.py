"""Confinement for the Python engine: the C++ engine's own (Landlock: no file written, no TCP;
seccomp: no program started, no process forked, no socket made), from libhookscope_confine.so
beside the statistics library, loaded with ctypes."""

import ctypes
import os

_NAME = "libhookscope_confine.so"


def _candidates():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the hookscope package
    named = os.environ.get("HOOKSCOPE_CONFINE_LIBRARY")
    if named:
        yield named
    yield os.path.join(here, _NAME)  # installed beside the package
    yield os.path.join(os.path.dirname(os.path.dirname(here)), "build", "core", _NAME)  # a source checkout
    stats = os.environ.get("HOOKSCOPE_STATS_LIBRARY")
    if stats:
        yield os.path.join(os.path.dirname(stats), _NAME)  # a build folder named by the tests


def confine(writable=None):
    """Confines this process for good (files beneath `writable` excepted: a private temporary
    folder); returns what was put in place. Raises RuntimeError with what to do when it cannot be."""
    for path in _candidates():
        if not os.path.isfile(path):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        lib.hookscope_confine.restype = ctypes.c_int
        lib.hookscope_confine.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong]
        text = ctypes.create_string_buffer(512)
        folder = os.fsencode(writable) if writable else None
        if lib.hookscope_confine(folder, text, len(text)) != 0:
            raise RuntimeError(text.value.decode("utf-8", "replace"))
        return text.value.decode("utf-8", "replace")
    raise RuntimeError("HookScope's confinement library (%s) was not found beside the hookscope package or in "
                       "build/core/: build HookScope (scripts/build.sh), or set HOOKSCOPE_CONFINE_LIBRARY" % _NAME)
