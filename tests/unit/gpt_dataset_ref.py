#!/usr/bin/env python3
"""Independent reference for GPTDataset sampling (docs/spec/gpt_dataset.md), written with numpy's own
numpy.random.RandomState. Reads one JSON config per line on stdin:
  {"lengths": [...], "split": "969,30,1", "which": 0, "seq_length": L, "seed": S, "num_samples": n|null}
and prints one JSON line per config: {"document_index": [...], "sample_index": [...flattened],
"shuffle_index": [...], "samples": [[first item's tokens], ...up to 8 items]} where sequence s's
tokens are 1000*s + position (so every token says where it came from)."""
import json
import re
import sys

import numpy


def split_bounds(split, n):
    w = [float(x) for x in re.findall(r"[.0-9]+", split)]
    w = w + [0.0] * (3 - len(w))
    total = sum(w)
    w = [x / total for x in w]
    ends = [sum(w[:i]) for i in range(4)]
    out = []
    for i in range(3):
        lo, hi = ends[i], ends[i + 1]
        out.append(None if lo == hi else (int(round(lo * float(n))), int(round(hi * float(n)))))
    return out


def doc_index(ids, epochs, rng, separate):
    if not separate or epochs == 1:
        d = numpy.mgrid[0:epochs, 0:len(ids)][1]
        d[:] = ids
        d = d.reshape(-1).astype(numpy.int32)
        rng.shuffle(d)
        return d
    first = doc_index(ids, epochs - 1, rng, False)
    second = doc_index(ids, 1, rng, False)
    return numpy.concatenate((first, second))


def sample_idx(sizes, doc, L, epochs, tokens_per_epoch):
    n = (epochs * tokens_per_epoch - 1) // L
    out = numpy.zeros((n + 1, 2), dtype=numpy.int64)
    pos, off = 0, 0
    for j in range(1, n + 1):
        remaining = L + 1
        while remaining != 0:
            length = sizes[doc[pos]] - off
            remaining -= length
            if remaining <= 0:
                off += remaining + length - 1
                remaining = 0
            else:
                pos += 1
                off = 0
        out[j] = (pos, off)
    return out


def shuffle_idx(num, total, rng):
    dt = numpy.uint32 if total < (numpy.iinfo(numpy.uint32).max - 1) else numpy.int64
    first = numpy.arange(0, num, 1, dtype=dt)
    rng.shuffle(first)
    if num == total:
        return first
    last = numpy.arange(num, total, 1, dtype=dt)
    rng.shuffle(last)
    return numpy.concatenate((first, last))


def build(cfg):
    sizes = numpy.array(cfg["lengths"], dtype=numpy.int64)
    lo, hi = split_bounds(cfg["split"], len(sizes))[cfg["which"]]
    ids = numpy.arange(lo, hi, dtype=numpy.int32)
    L, num_samples = cfg["seq_length"], cfg["num_samples"]
    tpe = int(numpy.sum(sizes[ids]))
    epochs, tokens = 1, tpe
    if num_samples is not None:
        while tokens < num_samples * L + 1:
            epochs += 1
            tokens += tpe
    separate, sans = False, 0
    if epochs > 1:
        sans = ((epochs - 1) * tpe - 1) // L
        separate = (num_samples - sans) < int(0.80 * ((tpe - 1) // L))
    rng = numpy.random.RandomState(cfg["seed"])
    d = doc_index(ids, epochs, rng, separate)
    s = sample_idx(sizes, d, L, epochs, tpe)
    n = s.shape[0] - 1
    sh = shuffle_idx(sans if separate else n, n, rng)
    samples = []
    for i in range(min(8, n)):
        k = int(sh[i])
        (p0, o0), (p1, o1) = s[k], s[k + 1]
        toks = []
        for p in range(p0, p1 + 1):
            seq = int(d[p])
            start = o0 if p == p0 else 0
            stop = o1 + 1 if p == p1 else int(sizes[seq])
            toks.extend(1000 * seq + t for t in range(start, stop))
        samples.append(toks)
    return {"document_index": d.tolist(), "sample_index": s.reshape(-1).tolist(),
            "shuffle_index": [int(x) for x in sh], "samples": samples}


for line in sys.stdin:
    if line.strip():
        print(json.dumps(build(json.loads(line))), flush=True)
