#!/usr/bin/env python3
"""Times mamba_ssm's Triton SSD chunk scan alone (`mamba_chunk_scan_combined`, the kernel Megatron-Core's
MambaMixer calls; with D, dt_bias and dt_softplus) and prints bench/bench_ops.cpp's record, so its lines sit
beside hytra's ssd_chunk_scan entries. Defaults: examples/nemotron-h-1b's shape, B 2, T 4096, 64 heads x 64,
state 128, 8 groups, chunk 128; x, dt, B, C bf16, A_log, D, dt_bias fp32 (the masters), A = -exp(A_log) in
the timed call as hytra's op takes A_log.

Records: ssd_chunk_scan_fwd (the forward as in training, its inputs requiring grad), ssd_chunk_scan_bwd (the
backward alone, replayed on one retained graph), ssd_chunk_scan_fwd_bwd (both). Each is the median of
--repeats calls after --warmup, each call timed with CUDA events. Rate: model FLOPs as hytra counts the scan
(hybrid_peer.ssd_flops: 7 d_inner N per token forward, twice that backward).
"""
import argparse
import torch

from hybrid_peer import add_mamba_args, mamba_chunk_scan_combined, ssd_flops
from peer_common import median_ms, record


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--seq-length", type=int, default=4096)
    add_mamba_args(p)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args()
    Bn, T, H, P = a.micro_batch_size, a.seq_length, a.mamba_num_heads, a.mamba_head_dim
    G, N, Q = a.mamba_num_groups, a.mamba_state_dim, a.mamba_chunk_size
    gen = torch.Generator(device="cuda").manual_seed(a.seed)

    def uniform(shape, lo, hi, dtype):  # random, not zero: bench_ops's habit
        return (torch.rand(shape, device="cuda", generator=gen) * (hi - lo) + lo).to(dtype)

    bf, f32 = torch.bfloat16, torch.float32
    dt0 = uniform((H,), 1e-3, 0.1, f32)  # Megatron's dt range; dt_bias = softplus^-1(dt)
    leaves = [uniform((Bn, T, H, P), -1, 1, bf), uniform((Bn, T, H), -1, 1, bf),  # x, dt_raw
              uniform((Bn, T, G, N), -1, 1, bf), uniform((Bn, T, G, N), -1, 1, bf),  # B, C
              uniform((H,), 1, 16, f32).log(), uniform((H,), 0.5, 1.5, f32),  # A_log, D
              dt0 + torch.log(-torch.expm1(-dt0))]  # dt_bias
    for t in leaves:
        t.requires_grad_()

    def scan():
        x, dt, Bm, Cm, A_log, D, dt_bias = leaves
        return mamba_chunk_scan_combined(x, dt, -torch.exp(A_log), Bm, Cm, Q, D=D, dt_bias=dt_bias, dt_softplus=True)

    y = scan()
    dy = uniform(tuple(y.shape), -1, 1, bf)
    device = torch.cuda.get_device_name()
    shape = f"B={Bn} T={T} H={H} P={P} G={G} N={N} chunk={Q}"
    fwd_flops = ssd_flops(a) / 3 * Bn * T
    print(f"# peer: mamba_ssm Triton mamba_chunk_scan_combined, torch {torch.__version__}; "
          f"model FLOPs {fwd_flops:.4e} forward, twice that backward")
    print("%-15s %-32s %-5s %10s %14s  %s" % ("op", "shape", "dtype", "ms", "rate", "device"))
    ms = median_ms(scan, a.warmup, a.repeats)
    record("ssd_chunk_scan_fwd", shape, "bf16", ms, fwd_flops, device)
    ms = median_ms(lambda: torch.autograd.grad(y, leaves, dy, retain_graph=True), a.warmup, a.repeats)
    record("ssd_chunk_scan_bwd", shape, "bf16", ms, 2 * fwd_flops, device)
    ms = median_ms(lambda: torch.autograd.grad(scan(), leaves, dy), a.warmup, a.repeats)
    record("ssd_chunk_scan_fwd_bwd", shape, "bf16", ms, 3 * fwd_flops, device)


if __name__ == "__main__":
    main()
