"""A file ``torch.save`` wrote (a zip of ``data.pkl`` and one record per storage), read lazily:
its pickle at once, with each tensor left as a `Stored` (its record, dtype, offset, size and
stride), and a tensor's bytes only when asked for, checked against the record's CRC-32 then.

The pickle is run by a restricted unpickler that knows only what ``torch.save`` writes of dicts
and tensors (HookScope's exports, or the same dict saved again by torch): any other global is
`Unknown`, for the caller to read the file with ``torch.load`` instead. Standard library, and
torch only to turn bytes into a tensor.
"""

import collections
import io
import pickle
import zipfile

_DTYPES = {  # torch.<Name>Storage -> (torch dtype name, bytes a value)
    "LongStorage": ("int64", 8), "DoubleStorage": ("float64", 8), "FloatStorage": ("float32", 4),
    "IntStorage": ("int32", 4), "ShortStorage": ("int16", 2), "CharStorage": ("int8", 1),
    "ByteStorage": ("uint8", 1), "BoolStorage": ("bool", 1), "HalfStorage": ("float16", 2),
    "BFloat16Storage": ("bfloat16", 2),
}


class Unknown(Exception):
    """The pickle holds something the lazy reader does not know: read the file with torch.load."""


class Damaged(Exception):
    """A record or tensor of the file is damaged: the message says which."""


class Stored:
    """A tensor of the file, not read yet."""
    __slots__ = ("record", "dtype", "itemsize", "numel", "offset", "size", "stride")

    def __init__(self, storage, offset, size, stride):
        self.record, (self.dtype, self.itemsize), self.numel = storage
        self.offset, self.size, self.stride = offset, tuple(size), tuple(stride)

    def __len__(self):
        return self.size[0] if self.size else 0


class _Storage(tuple):
    pass


def _rebuild_tensor(storage, offset, size, stride, *rest):
    if not isinstance(storage, _Storage) or not isinstance(offset, int) or not all(
            isinstance(n, int) and n >= 0 for n in tuple(size) + tuple(stride)) or len(size) != len(stride):
        raise Damaged("a tensor of it has no storage, or a size or stride that is not whole numbers from 0")
    return Stored(storage, offset, size, stride)


class _Unpickler(pickle.Unpickler):
    def __init__(self, data, prefix):
        super().__init__(io.BytesIO(data))
        self.prefix = prefix

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in _DTYPES:
            return name
        raise Unknown("%s.%s" % (module, name))

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage" and pid[1] in _DTYPES
                and isinstance(pid[2], str) and isinstance(pid[4], int) and pid[4] >= 0):
            raise Unknown("a persistent id %r" % (pid[:2],))
        return _Storage(("%s/data/%s" % (self.prefix, pid[2]), _DTYPES[pid[1]], pid[4]))


class File:
    """The zip at `path`, open until close(); `root` is its pickle with tensors as `Stored`."""

    def __init__(self, path):
        try:
            self._zip = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise Damaged("it is not a zip torch.save wrote (%s)" % exc)
        try:
            pickles = [n for n in self._zip.namelist() if n.count("/") == 1 and n.endswith("/data.pkl")]
            if len(pickles) != 1:
                raise Damaged("it holds %d data.pkl records where torch.save writes one" % len(pickles))
            prefix = pickles[0][:-len("/data.pkl")]
            if prefix + "/byteorder" in self._zip.namelist() and self.read(prefix + "/byteorder") != b"little":
                raise Unknown("a big-endian file")
            try:
                self.root = _Unpickler(self.read(pickles[0]), prefix).load()
            except (Unknown, Damaged):
                raise
            except Exception as exc:  # a pickle cut or crafted: UnpicklingError, EOFError, ValueError...
                raise Damaged("its pickle cannot be read (%s: %s)" % (type(exc).__name__, exc))
        except BaseException:
            self._zip.close()
            raise

    def read(self, record):
        """A record's bytes, its CRC-32 checked as they are read."""
        try:
            return self._zip.read(record)
        except KeyError:
            raise Damaged("its record %s is missing" % record)
        except zipfile.BadZipFile as exc:
            if "CRC" in str(exc):
                raise Damaged("its record %s does not match the CRC-32 the archive records for it" % record)
            raise Damaged("its record %s cannot be read (%s)" % (record, exc))
        except (OSError, EOFError, ValueError, NotImplementedError) as exc:
            raise Damaged("its record %s cannot be read (%s)" % (record, exc))

    def tensor(self, stored, what):
        """`stored` as a torch tensor of its own memory, checked first: the storage as large as the
        pickle says and as the record holds, the size and stride inside it."""
        import torch
        data = self.read(stored.record)
        if len(data) != stored.numel * stored.itemsize:
            raise Damaged("%s's record %s holds %d bytes where its storage of %d values needs %d"
                          % (what, stored.record, len(data), stored.numel, stored.numel * stored.itemsize))
        last = stored.offset + sum((n - 1) * s for n, s in zip(stored.size, stored.stride))
        empty = any(n == 0 for n in stored.size)
        if stored.offset < 0 or (not empty and last >= stored.numel):
            raise Damaged("%s reaches past its storage (offset %d, size %s, stride %s, %d values)"
                          % (what, stored.offset, list(stored.size), list(stored.stride), stored.numel))
        dtype = getattr(torch, stored.dtype)
        flat = torch.frombuffer(bytearray(data), dtype=dtype) if data else torch.empty(0, dtype=dtype)
        return flat.as_strided(stored.size, stored.stride, stored.offset)

    def close(self):
        self._zip.close()
