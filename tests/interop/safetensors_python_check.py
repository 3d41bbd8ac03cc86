#!/usr/bin/env python3
"""Interop check with the Python `safetensors` package (present on the GPU machines, never a hytra
dependency). Usage: safetensors_python_check.py HYTRA_BINARY WORKDIR
  1. hytra writes a checkpoint; safetensors.numpy loads every tensor, and re-saving them with
     safetensors (same metadata) reproduces hytra's file byte for byte.
  2. safetensors writes a file; `hytra inspect-checkpoint` reads it and its per-tensor XXH3-64
     checksums equal the ones the `xxhash` package computes here from the arrays' bytes."""
import os
import subprocess
import sys

import numpy
import xxhash
from safetensors.numpy import load_file, save_file


def main():
    hytra, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    ck = os.path.join(work, "ckpt")
    subprocess.run([hytra, "train", "--config", "examples/tiny-dense/config.yaml", "--train-iters", "2",
                    "--lr-warmup-iters", "0", "--eval-interval", "0", "--device", "cpu", "--save", ck],
                   check=True, stdout=subprocess.DEVNULL)
    path = os.path.join(ck, "iter_0000002", "model.safetensors")
    tensors = load_file(path)
    again = os.path.join(work, "again.safetensors")
    save_file(tensors, again, metadata={"format": "pt"})
    same = open(path, "rb").read() == open(again, "rb").read()
    print(f"hytra -> python: {len(tensors)} tensors loaded; re-saved file byte-identical: {same}")
    assert same

    mine = {"a.weight": numpy.arange(12, dtype=numpy.float32).reshape(3, 4) / 7,
            "b.bias": numpy.array([1, -2, 3], dtype=numpy.int64),
            "c.mask": numpy.array([1, 0, 1, 1], dtype=numpy.uint8),
            "d.half": numpy.linspace(-1, 1, 6, dtype=numpy.float16)}
    py_path = os.path.join(work, "python.safetensors")
    save_file(mine, py_path, metadata={"format": "pt"})
    out = subprocess.run([hytra, "inspect-checkpoint", py_path], check=True, capture_output=True, text=True).stdout
    for name, arr in mine.items():
        want = xxhash.xxh3_64_hexdigest(arr.tobytes())
        assert f"{name}  " in out and f"xxh3_64={want}" in out, (name, out)
    print(f"python -> hytra: {len(mine)} tensors read with matching checksums")


if __name__ == "__main__":
    main()
