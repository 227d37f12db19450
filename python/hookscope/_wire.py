"""Frames of the HookScope wire protocol (docs/protocol.md), standard library only."""

import json
import math
import struct

PROTOCOL_VERSION = 1
MAGIC = b"HS"
JSON_FRAME = 1
DATA_FRAME = 2
HEADER = struct.Struct("<2sBBI")  # magic, protocol version, frame type, payload length
MAX_JSON_BYTES = 16 << 20
MAX_DATA_BYTES = 1 << 30


class ProtocolError(Exception):
    """The peer sent something that is not a frame of this protocol."""


def _finite(value):
    # JSON has no NaN or infinity: they travel as the strings "nan", "inf", "-inf".
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def encode_number(value):
    return _finite(float(value))


def json_frame(message):
    payload = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    if len(payload) > MAX_JSON_BYTES:
        raise ProtocolError("message of %d bytes is over the %d limit" % (len(payload), MAX_JSON_BYTES))
    return HEADER.pack(MAGIC, PROTOCOL_VERSION, JSON_FRAME, len(payload)) + payload


def text_frame(text):
    """A frame of JSON text already written (by hand, for speed)."""
    payload = text.encode()
    return HEADER.pack(MAGIC, PROTOCOL_VERSION, JSON_FRAME, len(payload)) + payload


def data_header(length):
    return HEADER.pack(MAGIC, PROTOCOL_VERSION, DATA_FRAME, length)


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
                raise ProtocolError("the peer speaks protocol version %d, this package %d: "
                                    "use a hookscope package and HookScope of the same release"
                                    % (version, PROTOCOL_VERSION))
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
