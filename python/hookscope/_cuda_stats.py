"""A capture's row on an NVIDIA GPU by HookScope's CUDA kernels (stats_kernels.cu), compiled at
first use by NVRTC and launched through the driver API: no build step, no compiler on the
user's machine, no new dependency (libnvrtc ships with every PyTorch CUDA wheel, libcuda with
the driver).

The binary is cached on disk per (architecture, source hash, NVRTC version) in
$HOOKSCOPE_CACHE_DIR (default ~/.cache/hookscope/cuda). Each launch's argument array is built
once per (device, kernel); a capture writes only the pointers and the length into it and calls
cuLaunchKernel on the current stream's raw handle. A series (a capture's identity) keeps a slot
on the device: its previous range, amax and mean, from which the read bins in one pass; where
that did not hold it reads again (stats_kernels.cu). One launch a capture: a small tensor's is one
block, a larger one's a cooperative launch whose blocks wait for the verdict and read again in
place; where the device has no cooperative launch (or the grid would not be resident at once),
the read and a re-read kernel that returns at once unless needed. Nothing is read back in a hook.
"""

import ctypes
import ctypes.util
import glob
import hashlib
import os
import sys
import threading

import torch

THREADS = 256
BLOCKS_PER_SM = 3                                             # resident at once: __launch_bounds__(256, 3)
REREAD_BLOCKS_PER_SM = 2                                      # the re-read's: (256, 2)
MAX_BLOCKS = 2048
SMALL = 65536                                                 # values or fewer: one block, one launch
MAX_BINS = 4096
SLOT_WORDS = 8
SLOT_GROUP = 5                                                # HS_SLOT_GROUP: the series' drift group
READ_COUNTERS = 5                                             # HS_READS_ONE, HS_READS_TWO
SCRATCH_WORDS = 8 + MAX_BINS + MAX_BLOCKS * 16 + 2 * 8192 + 4   # HS_SCRATCH_WORDS
SHARED_FOLD = 32 * 16 * 8 + 16                                # the fold's room and a flag
HISTOGRAM_SHARED = 40 * 1024                                  # bytes for the per-warp histograms
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stats_kernels.cu")

# torch dtype -> (kernel suffix, bytes a value)
KERNELS = {
    torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32", torch.float64: "f64",
    torch.int8: "i8", torch.uint8: "u8", torch.bool: "u8", torch.int16: "i16", torch.int32: "i32",
    torch.int64: "i64",
}
_NVRTC_SUCCESS = 0
_COOPERATIVE_LAUNCH = 95                                      # CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH


class Unavailable(RuntimeError):
    """The CUDA kernels cannot run here (no NVRTC, no driver, a compile that failed): why."""


def _nvrtc_candidates():
    named = os.environ.get("HOOKSCOPE_NVRTC")
    if named:
        yield named
    for base in sys.path:
        nvidia = os.path.join(base, "nvidia")
        if os.path.isdir(nvidia):  # CUDA 13 wheels (nvidia/cu13/lib), then CUDA 12's (nvidia/cuda_nvrtc/lib)
            yield from sorted(glob.glob(os.path.join(nvidia, "cu*", "lib", "libnvrtc.so*")), reverse=True)
            yield from sorted(glob.glob(os.path.join(nvidia, "cuda_nvrtc", "lib", "libnvrtc.so*")), reverse=True)
    found = ctypes.util.find_library("nvrtc")
    if found:
        yield found
    yield "libnvrtc.so"


def compile_options(capability):
    """NVRTC's options for the kernels (no flush to zero: subnormals are values)."""
    return [b"--gpu-architecture=sm_%d" % capability, b"-std=c++17", b"--ftz=false", b"--prec-div=true",
            b"--prec-sqrt=true"]


class Nvrtc:
    """libnvrtc through ctypes: CUDA C to a cubin for one architecture."""

    def __init__(self, path=None):
        tried = []
        for candidate in ([path] if path else _nvrtc_candidates()):
            if "libnvrtc-builtins" in candidate or ".alt." in candidate:
                continue
            try:
                self.lib = ctypes.CDLL(candidate)
                self.path = candidate
                break
            except OSError as exc:
                tried.append("%s (%s)" % (candidate, exc))
        else:
            raise Unavailable("NVRTC (libnvrtc) was not found: %s" % ("; ".join(tried) or "nothing to try"))
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        self.version = (major.value, minor.value)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def architectures(self):
        """The sm_XX numbers this NVRTC compiles for."""
        count = ctypes.c_int()
        if self.lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)) != _NVRTC_SUCCESS:
            return []
        archs = (ctypes.c_int * count.value)()
        self.lib.nvrtcGetSupportedArchs(archs)
        return list(archs)

    def _check(self, status, what):
        if status != _NVRTC_SUCCESS:
            raise Unavailable("NVRTC %s failed: %s" % (what, self.lib.nvrtcGetErrorString(status).decode()))

    def compile(self, source, capability):
        """The cubin of `source` for sm_<capability> (bytes); Unavailable with NVRTC's log."""
        program = ctypes.c_void_p()
        self._check(self.lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), b"stats_kernels.cu",
                                                0, None, None), "nvrtcCreateProgram")
        try:
            options = compile_options(capability)
            array = (ctypes.c_char_p * len(options))(*options)
            status = self.lib.nvrtcCompileProgram(program, len(options), array)
            if status != _NVRTC_SUCCESS:
                size = ctypes.c_size_t()
                self.lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
                log = ctypes.create_string_buffer(size.value)
                self.lib.nvrtcGetProgramLog(program, log)
                raise Unavailable("NVRTC could not compile stats_kernels.cu for sm_%d: %s"
                                  % (capability, log.value.decode(errors="replace").strip()))
            size = ctypes.c_size_t()
            self._check(self.lib.nvrtcGetCUBINSize(program, ctypes.byref(size)), "nvrtcGetCUBINSize")
            cubin = ctypes.create_string_buffer(size.value)
            self._check(self.lib.nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN")
            return cubin.raw
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(program))


def cache_dir():
    return os.environ.get("HOOKSCOPE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "hookscope", "cuda")


def cubin_for(capability, nvrtc=None, source_path=SOURCE):
    """The kernels' cubin for sm_<capability>: from the disk cache, else compiled and cached."""
    with open(source_path, encoding="utf-8") as f:
        source = f.read()
    nvrtc = nvrtc or Nvrtc()
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    name = "stats-sm%d-%s-nvrtc%d.%d.cubin" % (capability, digest, nvrtc.version[0], nvrtc.version[1])
    path = os.path.join(cache_dir(), name)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        pass
    cubin = nvrtc.compile(source, capability)
    try:  # a cache that cannot be written costs a compile next time, nothing more
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = "%s.%d.tmp" % (path, os.getpid())
        with open(temporary, "wb") as f:
            f.write(cubin)
        os.replace(temporary, path)
    except OSError:
        pass
    return cubin


class Driver:
    """The few driver API calls the kernels need (libcuda through ctypes)."""

    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise Unavailable("the CUDA driver library (libcuda.so.1) does not load: %s" % exc)
        self.lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        launch = self.lib.cuLaunchKernel
        launch.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                           ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_void_p]
        launch.restype = ctypes.c_int
        self.launch = launch
        # A launch whose blocks are all resident at once (CUDA 9 and later), or None.
        cooperative = getattr(self.lib, "cuLaunchCooperativeKernel", None)
        if cooperative is not None:
            cooperative.argtypes = launch.argtypes[:-1]
            cooperative.restype = ctypes.c_int
        self.launch_cooperative = cooperative
        copy = self.lib.cuMemcpyDtoDAsync_v2
        copy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
        copy.restype = ctypes.c_int
        self.copy = copy

    def check(self, status, what):
        if status != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(status, ctypes.byref(text))
            raise RuntimeError("%s failed: %s" % (what, (text.value or b"error %d" % status).decode()))

    def cooperative(self, index):
        """Whether device `index` (an ordinal, as torch counts them) takes cooperative launches."""
        if self.launch_cooperative is None:
            return False
        device, value = ctypes.c_int(), ctypes.c_int()
        if self.lib.cuDeviceGet(ctypes.byref(device), index) != 0:
            return False
        status = self.lib.cuDeviceGetAttribute(ctypes.byref(value), _COOPERATIVE_LAUNCH, device)
        return status == 0 and value.value == 1

    def resident(self, function, threads, shared):
        """How many blocks of `function` a multiprocessor holds at once (0 where the driver cannot say)."""
        blocks = ctypes.c_int()
        status = self.lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(blocks), ctypes.c_void_p(function), ctypes.c_int(threads), ctypes.c_size_t(shared))
        return blocks.value if status == 0 else 0

    def functions(self, cubin, names):
        """{name: CUfunction} from a cubin loaded into the current context."""
        module = ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData")
        out = {}
        for name in names:
            function = ctypes.c_void_p()
            self.check(self.lib.cuModuleGetFunction(ctypes.byref(function), module, name.encode()),
                       "cuModuleGetFunction(%s)" % name)
            out[name] = function.value
        return out


class _Arguments:
    """The values a capture's launches take, as ctypes objects made once."""

    def __init__(self):
        self.x, self.n, self.bins, self.copies = ctypes.c_uint64(), ctypes.c_int64(), ctypes.c_int(), ctypes.c_int()
        self.row, self.slot, self.scratch = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
        self.wait = ctypes.c_int()  # the read reads again itself (one launch), or leaves it to the re-read


class _Launch:
    """One kernel's argument array, built once over shared _Arguments: a capture writes only the
    values it changes, once for both kernels."""

    def __init__(self, driver, function, with_slot, arguments=None):
        self.driver = driver
        self.function = function
        a = self.arguments = arguments or _Arguments()
        args = [a.x, a.n, a.bins, a.copies, a.row] + ([a.slot, a.scratch, a.wait] if with_slot else [a.scratch])
        self.params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        self.address = ctypes.cast(self.params, ctypes.c_void_p).value

    def __call__(self, blocks, shared, stream, cooperative=False):
        if cooperative:
            status = self.driver.launch_cooperative(self.function, blocks, 1, 1, THREADS, 1, 1, shared, stream,
                                                    self.address)
            what = "cuLaunchCooperativeKernel"
        else:
            status = self.driver.launch(self.function, blocks, 1, 1, THREADS, 1, 1, shared, stream, self.address, None)
            what = "cuLaunchKernel"
        if status:
            self.driver.check(status, what)


def launch_pair(driver, read, reread):
    """The read's and the re-read's launches over one set of argument values."""
    first = _Launch(driver, read, True)
    return first, _Launch(driver, reread, False, first.arguments)


def raw_stream_getter():
    """device index -> the current stream's raw handle, without a torch.cuda.Stream object."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream


class _Device:
    """What one device holds: its kernels' launches, scratch per stream, the series' slots."""

    def __init__(self, backend, device):
        self.device = device
        index = device.index if device.index is not None else torch.cuda.current_device()
        self.index = index
        with torch.cuda.device(index):
            torch.empty(1, device=device)  # the primary context current on this thread
            major, minor = torch.cuda.get_device_capability(index)
            capability = backend.capability_for(major * 10 + minor)
            names = ["hs_%s_%s" % (kind, suffix) for suffix in set(KERNELS.values()) for kind in ("read", "reread")]
            functions = backend.driver.functions(cubin_for(capability, backend.nvrtc), names)
        self.sms = torch.cuda.get_device_properties(index).multi_processor_count
        self.cooperative = backend.driver.cooperative(index)
        self.resident = {}  # (suffix, shared bytes) -> the read's blocks resident at once on the device
        self.launches = {suffix: launch_pair(backend.driver, functions["hs_read_" + suffix],
                                             functions["hs_reread_" + suffix])
                         for suffix in set(KERNELS.values())}
        self.scratch = {}   # raw stream -> int64 scratch tensor (zeroed once; the kernels leave it so)
        self.counts = {}    # raw stream -> pinned int64 [2]: its scratch's read counters, copied at a step's end
        self.slots = torch.zeros((64, SLOT_WORDS), dtype=torch.float64, device=device)
        self.series = {}    # series key -> slot index

    def scratch_for(self, stream):
        held = self.scratch.get(stream)
        if held is None:
            held = self.scratch[stream] = torch.zeros(SCRATCH_WORDS, dtype=torch.int64, device=self.device)
        return held.data_ptr()

    def queue_counts(self):
        """Copies each stream's read counters (scratch words 5, 6: one read, two reads) to pinned
        memory without waiting: valid after the step's one wait."""
        for stream, scratch in self.scratch.items():
            held = self.counts.get(stream)
            if held is None:
                held = self.counts[stream] = torch.zeros(2, dtype=torch.int64, pin_memory=True)
            held.copy_(scratch[READ_COUNTERS:READ_COUNTERS + 2], non_blocking=True)

    def resident_blocks(self, suffix, shared):
        """How many of the read's blocks the device holds at once with `shared` bytes each."""
        held = self.resident.get((suffix, shared))
        if held is None:
            first = self.launches[suffix][0]
            held = self.resident[(suffix, shared)] = first.driver.resident(first.function, THREADS, shared) * self.sms
        return held

    def slot_for(self, key):
        """The device address of a series' slot (allocated zero: "no forecast" on its first capture,
        its drift group set: a step's activations, and its gradients, grow or shrink together)."""
        index = self.series.get(key)
        if index is None:
            index = self.series[key] = len(self.series)
            if index == self.slots.shape[0]:
                grown = torch.zeros((2 * index, SLOT_WORDS), dtype=torch.float64, device=self.device)
                grown[:index].copy_(self.slots)
                self.slots = grown
            group = drift_group(key)
            if group:
                self.slots[index, SLOT_GROUP] = float(group)  # a fill on the stream, no wait
        return self.slots.data_ptr() + index * SLOT_WORDS * 8


def drift_group(key):
    """The drift group of a series named by its capture's fields (_capture: '"kind":"..."'): 1 for
    activations and inputs, 2 for gradients, 0 (none) for anything else."""
    if not isinstance(key, str):
        return 0
    if '"kind":"gradient"' in key:
        return 2
    return 1 if '"kind":"activation"' in key or '"kind":"input"' in key else 0


def histogram_copies(bins):
    """How many per-warp histograms fit the shared memory given to them (8 warps at most)."""
    return max(1, min(THREADS // 32, HISTOGRAM_SHARED // (4 * (bins + 1))))


def grid(n, bytes_per_value, sms, per_sm=BLOCKS_PER_SM):
    """Blocks for n values: one for SMALL or fewer (it reads again itself, no wait for other
    blocks), else enough to fill `sms` multiprocessors, no more than the values need."""
    if n <= SMALL:
        return 1
    per_block = THREADS * max(1, 16 // bytes_per_value) * 4
    return max(1, min(MAX_BLOCKS, sms * per_sm, -(-n // per_block)))


class CudaStatistics:
    """Launches the kernels; loads NVRTC and the driver at first use (Unavailable says why not)."""

    def __init__(self, nvrtc=None, driver=None):
        self.nvrtc = nvrtc or Nvrtc()
        self.driver = driver or Driver()
        self._devices = {}
        self._lock = threading.Lock()
        self._stream = raw_stream_getter()
        self._archs = None

    def capability_for(self, capability):
        """The newest architecture NVRTC knows that the device runs (a newer device runs sm_90 code
        only through PTX, which a cubin lacks: refused with why)."""
        if self._archs is None:
            self._archs = self.nvrtc.architectures()
        if capability in self._archs or not self._archs:
            return capability
        raise Unavailable("NVRTC %d.%d does not compile for sm_%d (it knows sm_%s)"
                          % (self.nvrtc.version + (capability, "/".join(map(str, self._archs)))))

    def device(self, device):
        held = self._devices.get(device)
        if held is None:
            held = self._devices[device] = _Device(self, device)
        return held

    def row(self, values, bins, row_address, series=None):
        """Queues the launch (or two) that writes the row of `values` (a flat tensor whose dtype is
        in KERNELS, on a CUDA device) at row_address (float64, HEADER + bins, on the same device).
        series: a key naming the capture's series, whose slot gives the first read its edges."""
        place = self.device(values.device)
        suffix = KERNELS[values.dtype]
        first, second = place.launches[suffix]
        stream = self._stream(place.index)
        n = values.numel()
        blocks = grid(n, values.element_size(), place.sms)
        again = grid(n, values.element_size(), place.sms, REREAD_BLOCKS_PER_SM)
        copies = histogram_copies(bins)
        shared = SHARED_FOLD + copies * (bins + 1) * 4
        scratch = place.scratch_for(stream)
        if len(self._devices) > 1 and torch.cuda.current_device() != place.index:
            with torch.cuda.device(place.index):  # its module is loaded in that device's context
                return self.row(values, bins, row_address, series)
        # One launch where its blocks can wait for one another: one block, or all resident at once.
        cooperative = (blocks > 1 and place.cooperative and values.element_size() > 1
                       and blocks <= place.resident_blocks(suffix, shared))
        alone = (blocks == 1 and values.element_size() > 1) or cooperative  # one-byte values: two launches
        with self._lock:  # the launches share the argument values and the stream's scratch
            a = first.arguments
            a.x.value = values.data_ptr()
            a.n.value = n
            a.bins.value = bins
            a.copies.value = copies
            a.row.value = row_address
            a.slot.value = 0 if series is None else place.slot_for(series)
            a.scratch.value = scratch
            a.wait.value = 1 if alone else 0
            first(blocks, shared, stream, cooperative)
            if not alone:
                second(again, shared, stream)

    def queue_reads(self, device):
        """At a step's end, before its wait: the read counters of `device`'s streams to the host."""
        place = self._devices.get(device)
        if place is not None:
            place.queue_counts()

    def reads(self):
        """(captures read once, read twice) since the last call, from the counters queue_reads
        copied (after the step's wait)."""
        totals = [0, 0]
        for place in self._devices.values():
            for held in place.counts.values():
                one, two = held.tolist()
                totals[0] += one
                totals[1] += two
        before = getattr(self, "_counted", (0, 0))
        self._counted = tuple(totals)
        return totals[0] - before[0], totals[1] - before[1]

    def copy_row(self, device, destination, source, nbytes):
        """One row copied on the device (a tensor captured twice at one version: read once)."""
        stream = self._stream(self.device(device).index)
        status = self.driver.copy(destination, source, nbytes, stream)
        if status:
            self.driver.check(status, "cuMemcpyDtoDAsync")
