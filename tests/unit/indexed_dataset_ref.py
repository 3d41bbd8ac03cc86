#!/usr/bin/env python3
"""Independent numpy implementation of Megatron's MMIDIDX layout (docs/spec/indexed_dataset.md §2-§4).
  indexed_dataset_ref.py write PREFIX < spec.json   spec: {"dtype": code, "documents": [[[tokens of
                                                      sequence], ...], ...]} (documents of sequences)
  indexed_dataset_ref.py read PREFIX                prints {"dtype", "lengths", "pointers",
                                                      "document_indices", "sequences"} as JSON"""
import json
import struct
import sys

import numpy

DTYPES = {1: numpy.uint8, 2: numpy.int8, 3: numpy.int16, 4: numpy.int32, 5: numpy.int64,
          6: numpy.float64, 7: numpy.float32, 8: numpy.uint16}


def write(prefix, spec):
    dt = DTYPES[spec["dtype"]]
    lengths, doc_idx = [], [0]
    with open(prefix + ".bin", "wb") as b:
        for doc in spec["documents"]:
            for seq in doc:
                b.write(numpy.array(seq, dtype=dt).tobytes(order="C"))
                lengths.append(len(seq))
            doc_idx.append(len(lengths))
    itemsize = numpy.dtype(dt).itemsize
    pointers = numpy.concatenate(([0], numpy.cumsum(numpy.array(lengths, dtype=numpy.int64))[:-1] * itemsize)) \
        if lengths else numpy.array([], dtype=numpy.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", spec["dtype"]))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(numpy.array(lengths, dtype=numpy.int32).tobytes(order="C"))
        f.write(numpy.array(pointers, dtype=numpy.int64).tobytes(order="C"))
        f.write(numpy.array(doc_idx, dtype=numpy.int64).tobytes(order="C"))


def read(prefix):
    with open(prefix + ".idx", "rb") as f:
        assert f.read(9) == b"MMIDIDX\x00\x00"
        (version,) = struct.unpack("<Q", f.read(8))
        assert version == 1
        (code,) = struct.unpack("<B", f.read(1))
        (s,) = struct.unpack("<Q", f.read(8))
        (d,) = struct.unpack("<Q", f.read(8))
        lengths = numpy.frombuffer(f.read(4 * s), dtype=numpy.int32)
        pointers = numpy.frombuffer(f.read(8 * s), dtype=numpy.int64)
        doc_idx = numpy.frombuffer(f.read(8 * d), dtype=numpy.int64)
    data = numpy.memmap(prefix + ".bin", dtype=DTYPES[code], mode="r")
    itemsize = numpy.dtype(DTYPES[code]).itemsize
    seqs = [data[p // itemsize: p // itemsize + n].astype(numpy.int64).tolist() for p, n in zip(pointers, lengths)]
    print(json.dumps({"dtype": code, "lengths": lengths.tolist(), "pointers": pointers.tolist(),
                      "document_indices": doc_idx.tolist(), "sequences": seqs}))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], json.load(sys.stdin))
    else:
        read(sys.argv[2])
