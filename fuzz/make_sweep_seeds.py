"""Seeds made of the held-out sweep's bad inputs (issue 47), so that the fuzzers start from them
and scripts/asan.sh fails if any of them crashes a reader again: for ExportReaderFuzz (first
byte: which file of the export), a manifest nested 100,000 levels deep, one whose gaps add past
INT64_MAX, a stats.csv row of numel INT64_MIN, a stats.csv cut after its header, a scalars.csv
row short of a field; for ModelFileKindFuzz (first byte odd: a whole file), safetensors files
the reference library refuses (overlapping tensors, a name given twice, booleans as offsets).

    PYTHON make_sweep_seeds.py SEED_EXPORT CORPUS
"""
import json
import os
import sys


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def main():
    export, corpus = sys.argv[1], sys.argv[2]
    readers = os.path.join(corpus, "ExportReaderFuzz")
    with open(os.path.join(export, "manifest.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(export, "stats.csv")) as f:
        header, row = f.readline(), f.readline()
    deep = '{"format": "hookscope-capture", "version": 3, "modules": ' + "[" * 100000 + "]" * 100000 + "}"
    write(os.path.join(readers, "sweep-manifest-deep"), b"\x00" + deep.encode())
    gaps = dict(manifest, gaps=[{"step": s, "rank": 0, "captures": 2 ** 63 - 1, "bytes": 2 ** 63 - 1, "series": []}
                                for s in (0, 1)])
    write(os.path.join(readers, "sweep-manifest-gaps"), b"\x00" + json.dumps(gaps).encode())
    fields = row.rstrip("\n").split(",")
    fields[8] = str(-2 ** 63)  # numel (step, rank, module, call, kind, index, shape, dtype, numel, ...)
    write(os.path.join(readers, "sweep-stats-numel"), b"\x01" + (header + ",".join(fields) + "\n").encode())
    write(os.path.join(readers, "sweep-stats-cut"), b"\x01" + header.encode())
    write(os.path.join(readers, "sweep-scalars-short"), b"\x02step,rank,name,value\n0,0,loss\n")
    kinds = os.path.join(corpus, "ModelFileKindFuzz")
    for name, entries in (("overlap", '"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, '
                                      '"b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}'),
                          ("twice", '"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, '
                                    '"a": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}'),
                          ("booleans", '"a": {"dtype": "F32", "shape": [4], "data_offsets": [false, 16]}')):
        text = ("{" + entries + "}").encode()
        write(os.path.join(kinds, "sweep-%s.safetensors" % name),
              b"\x01" + len(text).to_bytes(8, "little") + text + bytes(32))


if __name__ == "__main__":
    main()
