"""Damage for the readers' tests: one byte of a zip record flipped, the archive otherwise intact
(its directory, lengths and names as they were), so that only the record's CRC-32 can tell."""

import struct
import zipfile


def flip_a_byte_in(path, record, offset=None, mask=0x10):
    """Flips `mask` in one byte of `record`'s stored bytes in the zip at `path` (by default the
    middle one); returns the record's name."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(record)
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_length, extra_length = struct.unpack("<HH", f.read(4))
        at = info.header_offset + 30 + name_length + extra_length + \
            (info.compress_size // 2 if offset is None else offset)
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ mask]))
    return info.filename
