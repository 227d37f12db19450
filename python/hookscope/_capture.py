"""Captured tensors to `stats` messages: what an attached script and HookScope's Python engine
share. The owner has `lock`, `_stats` (StepStatistics), `_conn` (Connection), `_step`,
`_defer_all` and `_warn_once(key, message)`; each tensor becomes statistics where it lives."""

import json
import os
import struct
import sys

import torch

from . import _wire
from ._hooks import relative_update
from ._sharded import is_dtensor
from ._stats import HEADER, CapturedInGraph, entry_text

DTYPES = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32", torch.int16: "int16",
    torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
}
STATS_PER_MESSAGE = 4000
STATS_MESSAGE_BYTES = 8 << 20
BEHIND_BYTES = 16 << 20      # with this much unsent, a step's statistics are dropped as a gap
NAMED_DROPS = 64             # dropped captures named per step (the count is always whole)
_ROW_ID = struct.Struct("<II")  # a binary row's series number and its padding, before its values
_TENSOR = torch.Tensor


_eager_capture = []


_IS_COMPILING = getattr(getattr(torch, "compiler", None), "is_compiling", None)  # PyTorch 2.3 and later


def _compiling():
    """Whether Dynamo is tracing the calling code: torch.compiler.is_compiling where it exists;
    before it, Dynamo's own is_compiling once Dynamo is loaded (True where that is missing, so a
    capture is kept out of a trace as before); False on PyTorch 1.x, which has no Dynamo."""
    if _IS_COMPILING is not None:
        return _IS_COMPILING()
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None:
        return False
    check = getattr(dynamo, "is_compiling", None)
    return True if check is None else check()


def _kept_out_of_dynamo():
    """CaptureSink._capture wrapped so that Dynamo never traces into it (its kernel launches, the
    lock, the step's buffers): built once Dynamo is loaded (torch.compile loads it; importing it
    ourselves would cost every script seconds), None before, and on PyTorch 1.x."""
    if not _eager_capture:
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is None:
            return None
        _eager_capture.append(dynamo.disable(CaptureSink._capture))
    return _eager_capture[0]


class CaptureSink:
    """capture() for the hooks (ModelHooks), and the step's statistics and gaps for the wire."""

    _dropped = ()
    _dropped_count = 0
    _shards = None  # ShardedStatistics where the model is sharded over a job's ranks
    _described = None  # _describe's texts by capture (made on first use: owners call no constructor)

    def capture(self, series, call, kind, index, tensor):
        """Computes one tensor's statistics now; `series` is a module index or a parameter name.
        Only while Dynamo compiles does the call go through its disable() wrapper (a few
        microseconds a capture that eager steps need not pay: torchvision imports Dynamo)."""
        if _compiling():
            eager = _kept_out_of_dynamo()
            if eager is not None:
                return eager(self, series, call, kind, index, tensor)
        if type(tensor) is _TENSOR:  # no DTensor, no wrapper: its memory read as it is (the common case)
            fields = self._describe(series, call, kind, index, tensor)[1]
            with self.lock:
                self._compute(fields, tensor, tensor)
            return None
        return self._capture(series, call, kind, index, tensor)

    def _capture(self, series, call, kind, index, tensor):
        # The values are only read: each backend detaches where it computes with torch ops.
        sharded = is_dtensor(tensor)
        t = tensor.detach() if sharded else tensor
        ident, fields = self._describe(series, call, kind, index, t.to_local() if sharded else t)
        with self.lock:
            if sharded:
                if self._shards is not None and self._shards.add(ident, fields, t):
                    return
                t = self._shard_alone(t)
            self._compute(fields, t, tensor)

    def capture_update(self, name, p, before):
        """A DTensor parameter's update, (p - before) / |before|, from its local shards: the
        whole parameter's norm comes with the step's collective (_sharded), never in this hook."""
        local = p.detach().to_local()
        ident, fields = self._describe(name, 0, "update", 0, local)
        with self.lock:
            if self._shards is not None and self._shards.add(ident, fields, p, update_before=before.to_local()):
                return
            self._compute(fields, relative_update(local, before.to_local()))

    def _describe(self, series, call, kind, index, t):
        """A capture's identity and its stats entry's fields (JSON text) for tensor t (kept: the
        same series at the same shape and dtype, step after step, is the same text)."""
        key = (series, call, kind, index, t.shape, t.dtype)
        described = self._described
        if described is None:
            described = self._described = {}
        known = described.get(key)
        if known is None:
            if len(described) > 100_000:  # shapes that change every step: start again
                described.clear()
            known = described[key] = self._describe_anew(series, call, kind, index, t)
        return known

    def _describe_anew(self, series, call, kind, index, t):
        where = '"module":%d' % series if isinstance(series, int) else '"param":' + json.dumps(series)
        dtype = DTYPES.get(t.dtype) or str(t.dtype).replace("torch.", "")
        ident = '%s,"call":%d,"kind":"%s","index":%d' % (where, call, kind, index)
        return ident, '%s,"shape":[%s],"dtype":"%s","numel":%d' % (
            ident, ",".join(map(str, t.shape)), dtype, t.numel())

    def _shard_alone(self, t):
        self._warn_once("shard alone", "a sharded tensor (DTensor) is recorded as each rank's shard alone: attach "
                        "after fully_shard or parallelize_module, with the process group initialised, to see "
                        "whole-tensor statistics (a Partial placement, a sum over ranks, is always per rank)")
        return t.to_local()

    def _compute(self, fields, t, origin=None):
        """Computes one tensor's row now, or records a gap saying why it cannot (under the lock);
        origin: the object the hook was given (the same one again is not read twice)."""
        if t.layout != torch.strided:
            self._drop(fields, "a %s tensor has no statistics HookScope computes" % t.layout)
            return
        try:
            if self._defer_all or not self._stats.add_host(fields, t, origin):
                self._stats.add(fields, t, defer=self._defer_all, origin=origin)
        except CapturedInGraph as exc:
            self._drop(fields, str(exc))
        except Exception as exc:  # never into the user's code: a gap that says why
            self._drop(fields, "%s: %s" % (type(exc).__name__, exc))
        if self._stats.fallbacks:
            self._say_fallbacks()

    def _finish_shards(self, attached):
        """The step's sharded captures made whole (_sharded: the step's one collective)."""
        if self._shards is None:
            return
        for fields, row in self._shards.finish(attached):
            self._stats.add_row(fields, row)
        for message in self._shards.notes:
            self._warn_once(("sharded", message), message)
        del self._shards.notes[:]

    def _say_backend(self):
        """Once, in the script's output: a slower statistics backend than this machine could
        run, and what it costs (`statistics_backend` says which runs in any case)."""
        slower = self._stats.slower_fallback()
        if slower:
            self._stats.fallbacks.append(slower)
        self._say_fallbacks()

    def _say_fallbacks(self):
        for message in self._stats.fallbacks:
            self._warn_once(("statistics", message), message)
        del self._stats.fallbacks[:]

    def _drop(self, fields, reason):
        if not self._dropped_count:
            self._dropped = []
        self._dropped_count += 1
        if len(self._dropped) < NAMED_DROPS:
            self._dropped.append((fields, reason))
        self._warn_once(("dropped", reason), "a capture was dropped (%s); it is recorded as a gap" % reason)

    def _take_dropped(self):
        """The step message's `dropped` field, or None when every capture was kept."""
        if not self._dropped_count:
            return None
        dropped = {"captures": self._dropped_count,
                   "series": [json.loads("{%s,\"reason\":%s}" % (fields, json.dumps(reason)))
                              for fields, reason in self._dropped]}
        self._dropped, self._dropped_count = [], 0
        return dropped

    def _send_statistics(self):
        if not len(self._stats):
            return
        bins = self._stats.bins
        control = getattr(self, "_control", None)
        binary = control is not None and control.binary and os.environ.get("HOOKSCOPE_STATS_WIRE") != "json"
        # Binary rows go as the bytes the kernels wrote; JSON needs their numbers.
        entries = self._stats.take_raw() if binary else self._stats.take()
        if self._conn.open and self._conn.unsent > BEHIND_BYTES:
            for fields, _ in entries:  # the viewer is this far behind: a gap, not more memory
                self._drop(fields, "the viewer was %d MiB behind" % (self._conn.unsent >> 20))
            return
        if binary:
            self._send_rows(entries, bins)
            return
        head = '{"type":"stats","step":%d,"captures":[' % self._step
        batch, size = [], 0
        for fields, row in entries:
            text = entry_text(fields, row, bins)
            if batch and (len(batch) >= STATS_PER_MESSAGE or size + len(text) > STATS_MESSAGE_BYTES):
                self._conn.queue(_wire.text_frame(head + ",".join(batch) + "]}"))
                batch, size = [], 0
            batch.append(text)
            size += len(text) + 1
        self._conn.queue(_wire.text_frame(head + ",".join(batch) + "]}"))

    def _send_rows(self, entries, bins):
        """The step's statistics as binary rows: each capture's fields declared once (a JSON
        `series` message), then float64 rows that name it by number (docs/protocol.md)."""
        ids = self.__dict__.setdefault("_series_ids", {})
        size = _ROW_ID.size + 8 * (HEADER + bins)
        per_frame = max(1, min(STATS_PER_MESSAGE, (_wire.MAX_JSON_BYTES - _wire.STATS_HEAD.size) // size))
        for first in range(0, len(entries), per_frame):
            chunk = entries[first:first + per_frame]
            declared, rows = [], [_wire.STATS_HEAD.pack(self._step, len(chunk), bins)]
            for fields, values in chunk:
                sid = ids.get(fields)
                if sid is None:
                    sid = ids[fields] = len(ids)
                    declared.append('{"id":%d,%s}' % (sid, fields))
                rows.append(_ROW_ID.pack(sid, 0))
                rows.append(values)  # the row's bytes (StepStatistics.take_raw)
            if declared:
                self._conn.queue(_wire.text_frame('{"type":"series","series":[%s]}' % ",".join(declared)))
            self._conn.queue(_wire.stats_frame(b"".join(rows)))
