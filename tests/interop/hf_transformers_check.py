#!/usr/bin/env python3
"""Interop check with transformers' own model classes (the GPU machine has transformers and PyTorch; never a hytra
dependency). Usage: hf_transformers_check.py HYTRA_BINARY WORKDIR
For a tiny random model of each family hytra converts (Llama, Qwen3-MoE, NemotronH with Mamba-2, attention, MLP and
MoE with shared experts, DeepSeek-V3 with MLA, YaRN, group-limited routing and MTP): hytra trains it 3 iterations on the CPU in fp32 and exports it with `hytra convert --to-hf
--hf-dtype fp32`; transformers' AutoModelForCausalLM loads the folder and its logits on a batch are compared with
hytra's (`hytra eval-step --device cpu`): at most 1e-4 relative to the largest logit. Then `hytra convert --from-hf`
imports the folder and every tensor must equal the trained checkpoint's bit for bit."""
import os
import shutil
import subprocess
import sys

import numpy
import torch
from safetensors.numpy import load_file, save_file
from transformers import AutoModelForCausalLM

COMMON = ["--hidden-size", "64", "--num-attention-heads", "4", "--group-query-attention", "--num-query-groups", "2",
          "--ffn-hidden-size", "128", "--normalization", "RMSNorm", "--disable-bias-linear", "--vocab-size", "256",
          "--seq-length", "16"]
FAMILIES = {
    "llama": ["--num-layers", "2", "--swiglu", "--position-embedding-type", "rope",
              "--untie-embeddings-and-output-weights"],
    "qwen3_moe": ["--hybrid-layer-pattern", "[*E][*-]", "--swiglu", "--position-embedding-type", "rope",
                  "--qk-layernorm", "--num-experts", "4", "--moe-ffn-hidden-size", "32", "--moe-router-topk", "2"],
    "nemotron_h": ["--hybrid-layer-pattern", "M*-E", "--squared-relu", "--position-embedding-type", "none",
                   "--mamba-num-heads", "8", "--mamba-head-dim", "16", "--mamba-num-groups", "2",
                   "--mamba-state-dim", "16", "--mamba-chunk-size", "8", "--num-experts", "4",
                   "--moe-ffn-hidden-size", "32", "--moe-router-topk", "2", "--moe-router-score-function", "sigmoid",
                   "--moe-router-enable-expert-bias", "--moe-shared-expert-intermediate-size", "64",
                   "--moe-router-topk-scaling-factor", "2.5", "--untie-embeddings-and-output-weights"],
    # MLA with the query latent and YaRN, a dense first layer, group-limited sigmoid routing with the expert bias and
    # a shared expert, one MTP depth (transformers' class has no MTP: those tensors are left unused there).
    "deepseek_v3": ["--hybrid-layer-pattern", "[+-][+E][+E]/+E", "--swiglu", "--position-embedding-type", "rope",
                    "--qk-layernorm", "--norm-epsilon", "1e-6", "--q-lora-rank", "24", "--kv-lora-rank", "16",
                    "--qk-head-dim", "16", "--qk-pos-emb-head-dim", "8", "--v-head-dim", "16",
                    "--rotary-scaling-factor", "40", "--mscale", "1", "--mscale-all-dim", "1", "--num-experts", "8",
                    "--moe-ffn-hidden-size", "32", "--moe-router-topk", "4", "--moe-router-score-function", "sigmoid",
                    "--moe-router-enable-expert-bias", "--moe-shared-expert-intermediate-size", "32",
                    "--moe-router-num-groups", "4", "--moe-router-group-topk", "2",
                    "--moe-router-topk-scaling-factor", "2.5", "--untie-embeddings-and-output-weights"],
}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout


def main():
    hytra, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    rng = numpy.random.default_rng(7)
    tokens = rng.integers(0, 256, size=(2, 17)).astype(numpy.int32)
    batch = os.path.join(work, "batch.safetensors")
    save_file({"tokens": tokens}, batch)
    failed = False
    for name, flags in FAMILIES.items():
        d = os.path.join(work, name)
        model = COMMON + flags
        run([hytra, "train", *model, "--mock-data", "--micro-batch-size", "2", "--global-batch-size", "2",
             "--train-iters", "3", "--lr", "1e-2", "--lr-warmup-iters", "0", "--eval-iters", "0", "--device", "cpu",
             "--save", d + "/ckpt"])
        run([hytra, "convert", "--to-hf", d + "/hf", "--hf-dtype", "fp32", *model, "--load", d + "/ckpt"])
        run([hytra, "eval-step", *model, "--device", "cpu", "--load", d + "/ckpt", "--batch", batch, "--out",
             d + "/eval.safetensors"])
        ours = load_file(d + "/eval.safetensors")["logits"]
        hf = AutoModelForCausalLM.from_pretrained(d + "/hf", dtype=torch.float32).eval()
        with torch.no_grad():
            theirs = hf(torch.from_numpy(tokens[:, :16].astype(numpy.int64))).logits.float().numpy()
        rel = float(numpy.abs(ours - theirs).max() / numpy.abs(theirs).max())
        ok = rel <= 1e-4
        run([hytra, "convert", "--from-hf", d + "/hf", "--save", d + "/back"])
        a = load_file(d + "/ckpt/iter_0000003/model.safetensors")
        b = load_file(d + "/back/iter_0000000/model.safetensors")
        same = a.keys() == b.keys() and all(numpy.array_equal(a[k].view(numpy.uint32), b[k].view(numpy.uint32))
                                            for k in a)
        print(f"{'ok' if ok and same else 'FAIL'}: {name} ({type(hf).__name__}): logits {rel:.3g} relative to "
              f"transformers' (limit 1e-4); import back {'bit-identical' if same else 'DIFFERS'} "
              f"({len(a)} tensors)")
        failed |= not (ok and same)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
