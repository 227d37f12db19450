"""A captured tensor's statistics, computed in the training process on the tensor's device.

Each capture becomes one row (_stats_rows: its layout and meanings, docs/export-format.md).
Four backends compute the same row behind one seam (_backends; HOOKSCOPE_STATS_BACKEND=
auto|native|torch|triton|cuda forces one): HookScope's C++ kernel on CPU values, its CUDA kernels
(compiled by NVRTC at first use) and two Triton kernels on NVIDIA GPUs, torch ops anywhere.
On a GPU each capture's row is written into a device buffer allocated once; the step's end
copies every row to one pinned host buffer (allocated once) and waits once. No hook reads
anything back, so no hook makes the host wait for the device. A tensor captured again right
after it was read, at the same version (a container's output is its last child's, and the
gradient hooks on that output), is read once: the second row is a copy of the first, made on the
device. Only the last read is remembered: a weak reference for every read of a step was an
object the garbage collector tracked until the step's end (its collections at thousands of
captures a step took a sixth of the step). A small float32 CPU capture is copied as its hook runs
and read with the step's others in one call of HookScope's kernel when the rows are taken
(_Snapshots): the values as they were in the hook, as before.
"""

import array
import ctypes
import os
import threading
import weakref

import torch

from . import _backends
from ._cuda_stats import raw_stream_getter
from ._stats_rows import (  # noqa: F401 (the row's layout and the two host backends, as before)
    _CHUNK, E4M3, E5M2, F16_LARGEST, F16_SMALLEST, FIELDS, HEADER, PRECISION, bin_plan, flush_below,
    RAW_IS_WIRE, native_in_range, native_library, native_row, row_bytes, row_values, torch_row)
from ._wire import number_text

BACKENDS = _backends.NAMES


def requested_backend():
    """HOOKSCOPE_STATS_BACKEND, or "auto"; a value it cannot be is refused with what it can be."""
    name = os.environ.get("HOOKSCOPE_STATS_BACKEND", "auto").strip().lower() or "auto"
    if name not in BACKENDS:
        raise ValueError("HOOKSCOPE_STATS_BACKEND=%s: use one of %s" % (name, ", ".join(BACKENDS)))
    return name


def triton_statistics():
    """The Triton kernels' launcher, or (None, why) where Triton does not import."""
    return _backends.triton_launcher()


_OUT_OF_MEMORY = getattr(torch.cuda, "OutOfMemoryError", MemoryError)


class CapturedInGraph(RuntimeError):
    """A hook ran while its stream was being captured into a CUDA graph: nothing is launched."""


class BackendError(ValueError):
    """A backend that was asked for by name cannot compute a tensor's row."""


def _with_memory(t):
    """t as a tensor whose memory its values are in. A functional collective's result (an
    AsyncCollectiveTensor: what tensor parallel's RowwiseParallel returns) wraps the tensor the
    collective writes and holds no memory itself (its data pointer is 0): the wrapped tensor,
    waited for. Another tensor subclass with no memory of its own is refused, saying so: a
    kernel given its pointer would read address 0."""
    if type(t) is torch.Tensor or isinstance(t, torch.nn.Parameter):
        return t
    if type(t).__name__ == "AsyncCollectiveTensor" and callable(getattr(t, "wait", None)):
        t = t.wait()
    if t.numel() > 0 and t.data_ptr() == 0:
        raise ValueError("a %s holds no memory of its own that HookScope can read" % type(t).__name__)
    return t


def _version(t):
    """A tensor's version counter (it moves with every in-place change), or None (inference tensors
    have none)."""
    try:
        return t._version
    except (RuntimeError, AttributeError):
        return None


_raw_stream_of = raw_stream_getter()
_CPU = torch.device("cpu")
_FLOAT32 = torch.float32
SNAPSHOT_VALUES = 16384      # a float32 CPU capture of at most this many values is copied, read at the step's end
SNAPSHOT_BYTES = 4 << 20     # the copies' buffer (made at the first one): read at once when full
_ALIGN = 63                  # each copy starts on a 64-byte line


class _Snapshots:
    """Small float32 CPU captures copied one after another as their hooks ran, read together by
    HookScope's kernel (hookscope_stats_many) when the step's rows are taken or the buffer is
    full. Reading each one in its hook cost about 3 times the kernel's own work there (its code
    and tables evicted by PyTorch's between two hooks, PyTorch's by them); a copy is the values
    as they were in the hook, whatever changes the tensor in place after it."""

    __slots__ = ("lib", "buffer", "base", "used", "items", "places", "copies")

    def __init__(self, lib):
        self.lib = lib
        self.buffer = ctypes.create_string_buffer(SNAPSHOT_BYTES)
        self.base = ctypes.addressof(self.buffer)
        self.used = 0
        self.items = array.array("q")  # each copy's offset in bytes and number of values
        self.places = []               # each copy's entry (its index in StepStatistics._entries)
        self.copies = []               # (entry, entry whose row it is): the same tensor again

    def add(self, tensor, n, place):
        """Copies tensor's n values for the entry at `place`; False where the buffer is full."""
        used = self.used
        size = (n * 4 + _ALIGN) & ~_ALIGN
        if used + size > SNAPSHOT_BYTES:
            return False
        ctypes.memmove(self.base + used, tensor.data_ptr(), n * 4)
        self.items.append(used)
        self.items.append(n)
        self.places.append(place)
        self.used = used + size
        return True

    def values(self, k):
        """The k-th copy as a float32 tensor (its memory the buffer's)."""
        return torch.frombuffer(self.buffer, dtype=_FLOAT32, count=self.items[2 * k + 1],
                                offset=self.items[2 * k]) if self.items[2 * k + 1] else torch.empty(0)

    def clear(self):
        self.used = 0
        del self.items[:]
        self.places = []
        self.copies = []


def _snapshots_for(backend):
    """_Snapshots for the CPU backend `backend` where it is HookScope's kernel with its
    hookscope_stats_many (an older library has none: each capture is read in its hook)."""
    lib = getattr(backend, "lib", None)
    if not RAW_IS_WIRE or lib is None or not hasattr(lib, "hookscope_stats_many"):
        return None
    return _Snapshots(lib)


def _raw_stream(device):
    """The current stream's raw handle on a CUDA device (no torch.cuda.Stream object made)."""
    return _raw_stream_of(device.index if device.index is not None else torch.cuda.current_device())


def _host_rows(pinned, count, form):
    """The first `count` rows of a float64 host tensor in `form` (row_values or row_bytes): one
    copy of their bytes, cut per row (tolist() made each of a row's 271 floats alone: 19 us a row)."""
    if not RAW_IS_WIRE:
        rows = pinned[:count].tolist()
        return rows if form is row_values else [row_bytes(r) for r in rows]
    width = pinned.shape[1] * 8
    data = ctypes.string_at(pinned.data_ptr(), count * width)
    return [form(data[i:i + width]) for i in range(0, count * width, width)]


class StepStatistics:
    """One step's captures: their identifying fields (JSON text) and their rows.

    backend: "auto" (HOOKSCOPE_STATS_BACKEND by default), or one of BACKENDS to force. A forced
    backend that cannot take a tensor raises BackendError with strict=True; otherwise that
    tensor gets auto's choice and `fallbacks` says so once."""

    def __init__(self, bins=64, use_native=True, backend=None, strict=False):
        self.bins = bins
        self.fallbacks = []         # messages for the script's output: each said once
        if backend is None:
            try:
                backend = requested_backend()
            except ValueError as exc:  # a training run is not stopped for a misspelt variable
                self.fallbacks.append("%s; auto is used" % exc)
                backend = "auto"
        if backend not in BACKENDS:
            raise ValueError("backend %r: use one of %s" % (backend, ", ".join(BACKENDS)))
        self.requested = backend
        self.strict = strict
        self._backends = _backends.make_backends(use_native and backend != "torch")
        self._chosen = {}   # (device, shared) -> backend
        # (fields, row (list or bytes) or None, (device, row index) or None, backend name): tuples of
        # texts, bytes and numbers, which the garbage collector stops tracking (a step's thousands
        # of captures would otherwise bring its full collections sooner)
        self._entries = []
        self._device = {}   # device -> [rows tensor, count]
        self._pinned = {}   # device -> pinned host rows, grown by doubling, reused
        self._streams = {}  # device -> CUDA streams other than the default that wrote rows this step
        self._host_backend = None  # the backend add_host computes CPU rows with, once add has chosen it
        self._snapshots = None     # its small captures' copies (_Snapshots), False where it is not HookScope's kernel
        self._last = None   # the last read of the step: (weak reference, version, device, row index, host row)
        self.seen = set()   # device types captured on so far
        self._weighed = set()  # those slower_fallback has looked at
        self.shared_reads = 0  # this step's captures whose row was copied from the same tensor's
        self.rows_bytes = 0  # device memory held by the row buffers

    @property
    def backend(self):
        """Which backend computes CPU captures, and CUDA captures where this machine has a GPU."""
        text = "cpu: %s" % self.choose(torch.device("cpu"))
        if torch.cuda.is_available():
            text += "; cuda: %s" % self.choose(torch.device("cuda"))
        return text

    def slower_fallback(self):
        """A line for the script's output where auto's choice for a device type captured on is a
        slower fallback (torch ops where HookScope's C++ kernel is missing, Triton or torch ops
        where its CUDA kernels cannot run), with why and what it costs; else None."""
        if self.requested != "auto":
            return None
        notes = []
        for kind in sorted(self.seen - self._weighed):
            self._weighed.add(kind)
            device = torch.device(kind)
            chosen = self.backend_for(device)
            best = self._backends[_backends.PREFERENCE.get(kind, ("torch",))[0]]
            if chosen is not best and (kind, chosen.name) in _backends.COSTS:
                notes.append("%s, so %s compute %s statistics: an attached step costs %s" % (
                    best.unavailable(device), chosen.title, "CPU" if kind == "cpu" else "GPU",
                    _backends.COSTS[(kind, chosen.name)]))
        return "; ".join(notes) or None

    def choose(self, device):
        """The name of the backend that computes a tensor's row on `device`."""
        return self.backend_for(device).name

    def backend_for(self, device, shared=False):
        """The backend that computes a row on `device` (shared: a shard's, in a shared range)."""
        key = (device, shared)
        chosen = self._chosen.get(key)
        if chosen is None or chosen.failed:  # a failure is what makes a chosen backend unavailable
            chosen = self._chosen[key] = self._pick(device, shared)
        return chosen

    def _pick(self, device, shared):
        wanted = self.requested
        if wanted != "auto":
            backend = self._backends[wanted]
            why = backend.unavailable(device)
            if why is None and shared and not backend.shared_ranges:
                why = "it does not bin a shard between its whole tensor's edges"
            if why is None:
                return backend
            self._cannot(wanted, device, why)
        for name in _backends.PREFERENCE.get(device.type, ()):
            backend = self._backends[name]
            if backend.unavailable(device) is None and (backend.shared_ranges or not shared):
                return backend
        return self._backends["torch"]

    def _cannot(self, wanted, device, why):
        if why == self._backends[wanted].failed:
            return  # said when it failed
        message = "the %s statistics backend cannot compute a %s tensor's row: %s" % (wanted, device.type, why)
        if self.strict:
            raise BackendError(message)
        if message not in self.fallbacks:
            self.fallbacks.append(message)

    def set_bins(self, bins):
        if bins != self.bins and not self._entries:
            self.bins = bins
            self._device = {}
            self._pinned = {}
            self.rows_bytes = 0

    def __len__(self):
        return len(self._entries)

    def add(self, fields, tensor, defer=False, origin=None, history=True):
        """Computes `tensor`'s row now (the values as they are at this moment). origin: the
        object the hook was given (tensor may be its detached or local view): the same object
        at the same version later in the step is not read again. history: the series (named by
        `fields`) may be binned between its previous edges (one read on a GPU); False: this
        tensor's own finite min and max, always."""
        tensor = _with_memory(tensor)
        device = tensor.device
        kind = device.type  # a new string at each read of it
        cuda = kind == "cuda"
        if cuda and torch.cuda.is_current_stream_capturing():
            raise CapturedInGraph("captured into a CUDA graph: HookScope sees nothing on replay")
        if kind not in self.seen:
            self.seen.add(kind)
        backend = self.backend_for(device)
        origin = tensor if origin is None else origin
        version = _version(origin)
        known = self._last
        if known is not None and not (known[0]() is origin and known[1] == version and known[2] == device):
            known = None  # another tensor (the id reused), or this one changed in place since
        if kind == "cpu" and not defer and backend.host_rows:
            if backend is not self._host_backend:  # add_host takes the next ones (while it has not failed)
                self._read_snapshots()
                self._host_backend, self._snapshots = backend, None  # made at add_host's first copy
            if known is not None and known[4] is not None:  # read already (or copied): the same row
                self._share(fields, known[4])
                return
            row = backend.host_row(tensor, self.bins, raw=True)
            self._remember(origin, version, device, None, row)
            self._entries.append((fields, row, None, backend.name))
            return
        slot = self._device.get(device)
        if slot is None or slot[1] == slot[0].shape[0]:
            slot = self._grow(device, slot)
        index = slot[1]
        width = HEADER + self.bins
        if cuda:
            stream = _raw_stream(device)
            if stream != 0:  # a side stream: the tensor's memory kept until the kernels are done there
                current = torch.cuda.current_stream(device)
                tensor.record_stream(current)
                slot[0].record_stream(current)
                self._streams.setdefault(device, set()).add(current)
        if known is not None and known[3] is not None:  # read already: its row copied on the device
            backend.copy_row(slot[0], known[3], index)
            self.shared_reads += 1
            self._entries.append((fields, None, (device, index), "shared"))
            slot[1] += 1
            return
        name = self._compute(backend, tensor, slot[0], index, fields if history else None)
        self._remember(origin, version, device, index, None)
        self._entries.append((fields, None, (device, index), name))
        slot[1] += 1

    def add_host(self, fields, tensor, origin=None):
        """add(fields, tensor) in fewer steps where the row is computed on the host (a plain CPU
        tensor, the CPU's backend chosen by add's first capture): a capture's common case. The
        row is computed now, or, for a small float32 tensor and HookScope's kernel, from a copy
        of its values made now, with the step's others when the rows are taken. False where it
        does not apply: add then takes it."""
        backend = self._host_backend
        if (backend is None or backend.failed is not None or type(tensor) is not torch.Tensor
                or not tensor.is_cpu or (origin is not None and origin is not tensor)):
            return False
        try:
            version = tensor._version
        except RuntimeError:  # an inference tensor: no version (add reads it every time)
            return False
        known = self._last
        if known is not None and known[0]() is tensor and known[1] == version:
            if known[4] is None:  # read into a device row buffer: add copies that row
                return False
            self._share(fields, known[4])
            return True
        snapshots = self._snapshots
        if snapshots is None:
            snapshots = self._snapshots = _snapshots_for(backend) or False
        if snapshots and tensor.dtype is _FLOAT32 and tensor.is_contiguous():
            n = tensor.numel()
            if n <= SNAPSHOT_VALUES:
                place = len(self._entries)
                if not snapshots.add(tensor, n, place):
                    self._read_snapshots()  # the buffer is full: its copies read now, to make room
                    snapshots.add(tensor, n, place)
                self._last = (weakref.ref(tensor), version, _CPU, None, place)
                self._entries.append((fields, None, None, backend.name))
                return True
        row = backend.host_row(tensor, self.bins, raw=True)
        self._last = (weakref.ref(tensor), version, _CPU, None, row)
        self._entries.append((fields, row, None, backend.name))
        return True

    def _share(self, fields, row):
        """An entry whose row is that of the same tensor read just before: `row` is its host row,
        or the index of its copy's entry (_Snapshots), whose row it takes once that is read."""
        self.shared_reads += 1
        if type(row) is int:
            source, row = row, self._entries[row][1]
            if row is None:
                self._snapshots.copies.append((len(self._entries), source))
        self._entries.append((fields, row if row is None or isinstance(row, bytes) else list(row), None, "shared"))

    def _read_snapshots(self):
        """The rows of the captures copied so far (_Snapshots), into their entries: one call of
        the kernel. A copy it refuses (it takes any float32 values: never seen) gets the torch
        ops' row of the same copy."""
        snapshots = self._snapshots
        if not snapshots or not snapshots.places:  # a copy's shared entries wait for it (add_host)
            return
        count, bins = len(snapshots.places), self.bins
        width = HEADER + bins
        out = (ctypes.c_double * (count * width))()
        status = (ctypes.c_int * count)()
        refused = snapshots.lib.hookscope_stats_many(snapshots.base, snapshots.items.buffer_info()[0], count, bins,
                                                     1, out, status)
        data, size = bytes(out), width * 8
        entries = self._entries
        for k, place in enumerate(snapshots.places):
            fields, _, _, name = entries[place]
            if refused and (refused < 0 or status[k] != 0):
                row, name = self._backends["torch"].host_row(snapshots.values(k), bins, raw=True), "torch"
            else:
                row = data[k * size:(k + 1) * size]
            entries[place] = (fields, row, None, name)
        for place, source in snapshots.copies:
            entries[place] = (entries[place][0], entries[source][1], None, "shared")
        snapshots.clear()

    def _remember(self, origin, version, device, index, row):
        """That `origin` at `version` was read this step: its row at `index` of the device rows,
        or `row` (a host list)."""
        if version is not None:
            self._last = (weakref.ref(origin), version, device, index, row)

    def _grow(self, device, slot):
        capacity = 256 if slot is None else 2 * slot[0].shape[0]
        rows = torch.empty((capacity, HEADER + self.bins), dtype=torch.float64, device=device)
        if slot is not None:
            rows[:slot[1]].copy_(slot[0][:slot[1]])
        self.rows_bytes += rows.numel() * 8 - (slot[0].numel() * 8 if slot is not None else 0)
        slot = self._device[device] = [rows, 0 if slot is None else slot[1]]
        return slot

    def _compute(self, backend, tensor, rows, index, series):
        """Writes the row with `backend`; where it fails (not for lack of memory), it is not used
        again and the next backend computes the row. Returns the name of the one that did."""
        try:
            backend.write_row(tensor, self.bins, rows, index, series)
            return backend.name
        except Exception as exc:
            if self.strict or isinstance(exc, _OUT_OF_MEMORY) or backend is self._backends["torch"]:
                raise  # out of memory: this capture is a gap; the backend stays for the next one
            backend.failed = "%s failed (%s: %s)" % (backend.title, type(exc).__name__, exc)
            following = self.backend_for(tensor.device)
            self.fallbacks.append("%s; %s compute the statistics from now on" % (backend.failed, following.title))
            return self._compute(following, tensor, rows, index, series)

    def add_row(self, fields, row, backend="sharded"):
        """An entry whose row was computed elsewhere (a shard's, at the step's end: _sharded)."""
        self._entries.append((fields, row, None, backend))

    def take(self, with_backend=False):
        """Every entry of the step as (fields, row), or (fields, row, backend), a row being a list
        of floats; device rows come back with one copy and one wait per device."""
        return self._take(with_backend, row_values)

    def take_raw(self):
        """Every entry of the step as (fields, row bytes): the wire's little-endian float64 values
        (_stats_rows.row_bytes), made floats nowhere on the way where the machine is little-endian."""
        return self._take(False, row_bytes)

    def _take(self, with_backend, form):
        self._read_snapshots()
        host = {}
        for device, (rows, count) in self._device.items():
            if count == 0:
                continue
            pinned = self._pinned.get(device)
            if pinned is None or pinned.shape[0] < count:
                pinned = torch.empty(rows.shape, dtype=torch.float64,
                                     pin_memory=device.type == "cuda" and torch.cuda.is_available())
                self._pinned[device] = pinned
            if device.type == "cuda":
                current = torch.cuda.current_stream(device)
                for stream in self._streams.pop(device, ()):
                    if stream != current:
                        current.wait_stream(stream)
            pinned[:count].copy_(rows[:count], non_blocking=True)
            if device.type == "cuda" and self._backends["cuda"].kernels_loaded():
                self._backends["cuda"].queue_reads(device)
            if device.type == "cuda":
                torch.cuda.current_stream(device).synchronize()
            host[device] = _host_rows(pinned, count, form)
        out = []
        for fields, row, place, backend in self._entries:
            row = form(row) if place is None else host[place[0]][place[1]]
            out.append((fields, row, backend) if with_backend else (fields, row))
        self._entries = []
        self._last = None
        for slot in self._device.values():
            slot[1] = 0
        return out

    def take_reads(self):
        """This step's reads: {"one": captures read once, "two": read twice, "shared": copied from
        the same tensor's row}; one and two only where the CUDA kernels ran; None for nothing."""
        cuda = self._backends["cuda"]
        shared, self.shared_reads = self.shared_reads, 0
        if cuda.kernels_loaded():
            one, two = cuda.reads()
            return {"one": one, "two": two, "shared": shared} if one or two or shared else None
        return {"shared": shared} if shared else None


_public = {}
_public_lock = threading.Lock()


def tensor_statistics(tensor, bins=64, backend="auto"):
    """What HookScope records for `tensor` (a hooked capture's row, through the same code) as a
    dict: min, max, mean, std (n-1), l2, zeros (the fraction of exact zeros), nan and inf
    (counts), lo and hi (the histogram's edges), hist (`bins` counts of the finite values),
    amax (the largest finite |value|), f16_overflow, f16_underflow, e4m3_underflow and
    e5m2_underflow (counts of the finite values those formats would lose: docs/export-format.md)
    and backend ("native", "torch", "triton" or "cuda": which one computed it).

    Min, max and the moments are over the finite values (NaN where there is none). backend
    "auto" picks as a hooked capture does; a named one that cannot take the tensor raises
    ValueError saying why. On a GPU this waits for the device (it returns numbers)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("tensor_statistics needs a torch.Tensor, not %s" % type(tensor).__name__)
    if not isinstance(bins, int) or not 1 <= bins <= 4096:
        raise ValueError("bins must be an integer from 1 to 4096, not %r" % (bins,))
    if tensor.layout != torch.strided:
        raise ValueError("tensor_statistics needs a dense (strided) tensor, not a %s one" % tensor.layout)
    with _public_lock:
        step = _public.get((bins, backend))
        if step is None:
            step = _public[(bins, backend)] = StepStatistics(bins=bins, backend=backend, strict=True)
        try:
            step.add("", tensor.detach(), history=False)
        finally:
            taken = step.take(with_backend=True)
    _, row, used = taken[0]
    out = {name: row[i] for i, name in FIELDS}
    out.update(nan=int(row[6]), inf=int(row[7]), hist=[int(v) for v in row[HEADER:HEADER + bins]], backend=used)
    out.update((name, int(row[i])) for i, name in PRECISION)
    return out


def entry_text(fields, row, bins):
    """A `stats` entry as JSON text (written by hand: json.dumps costs more than the rest)."""
    head = ",".join('"%s":%s' % (name, number_text(row[i])) for i, name in FIELDS)
    counts = ",".join('"%s":%d' % (name, int(row[i])) for i, name in PRECISION)
    hist = ",".join(str(int(v)) for v in row[HEADER:HEADER + bins])
    return '{%s,%s,"nan":%d,"inf":%d,%s,"hist":[%s]}' % (fields, head, int(row[6]), int(row[7]), counts, hist)
