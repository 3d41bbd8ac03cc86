#!/usr/bin/env python3
"""torch._grouped_mm at the moe-2b expert shapes, in bench_ops's record format: the peer of bench_ops's
grouped_gemm* entries (hytra's grouped GEMM, bench/bench_ops.cpp `moe2b_expert_entries`).

8192 tokens routed top-6 over 32 experts (R = 49152 rows; each token's 6 experts drawn uniformly, or "skewed":
half the tokens' first choice expert 0), hidden C 2048, expert FFN F 1024 (fc1 2048 -> 2 x 1024, fc2
1024 -> 2048), bf16 in, fp32 accumulation inside torch._grouped_mm (bf16 out). Entries:
  fc1+swiglu   _grouped_mm, then silu(gate) * up * p (eager PyTorch, separate kernels; and torch.compile'd)
  fc1 fwd / fc2 fwd / fc2 dgrad / fc1 dgrad   one _grouped_mm each (3-D weights, offs over the rows)
  fc1 wgrad / fc2 wgrad   _grouped_mm(dy^T, x, offs) -> (E, out, in), bf16 out (hytra's is fp32 and accumulates)
  dense        torch.mm of fc1's FLOPs (R x 2048 x 2048)
Median of --repeats timed calls (CUDA events) after 3 warm-up calls.
"""
import argparse

import torch
import torch.nn.functional as F

from peer_common import median_ms, record

BF16 = torch.bfloat16


def offsets(n, k, e, skew, gen):
    """Group ends (int32, cumulative rows per expert) of n tokens routed top-k over e experts."""
    picks = torch.rand(n, e, generator=gen).argsort(dim=1)[:, :k]
    if skew:  # every even token's first choice is expert 0 (swap 0 into the first slot)
        even = picks[0::2]
        has0 = (even == 0).nonzero()
        even[has0[:, 0], has0[:, 1]] = even[has0[:, 0], 0]
        even[:, 0] = 0
        picks[0::2] = even
    counts = torch.bincount(picks.flatten(), minlength=e)
    return torch.cumsum(counts, 0).to(torch.int32).cuda()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=10)
    args = p.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(7)
    dev = torch.cuda.get_device_name()
    n, k, e, c, f = 8192, 6, 32, 2048, 1024
    r = n * k
    print(f"{'op':<15} {'shape':<32} {'dtype':<5} {'ms':>10} {'rate':>14}  device")

    def u(*shape, scale=1.0):
        return ((torch.rand(*shape, device="cuda") * 2 - 1) * scale).to(BF16)

    for skew in (False, True):
        offs = offsets(n, k, e, skew, gen)
        tag = "moe-2b R=49152 E=32" + (" skewed" if skew else "")
        x, w1 = u(r, c), u(e, c, 2 * f, scale=0.05)  # _grouped_mm's weights are (E, K, N)
        prob = torch.rand(r, 1, device="cuda")

        def fc1_swiglu():
            h = torch._grouped_mm(x, w1, offs=offs)
            gate, up = h.chunk(2, dim=-1)
            return (F.silu(gate.float()) * up.float() * prob).to(BF16), h

        fc1 = 2.0 * r * c * 2 * f
        record("torch._grouped_mm", tag + " fc1+swiglu eager", "bf16", median_ms(fc1_swiglu, 3, args.repeats), fc1, dev)
        compiled = torch.compile(fc1_swiglu)
        record("torch._grouped_mm", tag + " fc1+swiglu compile", "bf16", median_ms(compiled, 3, args.repeats), fc1, dev)
        if skew:
            continue
        gemms = ((" fc1 fwd", 2 * f, c), (" fc2 fwd", c, f), (" fc2 dgrad", f, c), (" fc1 dgrad", c, 2 * f))
        for what, nn_, kk in gemms:
            a, w = u(r, kk), u(e, kk, nn_, scale=0.05)
            ms = median_ms(lambda: torch._grouped_mm(a, w, offs=offs), 3, args.repeats)
            record("torch._grouped_mm", tag + what, "bf16", ms, 2.0 * r * nn_ * kk, dev)
        for what, nn_, kk in ((" fc1 wgrad", 2 * f, c), (" fc2 wgrad", c, f)):
            dy, xx = u(r, nn_), u(r, kk)
            ms = median_ms(lambda: torch._grouped_mm(dy.t(), xx, offs=offs), 3, args.repeats)
            record("torch._grouped_mm", tag + what, "bf16", ms, 2.0 * r * nn_ * kk, dev)
        a, w = u(r, c), u(c, 2 * f, scale=0.05)
        ms = median_ms(lambda: torch.mm(a, w), 3, args.repeats)
        record("torch.mm", "dense R=49152 N=2048 K=2048", "bf16", ms, fc1, dev)


if __name__ == "__main__":
    main()
