#!/usr/bin/env python3
"""Plain-PyTorch peer of hytra's dense `[*-]` GPT stack, timed eager and under torch.compile.

Model: untied embedding -> L x ([pre-RMSNorm, fused QKV (rows grouped per KV group), RoPE rotate-half,
causal GQA SDPA, out proj, residual], [pre-RMSNorm, SwiGLU fc1 -> fc2, residual]) -> final RMSNorm ->
output layer -> cross-entropy. fp32 parameters, bf16 autocast, fused AdamW, grad clipping at 1.0.
"""
import argparse, contextlib, gc, itertools, json, math, statistics, time, warnings
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

PEAK_TFLOPS = 989.0  # H100 SXM dense bf16, the MFU denominator hytra uses
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):  # statistics in fp32, output in the input's dtype
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight).to(x.dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Layer(nn.Module):
    """One `*` (attention) plus one `-` (SwiGLU MLP) sub-layer."""

    def __init__(self, a):
        super().__init__()
        self.nh, self.ng = a.num_attention_heads, a.num_query_groups
        self.hd = a.hidden_size // self.nh
        self.gqa = a.gqa
        self.input_layernorm = RMSNorm(a.hidden_size, a.norm_epsilon)
        self.linear_qkv = nn.Linear(a.hidden_size, (self.nh + 2 * self.ng) * self.hd, bias=False)
        self.linear_proj = nn.Linear(self.nh * self.hd, a.hidden_size, bias=False)
        self.pre_mlp_layernorm = RMSNorm(a.hidden_size, a.norm_epsilon)
        self.linear_fc1 = nn.Linear(a.hidden_size, 2 * a.ffn_hidden_size, bias=False)
        self.linear_fc2 = nn.Linear(a.ffn_hidden_size, a.hidden_size, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        qpg = self.nh // self.ng  # query heads per KV group
        # Megatron's QKV row layout: per KV group g, [q heads of g; k_g; v_g].
        qkv = self.linear_qkv(self.input_layernorm(x)).view(b, s, self.ng, qpg + 2, self.hd)
        q = qkv[:, :, :, :qpg].reshape(b, s, self.nh, self.hd)
        k, v = qkv[:, :, :, qpg], qkv[:, :, :, qpg + 1]  # [b, s, ng, hd]
        q = (q * cos + rotate_half(q) * sin).to(v.dtype)
        k = (k * cos + rotate_half(k) * sin).to(v.dtype)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [b, heads, s, hd]
        if self.gqa == "native":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # query head i uses KV head i // qpg, as in the grouped layout above
            k, v = k.repeat_interleave(qpg, dim=1), v.repeat_interleave(qpg, dim=1)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.linear_proj(o.transpose(1, 2).reshape(b, s, self.nh * self.hd))
        gate, up = self.linear_fc1(self.pre_mlp_layernorm(x)).chunk(2, dim=-1)
        return x + self.linear_fc2(F.silu(gate) * up)


class DenseGPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        hd = a.hidden_size // a.num_attention_heads
        self.word_embeddings = nn.Embedding(a.vocab_size, a.hidden_size)
        self.layers = nn.ModuleList(Layer(a) for _ in range(a.num_layers))
        self.final_norm = RMSNorm(a.hidden_size, a.norm_epsilon)
        self.output_layer = nn.Linear(a.hidden_size, a.vocab_size, bias=False)
        inv_freq = 1.0 / (a.rotary_base ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        freqs = torch.outer(torch.arange(a.seq_length, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]  # [s, 1, hd], broadcasts over heads
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        std, out_std = a.init_method_std, a.init_method_std / math.sqrt(2 * a.num_layers)
        for name, p in self.named_parameters():
            if p.dim() == 2:  # Megatron init: normal(0, std); output projections scaled by 1/sqrt(2L)
                nn.init.normal_(p, 0.0, out_std if name.endswith(("linear_proj.weight", "linear_fc2.weight")) else std)

    def forward(self, tokens, labels):
        s = tokens.shape[1]
        x = self.word_embeddings(tokens).to(torch.bfloat16)  # bf16 residual stream, as in Megatron bf16
        cos, sin = self.cos[:s], self.sin[:s]
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.output_layer(self.final_norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1))


def model_flops(a):
    hd = a.hidden_size // a.num_attention_heads
    h, nh, ng, f = a.hidden_size, a.num_attention_heads, a.num_query_groups, a.ffn_hidden_size
    per_layer = h * (nh + 2 * ng) * hd + nh * hd * h + h * 2 * f + f * h  # qkv, proj, fc1, fc2
    matmul = a.num_layers * per_layer + a.vocab_size * h  # + LM head; no embedding lookup, no norms
    return matmul, 6.0 * matmul + 6.0 * a.num_layers * a.seq_length * nh * hd


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


def run_mode(mode, a, flops_token, config_name, n_expected):
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(a.seed)
    model = DenseGPT(a).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    # Compiled: the model's forward + loss (and, through AOTAutograd, its backward). The clip and the
    # fused AdamW step stay eager: fused AdamW is already a few multi-tensor kernels.
    fwd = torch.compile(model) if mode == "compile" else model
    n_micro = a.global_batch_size // a.micro_batch_size
    gen = torch.Generator(device="cuda").manual_seed(a.seed)
    data = [torch.randint(0, a.vocab_size, (a.micro_batch_size, a.seq_length + 1), device="cuda", generator=gen)
            for _ in range(n_micro)]
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == n_expected, (n_params, n_expected)

    def attn_ctx():  # sdpa_kernel's context manager is single-use: make one per micro-batch
        return contextlib.nullcontext() if a.sdpa_backend == "auto" else sdpa_kernel([BACKENDS[a.sdpa_backend]])

    def step():
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device="cuda")
        for batch in data:
            with torch.autocast("cuda", dtype=torch.bfloat16), attn_ctx():
                loss = fwd(batch[:, :-1], batch[:, 1:])
            (loss / n_micro).backward()
            total += loss.detach() / n_micro
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        return total

    times, loss, wall0 = [], None, time.perf_counter()
    for i in range(a.warmup_steps + a.steps):
        if i == a.warmup_steps:
            warmup_s = time.perf_counter() - wall0
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0.record()
        total = step()
        t1.record()
        torch.cuda.synchronize()
        loss = total.item()
        if i >= a.warmup_steps:
            times.append(t0.elapsed_time(t1))
    step_ms = statistics.median(times)
    tokens_s = a.global_batch_size * a.seq_length / (step_ms / 1e3)
    tflops = flops_token * tokens_s / 1e12
    rec = {"peer": mode, "config": config_name, "mbs": a.micro_batch_size, "gbs": a.global_batch_size,
           "seq": a.seq_length, "step_ms": round(step_ms, 3), "tokens_per_s": round(tokens_s, 1),
           "tflops_per_gpu": round(tflops, 2), "mfu": round(100 * tflops / PEAK_TFLOPS, 2),
           "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2), "loss": round(loss, 5),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__, "gqa": a.gqa,
           "sdpa_backend": a.sdpa_backend, "min_step_ms": round(min(times), 3), "steps": a.steps,
           "warmup_s": round(warmup_s, 1)}
    print(" ".join(f"{k}={rec[k]}" + ("%" if k == "mfu" else "") for k in
                   ("peer", "config", "mbs", "gbs", "seq", "step_ms", "tokens_per_s", "tflops_per_gpu", "mfu",
                    "peak_mem_gib", "loss")))
    print(f"# {mode}: {a.warmup_steps} warm-up steps took {warmup_s:.1f} s; step_ms min {min(times):.3f} max {max(times):.3f}")
    if a.json:
        with open(a.json, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
    del model, opt, fwd, data, step
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mode", choices=["eager", "compile", "both"], default="both")
    p.add_argument("--hidden-size", type=int, default=2048)
    p.add_argument("--num-layers", type=int, default=16)
    p.add_argument("--num-attention-heads", type=int, default=32)
    p.add_argument("--num-query-groups", type=int, default=8)
    p.add_argument("--ffn-hidden-size", type=int, default=8192)
    p.add_argument("--vocab-size", type=int, default=50304, help="already padded (GPT-2's 50257 -> 50304)")
    p.add_argument("--seq-length", type=int, default=4096)
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--global-batch-size", type=int, default=2)
    p.add_argument("--rotary-base", type=float, default=10000.0)
    p.add_argument("--norm-epsilon", type=float, default=1e-5)
    p.add_argument("--init-method-std", type=float, default=0.02)
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--gqa", choices=["native", "repeat"], default="native",
                   help="native: SDPA enable_gqa=True; repeat: repeat_interleave k/v to all heads")
    p.add_argument("--sdpa-backend", choices=["auto"] + list(BACKENDS), default="auto")
    p.add_argument("--probe-sdpa", action="store_true", help="time SDPA backends at these shapes first")
    p.add_argument("--config-name", default=None, help="default: a shape summary")
    p.add_argument("--json", default=None, help="append one JSON line per mode to this file")
    a = p.parse_args()
    assert a.hidden_size % a.num_attention_heads == 0 and a.num_attention_heads % a.num_query_groups == 0
    assert a.global_batch_size % a.micro_batch_size == 0, "--global-batch-size must be a multiple of --micro-batch-size"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    config_name = a.config_name or (f"dense-h{a.hidden_size}-l{a.num_layers}-a{a.num_attention_heads}"
                                    f"-g{a.num_query_groups}-f{a.ffn_hidden_size}-v{a.vocab_size}")
    matmul, flops_token = model_flops(a)
    h, v, L = a.hidden_size, a.vocab_size, a.num_layers
    total = matmul + v * h + (2 * L + 1) * h  # + embedding + norm weights
    print(f"device={torch.cuda.get_device_name()} torch={torch.__version__} config={config_name}")
    print(f"params={total} matmul_params={matmul} flops_per_token={flops_token:.6e}")
    if a.probe_sdpa:
        probe_sdpa(a)
    for mode in (["eager", "compile"] if a.mode == "both" else [a.mode]):
        run_mode(mode, a, flops_token, config_name, total)


if __name__ == "__main__":
    main()
