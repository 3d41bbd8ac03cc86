#!/usr/bin/env python3
"""Megatron-LM checkpoints (torch_dist or legacy torch) to one safetensors file of Megatron's parameter names.

Runs where PyTorch is installed (the GPU machine; Megatron itself is not needed). The output holds each model
parameter under its per-layer name (`decoder.layers.<i>.self_attention.linear_qkv.weight`, sequential experts as
`...mlp.experts.local_experts.<j>.linear_fc1.weight`), in its stored dtype, with the checkpoint's iteration in the
file's metadata. `hytra convert --from-megatron OUT.safetensors [model flags] --save DIR` then makes a hytra
checkpoint of it (docs/checkpoints.md, "Megatron's own checkpoints").

    python3 tools/megatron_checkpoint.py CHECKPOINT OUT.safetensors

CHECKPOINT is a --save directory (its latest_checkpointed_iteration.txt names the iteration) or one iter_*
directory. Formats:
  torch_dist  metadata.json {"sharded_backend": "torch_dist"} beside PyTorch DCP files (.metadata, *.distcp):
              read whole, whatever the parallel layout that wrote it. Layers stacked by Megatron's layer-wise
              sharding (a key `decoder.layers.<name>` whose first axis is the layer) are split into per-layer
              names, and experts stacked likewise (`...experts.local_experts.<name>`, `...experts.experts.<name>`)
              into per-expert names.
  torch       mp_rank_00/model_optim_rng.pt (one tensor- and pipeline-parallel rank; more are refused).
Optimizer state is not converted (train on the result with --finetune or --no-load-optim).
"""
import json
import os
import re
import struct
import sys

import torch

DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int64: "I64", torch.int32: "I32"}


def fail(msg):
    sys.exit(f"megatron_checkpoint.py: {msg}")


def iteration_dir(path):
    tracker = os.path.join(path, "latest_checkpointed_iteration.txt")
    if os.path.isfile(tracker):
        text = open(tracker).read().strip()
        if text == "release":
            return os.path.join(path, "release"), 0
        if not text.isdigit():
            fail(f"{tracker}: expected an iteration number, got {text[:40]!r}")
        return os.path.join(path, f"iter_{int(text):07d}"), int(text)
    m = re.fullmatch(r"iter_(\d+)", os.path.basename(os.path.normpath(path)))
    if m is None:
        fail(f"{path}: neither a --save directory (latest_checkpointed_iteration.txt) nor an iter_* directory")
    return path, int(m.group(1))


def unstack(key, tensor):
    """Per-layer (and per-expert) names for a tensor stacked by Megatron's layer-wise sharding."""
    head, sep, rest = key.partition("decoder.layers.")
    if not sep or rest[:1].isdigit():
        return [(key, tensor)]
    out = []
    for i in range(tensor.shape[0]):
        name = f"{head}decoder.layers.{i}.{rest}"
        for stacked, per_expert in (("experts.local_experts.", "experts.local_experts.{j}.{p}"),
                                    ("experts.experts.", "experts.{p}{j}")):
            before, found, param = name.partition(stacked)
            if found and not param[:1].isdigit():
                # "{p}{j}" for TE's grouped names: linear_fc1.weight -> linear_fc1.weight<j>
                out += [(before + per_expert.format(j=j, p=param), tensor[i][j]) for j in range(tensor.shape[1])]
                break
        else:
            out.append((name, tensor[i]))
    return out


def read_torch_dist(path):
    from torch.distributed.checkpoint import FileSystemReader, load
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = FileSystemReader(path)
    meta = reader.read_metadata()
    state = {k: torch.empty(m.size, dtype=m.properties.dtype)
             for k, m in meta.state_dict_metadata.items() if isinstance(m, TensorStorageMetadata)}
    if not state:
        fail(f"{path}: no tensors in the torch_dist checkpoint")
    load(state, storage_reader=reader, no_dist=True)
    return state


def read_torch(path):
    ranks = sorted(d for d in os.listdir(path) if d.startswith("mp_rank_"))
    if ranks != ["mp_rank_00"]:
        fail(f"{path}: {len(ranks)} model-parallel rank folders ({', '.join(ranks[:4])}); only checkpoints of one "
             "rank (mp_rank_00) convert: save from Megatron with --ckpt-format torch_dist instead")
    ckpt = torch.load(os.path.join(path, "mp_rank_00", "model_optim_rng.pt"), map_location="cpu", weights_only=False)
    if "model" not in ckpt:
        fail(f"{path}: model_optim_rng.pt holds no 'model' (virtual pipeline chunks 'model0'... are not converted)")
    return {k: v for k, v in ckpt["model"].items() if isinstance(v, torch.Tensor)}


def write_safetensors(path, tensors, metadata):
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if t.dtype not in DTYPES:
            fail(f"{name}: dtype {t.dtype} has no safetensors name here")
        blob = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    path, iteration = iteration_dir(src)
    info = os.path.join(path, "metadata.json")
    if os.path.isfile(info):
        backend = json.load(open(info)).get("sharded_backend")
        if backend != "torch_dist":
            fail(f"{info}: sharded_backend {backend!r}; only torch_dist (and the legacy torch format) convert")
        state, fmt = read_torch_dist(path), "torch_dist"
    elif os.path.isdir(os.path.join(path, "mp_rank_00")):
        state, fmt = read_torch(path), "torch"
    else:
        fail(f"{path}: no metadata.json (torch_dist) and no mp_rank_00 (torch): not a Megatron checkpoint")
    tensors = {}
    for key, t in state.items():
        if key.endswith("_extra_state"):
            continue
        for name, part in unstack(key, t):
            if name in tensors:
                fail(f"{key}: gives {name} twice")
            tensors[name] = part
    write_safetensors(out, tensors, {"format": "pt", "megatron_format": fmt, "iteration": str(iteration)})
    print(f"wrote {out}: {len(tensors)} tensors of the {fmt} checkpoint {path} (iteration {iteration})")


if __name__ == "__main__":
    main()
