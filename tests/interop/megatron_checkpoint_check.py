#!/usr/bin/env python3
"""tools/megatron_checkpoint.py on the checkpoints Megatron-Core's dist_checkpointing.save wrote
(tests/assets/megatron_torch_dist: dense and MoE, torch_dist), on the GPU machine where PyTorch is.
Usage: megatron_checkpoint_check.py OUT_DIR
  1. Each torch_dist checkpoint converts; the tensors are listed with their shapes; OUT_DIR/<name>.safetensors is
     the file tests/assets/megatron_torch_dist/<name>/megatron_params.safetensors keeps (the CPU test
     e2e.MegatronTorchDist.* converts it with hytra and checks Megatron's per-token losses).
  2. The same parameters saved in the legacy torch format (mp_rank_00/model_optim_rng.pt with an `_extra_state`
     entry, as Megatron's torch format holds them) convert to the same tensors, bit for bit."""
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "megatron_checkpoint.py")


def convert(src, out):
    r = subprocess.run([sys.executable, TOOL, src, out], capture_output=True, text=True)
    print(r.stdout.strip(), r.stderr.strip())
    assert r.returncode == 0, r.stderr
    return load_file(out)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for name in ("dense", "moe"):
        src = os.path.join(ROOT, "tests", "assets", "megatron_torch_dist", name)
        tensors = convert(os.path.join(src, "iter_0000001"), os.path.join(out_dir, f"{name}.safetensors"))
        for k in sorted(tensors):
            print(f"  {k} {list(tensors[k].shape)} {tensors[k].dtype}")
        legacy = os.path.join(out_dir, f"{name}_torch")
        os.makedirs(os.path.join(legacy, "iter_0000001", "mp_rank_00"), exist_ok=True)
        model = dict(tensors)
        model["decoder.layers.0.self_attention.core_attention._extra_state"] = None
        torch.save({"model": model, "iteration": 1, "checkpoint_version": 3.0},
                   os.path.join(legacy, "iter_0000001", "mp_rank_00", "model_optim_rng.pt"))
        with open(os.path.join(legacy, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write("1")
        again = convert(legacy, os.path.join(out_dir, f"{name}_torch.safetensors"))
        assert sorted(again) == sorted(tensors), (sorted(again), sorted(tensors))
        for k, t in tensors.items():
            assert again[k].dtype == t.dtype and torch.equal(again[k], t), k
        print(f"{name}: {len(tensors)} tensors; the legacy torch format converts to the same tensors bit for bit")


if __name__ == "__main__":
    main()
