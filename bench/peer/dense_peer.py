#!/usr/bin/env python3
"""Plain-PyTorch peer of hytra's dense `[*-]` GPT stack, timed eager and under torch.compile.

Model: untied embedding -> L x ([pre-RMSNorm, fused QKV (rows grouped per KV group), RoPE rotate-half,
causal GQA SDPA, out proj, residual], [pre-RMSNorm, SwiGLU fc1 -> fc2, residual]) -> final RMSNorm ->
output layer -> cross-entropy. fp32 parameters, bf16 autocast, fused AdamW, grad clipping at 1.0.
The model, FLOP count and training loop are peer_common.py's; this file adds the dense flags and the SDPA probe.
"""
import contextlib, itertools, warnings
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

from peer_common import BACKENDS, KINDS, compile_whole, parser, run_modes, start


def probe_sdpa(a):
    """Times attention fwd+bwd at the run's shapes for each backend and GQA style; names auto's kernels."""
    b, s, nh, ng = a.micro_batch_size, a.seq_length, a.num_attention_heads, a.num_query_groups
    hd, dev, bf = a.hidden_size // nh, "cuda", torch.bfloat16
    # [b, s, heads, hd] transposed to [b, heads, s, hd]: the strides the model hands to SDPA
    q0 = torch.randn(b, s, nh, hd, device=dev, dtype=bf, requires_grad=True)
    k0 = torch.randn(b, s, ng, hd, device=dev, dtype=bf, requires_grad=True)
    v0 = torch.randn(b, s, ng, hd, device=dev, dtype=bf, requires_grad=True)
    do = torch.randn(b, nh, s, hd, device=dev, dtype=bf)

    def fwd_bwd(gqa):
        q, k, v = q0.transpose(1, 2), k0.transpose(1, 2), v0.transpose(1, 2)
        if gqa == "native":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            o = F.scaled_dot_product_attention(q, k.repeat_interleave(nh // ng, 1), v.repeat_interleave(nh // ng, 1), is_causal=True)
        o.backward(do)

    def grads(gqa):  # one fwd+bwd from cleared gradients
        for t in (q0, k0, v0):
            t.grad = None
        fwd_bwd(gqa)
        return [t.grad.clone() for t in (q0, k0, v0)]

    # deterministic=1: under torch.use_deterministic_algorithms a backend either runs a reproducible
    # backward or refuses; `bitwise` says whether two backward passes gave the same dq, dk, dv bits
    for name, gqa, det in itertools.product(["auto"] + list(BACKENDS), ("native", "repeat"), (False, True)):
        ctx = contextlib.nullcontext() if name == "auto" else sdpa_kernel([BACKENDS[name]])
        torch.use_deterministic_algorithms(det)
        try:
            with ctx, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for _ in range(2):
                    fwd_bwd(gqa)
                t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                t0.record()
                for _ in range(5):
                    fwd_bwd(gqa)
                t1.record()
                torch.cuda.synchronize()
                bitwise = all(torch.equal(x, y) for x, y in zip(grads(gqa), grads(gqa)))
            res = f"fwd_bwd_ms={t0.elapsed_time(t1) / 5:.3f} bitwise={int(bitwise)}"
        except RuntimeError as e:
            res = "unsupported (" + str(e).strip().splitlines()[0][:100] + ")"
        torch.use_deterministic_algorithms(False)
        print(f"sdpa backend={name} gqa={gqa} deterministic={int(det)} b={b} s={s} heads={nh}/{ng} hd={hd} {res}")
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with warnings.catch_warnings(), torch.profiler.profile(activities=acts) as prof:
        warnings.simplefilter("ignore")
        fwd_bwd(a.gqa)
        torch.cuda.synchronize()
    keys = sorted({e.key for e in prof.key_averages()
                   if any(t in e.key.lower() for t in ("flash", "fmha", "cudnn", "attention", "sdpa", "attn"))})
    print(f"sdpa auto gqa={a.gqa} ops and kernels: " + " | ".join(kk[:90] for kk in keys))
    del q0, k0, v0, do



def main():
    p = parser(__doc__)
    p.add_argument("--num-layers", type=int, default=16)
    p.add_argument("--rotary-base", type=float, default=10000.0)
    p.add_argument("--probe-sdpa", action="store_true", help="time SDPA backends at these shapes first")
    a = p.parse_args()
    assert a.hidden_size % a.num_attention_heads == 0
    a.head_dim, a.activation, a.position_embedding = a.hidden_size // a.num_attention_heads, "swiglu", "rope"
    config_name = a.config_name or (f"dense-h{a.hidden_size}-l{a.num_layers}-a{a.num_attention_heads}"
                                    f"-g{a.num_query_groups}-f{a.ffn_hidden_size}-v{a.vocab_size}")
    pattern = "*-" * a.num_layers
    flops_token = start(a, pattern, KINDS, config_name)
    if a.probe_sdpa:
        probe_sdpa(a)
    run_modes(a, pattern, KINDS, flops_token, config_name, compile_whole)


if __name__ == "__main__":
    main()
