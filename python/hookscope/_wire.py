"""Frames of the HookScope wire protocol (docs/protocol.md), standard library only."""

import json
import math
import struct

# Version 2: a script sends statistics it computed (`stats`), never tensor bytes.
PROTOCOL_VERSION = 2
MAGIC = b"HS"
JSON_FRAME = 1
STATS_FRAME = 2  # a step's statistics as float64 rows, to a viewer whose welcome offers it
STATS_HEAD = struct.Struct("<QII")  # step, rows, bins
HEADER = struct.Struct("<2sBBI")  # magic, protocol version, frame type, payload length
MAX_JSON_BYTES = 16 << 20


class ProtocolError(Exception):
    """The peer sent something that is not a frame of this protocol."""


def version_advice(theirs, ours=PROTOCOL_VERSION):
    """What to upgrade when the viewer speaks protocol `theirs` and this package `ours`."""
    if theirs < ours:
        return ("HookScope speaks protocol version %d, this hookscope package %d: upgrade HookScope "
                "(the window or hookscope-cli) to this package's release" % (theirs, ours))
    return ("HookScope speaks protocol version %d, this hookscope package %d: upgrade the hookscope "
            "package to HookScope's release (pip install the python/ folder of that HookScope)" % (theirs, ours))


def _finite(value):
    # JSON has no NaN or infinity: they travel as the strings "nan", "inf", "-inf".
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def encode_number(value):
    return _finite(float(value))


def number_text(value):
    """A float as JSON text, non-finite ones as "nan", "inf", "-inf"."""
    if value != value:
        return '"nan"'
    if value in (math.inf, -math.inf):
        return '"inf"' if value > 0 else '"-inf"'
    return repr(float(value))


def _frame(kind, payload, what):
    if len(payload) > MAX_JSON_BYTES:
        raise ProtocolError("%s of %d bytes is over the %d limit" % (what, len(payload), MAX_JSON_BYTES))
    return HEADER.pack(MAGIC, PROTOCOL_VERSION, kind, len(payload)) + payload


def json_frame(message):
    return _frame(JSON_FRAME, json.dumps(message, separators=(",", ":"), allow_nan=False).encode(), "message")


def text_frame(text):
    """A frame of JSON text already written (by hand, for speed)."""
    return _frame(JSON_FRAME, text.encode(), "message")


def stats_frame(payload):
    """A binary stats frame (docs/protocol.md): STATS_HEAD, then per row the series id, 0, and
    the row's float64 values."""
    return _frame(STATS_FRAME, payload, "stats frame")


class FrameReader:
    """Cuts a byte stream into JSON messages; raises ProtocolError on anything else."""

    def __init__(self):
        self._buffer = bytearray()

    def feed(self, data):
        self._buffer += data

    def messages(self):
        out = []
        while len(self._buffer) >= HEADER.size:
            magic, version, kind, length = HEADER.unpack_from(self._buffer)
            if magic != MAGIC:
                raise ProtocolError("the peer does not speak the HookScope protocol")
            if version != PROTOCOL_VERSION:
                raise ProtocolError(version_advice(version))
            if kind != JSON_FRAME or length > MAX_JSON_BYTES:
                raise ProtocolError("unexpected frame (type %d, %d bytes) from the viewer" % (kind, length))
            if len(self._buffer) < HEADER.size + length:
                break
            payload = bytes(self._buffer[HEADER.size:HEADER.size + length])
            del self._buffer[:HEADER.size + length]
            try:
                message = json.loads(payload)
            except ValueError as exc:
                raise ProtocolError("a message from the viewer is not JSON: %s" % exc) from None
            if not isinstance(message, dict) or not isinstance(message.get("type"), str):
                raise ProtocolError("a message from the viewer has no type")
            out.append(message)
        return out
