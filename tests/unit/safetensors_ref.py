#!/usr/bin/env python3
"""Independent safetensors reader/writer from docs/spec/safetensors.md (Python standard library only).
  safetensors_ref.py read FILE    prints {"metadata": {...}, "tensors": {name: [dtype, shape, hex bytes]}}
  safetensors_ref.py write FILE   < the same JSON: writes the file (reference ordering, 8-byte padding)"""
import json
import struct
import sys

BITS = {"BOOL": 8, "U8": 8, "I8": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
        "F32": 32, "F64": 64, "I64": 64, "U64": 64, "F8_E4M3": 8, "F8_E5M2": 8}


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    out, cursor = {}, 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        b, e = info["data_offsets"]
        assert b == cursor, "gap or overlap"
        count = 1
        for d in info["shape"]:
            count *= d
        assert (e - b) * 8 == count * BITS[info["dtype"]], "size"
        out[name] = [info["dtype"], info["shape"], data[b:e].hex()]
        cursor = e
    assert cursor == len(data), "trailing bytes"
    print(json.dumps({"metadata": meta, "tensors": out}, sort_keys=True))


def write(path, spec):
    tensors = sorted(spec["tensors"].items(), key=lambda kv: (-max(1, BITS[kv[1][0]] // 8), kv[0]))
    header, offset, blobs = {}, 0, []
    if spec.get("metadata"):
        header["__metadata__"] = spec["metadata"]
    for name, (dtype, shape, hexbytes) in tensors:
        raw = bytes.fromhex(hexbytes)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


if __name__ == "__main__":
    if sys.argv[1] == "read":
        read(sys.argv[2])
    else:
        write(sys.argv[2], json.load(sys.stdin))
