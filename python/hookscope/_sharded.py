"""Whole-tensor statistics of sharded tensors (a DTensor: FSDP2's fully_shard, tensor parallel)
without gathering them (docs/distributed.md).

A sharded capture keeps a copy of this rank's local shard until the step's end (a parameter
changes in the optimizer step after it was captured). At the step's end every rank:

1. computes each shard's own row, whose finite min and max it needs;
2. takes part in one all-gather of a small [1 + slots, 4] float64 buffer on the job's default
   process group: per capture its shard's min and max, the capture's identity (so that every
   rank checks that all of them captured the same tensors in the same order) and, for an
   update, the shard's share of the parameter's squared norm; a header says whether the rank is
   attached and how many slots it needed;
3. computes each shard's row again between the whole tensor's edges, with the fp8 counts scaled
   by the whole tensor's amax, so that the shards' rows add up to the whole tensor's row, and
   sends it with a `whole` field (this shard's part, how many parts, the whole shape).

The viewer adds the parts up (core/store ShardAssembly): each rank's row is then both the
per-rank view (the shard's own min, max, moments and counts) and its share of the whole, so
no second collective (a reduce of every row to one rank) and no rank-0 bottleneck is needed.

The collective runs at the step's end only, never inside a hook, and every rank runs it at
every step once the model is sharded, attached or not: a rank that is not attached (no viewer,
or detached) says so in the header, and every rank then stops the collective from that step on,
so no rank ever waits in it for one that will not come. Every rank must call `hs.step()` at
every step (as training loops do), and `hs.close()` on all ranks or none.
"""

import math
import zlib

import torch

from ._stats import HEADER

COLUMNS = 4          # per slot: min, max, identity, squared norm (updates)
FIRST_SLOTS = 64     # slots of the first step; grown to what the ranks need, for all at once
_NO_SLOT = -1.0


_dtensor = []


def dtensor_type():
    """torch's DTensor class, or None where this PyTorch has none."""
    if not _dtensor:
        found = None
        for where in ("torch.distributed.tensor", "torch.distributed._tensor"):
            try:
                found = __import__(where, fromlist=["DTensor"]).DTensor
                break
            except (ImportError, AttributeError):
                continue
        _dtensor.append(found)
    return _dtensor[0]


def is_dtensor(t):
    """Whether t is a DTensor (the class name first: no import in every hook of a plain run)."""
    return type(t).__name__ == "DTensor" and dtensor_type() is not None and isinstance(t, dtensor_type())


def model_is_sharded(model):
    """Whether the model holds DTensor parameters (fully_shard, parallelize_module)."""
    return any(is_dtensor(p) for p in model.parameters())


def shard_part(t):
    """This rank's place in DTensor t's whole: (part, parts) where its local shard is one of
    `parts` pieces whose rows add up to the whole; (None, parts) for a replica of a piece another
    rank counts; "partial" where the whole is a sum over ranks (no statistics of a sum's
    addends add up to it)."""
    mesh = t.device_mesh
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        return None, 0
    part, parts, replica = 0, 1, False
    for dim, placement in enumerate(t.placements):
        size = mesh.size(dim)
        if placement.is_shard():
            part, parts = part * size + coordinate[dim], parts * size
        elif placement.is_replicate():
            replica = replica or coordinate[dim] != 0
        else:
            return "partial"
    return (None if replica else part), parts


class _Slot:
    __slots__ = ("ident", "fields", "values", "whole", "before_squares", "row")

    def __init__(self, ident, fields, values, whole, before_squares=None):
        self.ident = float(zlib.crc32(ident.encode()))
        self.fields = fields
        self.values = values                  # the shard's copy, or an update's difference
        self.whole = whole                    # (part or None, parts, whole shape)
        self.before_squares = before_squares  # an update: |before|^2 of the shard
        self.row = None


class ShardedStatistics:
    """A step's sharded captures and the collective that makes them whole."""

    def __init__(self, stats):
        self._stats = stats       # the owner's StepStatistics: bins, backend choice, row entries
        self.live = True          # the collective runs at every step's end
        self.capacity = FIRST_SLOTS
        self._slots = []
        self.notes = []           # messages for the script's output, said once each

    def add(self, ident, fields, t, update_before=None):
        """Keeps DTensor t's local shard (or an update's: t is then the parameter after its
        step and update_before its local shard before) for the step's end; False where t's
        whole cannot be made (a Partial placement), so that the caller records the shard alone."""
        place = shard_part(t)
        if place == "partial":
            return False
        local = t.to_local().detach()
        whole = (place[0], place[1], list(t.shape))
        if update_before is None:
            self._slots.append(_Slot(ident, fields, local.clone(), whole))
            return True
        squares = update_before.to(torch.float64).square().sum()
        self._slots.append(_Slot(ident, fields, local - update_before, whole, squares))
        return True

    # ---------------------------------------------------------------- the step's end

    def finish(self, attached):
        """The step's collective (every rank, every step while live) and its rows: a list of
        (fields, row) entries, each row a list of floats."""
        slots, self._slots = self._slots, []
        if not self.live:
            return [self._alone(s) for s in slots]
        try:
            gathered = self._gather(slots, attached)
        except Exception as exc:  # a broken group: the shards alone from now on
            self.live = False
            self.notes.append("whole-tensor statistics of sharded tensors are off: the step's all-gather "
                              "failed (%s: %s); each rank's shard is recorded alone" % (type(exc).__name__, exc))
            return [self._alone(s) for s in slots]
        if not attached:
            return []
        return [self._whole(slot, gathered[:, 1 + i] if self.live and i < self.capacity else None)
                for i, slot in enumerate(slots)]

    def _gather(self, slots, attached):
        import torch.distributed as dist
        rows = torch.zeros((1 + self.capacity, COLUMNS), dtype=torch.float64)
        rows[0, 0] = 1.0 if attached else 0.0
        rows[0, 1] = float(len(slots))
        rows[1:, 2] = _NO_SLOT
        for i, slot in enumerate(slots[:self.capacity]):
            rows[1 + i, 0:2] = self._first_pass(slot)
            rows[1 + i, 2] = slot.ident
            if slot.before_squares is not None and slot.whole[0] is not None:  # a replica's counted once
                rows[1 + i, 3] = slot.before_squares.cpu()
        device = torch.device("cpu")
        if "gloo" not in str(dist.get_backend()) and torch.cuda.is_available():
            device = torch.device("cuda", torch.cuda.current_device())  # NCCL alone: its buffers on a GPU
        parts = [torch.empty_like(rows, device=device) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, rows.to(device))
        gathered = torch.stack(parts).cpu()
        self.capacity = max(self.capacity, int(gathered[:, 0, 1].max()))
        if bool((gathered[:, 0, 0] == 0).any()):
            self.live = False
            if attached:
                self.notes.append("whole-tensor statistics of sharded tensors are off: a rank of the job is "
                                  "not attached to HookScope; each rank's shard is recorded alone")
        return gathered

    def _whole(self, slot, column):
        """A slot's entry given every rank's [min, max, identity, squares] for it (None: none)."""
        if column is None or not bool((column[:, 2] == slot.ident).all()):
            if column is not None and not any("different sharded" in n for n in self.notes):
                self.notes.append("ranks captured different sharded tensors at one step (the hooks changed "
                                  "between their steps): those shards are recorded alone at that step")
            return self._alone(slot)
        lo, hi = float(column[:, 0].min()), float(column[:, 1].max())
        if slot.before_squares is not None:  # an update: relative to the whole parameter's norm
            norm = math.sqrt(float(column[:, 3].sum())) or 1.0
            slot.values, slot.row = slot.values / norm, None
            if lo <= hi:  # dividing by a positive number keeps the order: the quotients' min and max
                lo, hi = (torch.tensor([lo, hi], dtype=slot.values.dtype) / norm).tolist()
        part, parts, shape = slot.whole
        fields = slot.fields
        if part is not None:  # a replica's shard is counted once, by the rank at its first coordinate
            fields += ',"whole":{"part":%d,"parts":%d,"shape":[%s]}' % (part, parts, ",".join(map(str, shape)))
        return fields, self._row(slot, _shared_range(lo, hi))

    def _alone(self, slot):
        """A shard recorded alone: its own row (an update relative to the shard's own norm)."""
        if slot.before_squares is not None:
            norm = math.sqrt(float(slot.before_squares)) or 1.0
            slot.values, slot.row = slot.values / norm, None
        return slot.fields, self._row(slot, None)

    # ---------------------------------------------------------------- rows

    def _first_pass(self, slot):
        """The shard's own row (kept: it is the final one where no range is shared); its finite
        min and max as a [2] float64 tensor, +inf and -inf where it has no finite value."""
        slot.row = self._row(slot, None)
        lo, hi = slot.row[0], slot.row[1]
        if lo != lo:
            return torch.tensor([math.inf, -math.inf], dtype=torch.float64)
        return torch.tensor([lo, hi], dtype=torch.float64)

    def _row(self, slot, shared):
        """The slot's row as a list: the shard's own (shared None), or between the whole's
        edges (shared: low, high, amax) by the backend a capture on its device gets."""
        if shared is None and slot.row is not None:
            return slot.row
        values, stats = slot.values, self._stats
        backend = stats.backend_for(values.device, shared=shared is not None)
        if values.device.type == "cpu":
            return backend.host_row(values, stats.bins, shared)
        row = torch.empty(HEADER + stats.bins, dtype=torch.float64, device=values.device)
        backend.row(values, stats.bins, row, shared)
        return row.tolist()


def _shared_range(lo, hi):
    """The whole tensor's histogram edges and amax from its finite min and max, as every
    backend makes them of one tensor (widened around a single value); None without a finite value."""
    if not lo <= hi:
        return None
    amax = max(abs(lo), abs(hi))
    if hi <= lo:
        pad = max(0.5, abs(lo) * 1e-6)
        lo, hi = lo - pad, hi + pad
    return lo, hi, amax
