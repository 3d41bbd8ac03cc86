"""Shared parts of the PyTorch peers (dense_peer.py, hybrid_peer.py).

A model is a layer pattern over sub-layer kinds, as in hytra (src/model/layer_kinds.cpp): `*` attention and
`-` MLP live here, hybrid_peer.py adds `M` (Mamba-2). Each kind names its module, the matmul weights a token
is multiplied by and its other FLOPs per token, so the peers count model FLOPs as src/model/flops.cpp does.
Also here: the language-model shell (untied embedding, final RMSNorm, output layer, cross-entropy), the flags
both peers take, the timed training loop that prints the record, and the kernel peers' (ssd_peer.py,
grouped_mm_peer.py) timing and bench_ops-format record.
"""
import argparse, contextlib, gc, json, math, statistics, time
from dataclasses import dataclass
from typing import Callable
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch.nn.attention import SDPBackend, sdpa_kernel

PEAK_TFLOPS = 989.0  # H100 SXM dense bf16, the MFU denominator hytra uses
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
# Megatron init: output projections use std / sqrt(2 L)
OUTPUT_PROJECTIONS = ("linear_proj.weight", "linear_fc2.weight", "out_proj.weight")


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


class Attention(nn.Module):
    """`*`: pre-RMSNorm -> fused QKV without bias (rows grouped per KV group, Megatron's layout) -> RoPE
    rotate-half when the model passes tables -> causal GQA SDPA -> output projection -> residual."""

    def __init__(self, a):
        super().__init__()
        self.nh, self.ng, self.hd, self.gqa = a.num_attention_heads, a.num_query_groups, a.head_dim, a.gqa
        self.input_layernorm = RMSNorm(a.hidden_size, a.norm_epsilon)
        self.linear_qkv = nn.Linear(a.hidden_size, (self.nh + 2 * self.ng) * self.hd, bias=False)
        self.linear_proj = nn.Linear(self.nh * self.hd, a.hidden_size, bias=False)

    def forward(self, x, rope):
        b, s, _ = x.shape
        qpg = self.nh // self.ng  # query heads per KV group
        # Megatron's QKV row layout: per KV group g, [q heads of g; k_g; v_g].
        qkv = self.linear_qkv(self.input_layernorm(x)).view(b, s, self.ng, qpg + 2, self.hd)
        q = qkv[:, :, :, :qpg].reshape(b, s, self.nh, self.hd)
        k, v = qkv[:, :, :, qpg], qkv[:, :, :, qpg + 1]  # [b, s, ng, hd]
        if rope is not None:
            cos, sin = rope
            q = (q * cos + rotate_half(q) * sin).to(v.dtype)
            k = (k * cos + rotate_half(k) * sin).to(v.dtype)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [b, heads, s, hd]
        if self.gqa == "native":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # query head i uses KV head i // qpg, as in the grouped layout above
            k, v = k.repeat_interleave(qpg, dim=1), v.repeat_interleave(qpg, dim=1)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.linear_proj(o.transpose(1, 2).reshape(b, s, self.nh * self.hd))


class Mlp(nn.Module):
    """`-`: pre-RMSNorm -> fc1 -> activation -> fc2 -> residual. swiglu: fc1 to 2F, first half = gate,
    silu(gate) * up; squared_relu: relu(h)^2 (Megatron's squared_relu)."""

    def __init__(self, a):
        super().__init__()
        self.glu = a.activation == "swiglu"
        self.pre_mlp_layernorm = RMSNorm(a.hidden_size, a.norm_epsilon)
        self.linear_fc1 = nn.Linear(a.hidden_size, (2 if self.glu else 1) * a.ffn_hidden_size, bias=False)
        self.linear_fc2 = nn.Linear(a.ffn_hidden_size, a.hidden_size, bias=False)

    def forward(self, x, rope):
        h = self.linear_fc1(self.pre_mlp_layernorm(x))
        if self.glu:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.relu(h).square()
        return x + self.linear_fc2(h)


@dataclass
class Kind:
    """One pattern symbol, as a row of hytra's layer_kinds(): its module and its FLOPs per token."""
    make: Callable           # args -> nn.Module with forward(x, rope)
    matmul_params: Callable  # args -> the weights a token is multiplied by (x 6 for a training step)
    other_flops: Callable    # args -> the other FLOPs per token and training step


def attention_params(a):  # linear_qkv + linear_proj
    h, nh, ng, hd = a.hidden_size, a.num_attention_heads, a.num_query_groups, a.head_dim
    return h * (nh + 2 * ng) * hd + nh * hd * h


def attention_core_flops(a):  # causal QK^T and PV, a step is 3 forwards
    return 6.0 * a.seq_length * a.num_attention_heads * a.head_dim


def mlp_params(a):  # linear_fc1 (to 2F with a GLU) + linear_fc2
    h, f = a.hidden_size, a.ffn_hidden_size
    return h * f * (2 if a.activation == "swiglu" else 1) + f * h


KINDS = {"*": Kind(Attention, attention_params, attention_core_flops), "-": Kind(Mlp, mlp_params, lambda a: 0.0)}


def model_flops(a, pattern, kinds):
    """(matmul weights, model FLOPs per token) as src/model/flops.cpp: 6 x (every sub-layer's matmul weights
    + LM head) + every sub-layer's other FLOPs. No embedding lookup, no norms."""
    matmul = sum(kinds[c].matmul_params(a) for c in pattern) + a.vocab_size * a.hidden_size
    return matmul, 6.0 * matmul + sum(kinds[c].other_flops(a) for c in pattern)


class LanguageModel(nn.Module):
    """Untied embedding -> the pattern's sub-layers (bf16 residual stream, as in Megatron bf16 training) ->
    final RMSNorm -> output layer -> cross-entropy over the padded vocabulary."""

    def __init__(self, a, pattern, kinds):
        super().__init__()
        self.word_embeddings = nn.Embedding(a.vocab_size, a.hidden_size)
        self.layers = nn.ModuleList(kinds[c].make(a) for c in pattern)
        self.final_norm = RMSNorm(a.hidden_size, a.norm_epsilon)
        self.output_layer = nn.Linear(a.hidden_size, a.vocab_size, bias=False)
        self.rope = a.position_embedding == "rope"
        if self.rope:
            hd = a.head_dim
            inv_freq = 1.0 / (a.rotary_base ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
            freqs = torch.outer(torch.arange(a.seq_length, dtype=torch.float32), inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]  # [s, 1, hd], broadcasts over heads
            self.register_buffer("cos", emb.cos(), persistent=False)
            self.register_buffer("sin", emb.sin(), persistent=False)
        std, out_std = a.init_method_std, a.init_method_std / math.sqrt(2 * a.num_layers)
        for name, p in self.named_parameters():
            if p.dim() == 2:  # Megatron init: normal(0, std); output projections scaled by 1/sqrt(2L)
                nn.init.normal_(p, 0.0, out_std if name.endswith(OUTPUT_PROJECTIONS) else std)

    def forward(self, tokens, labels):
        s = tokens.shape[1]
        x = self.word_embeddings(tokens).to(torch.bfloat16)
        rope = (self.cos[:s], self.sin[:s]) if self.rope else None
        for layer in self.layers:
            x = layer(x, rope)
        return self.loss(x, labels)

    def loss(self, x, labels):
        logits = self.output_layer(self.final_norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1))


def compile_whole(model):
    """torch.compile of the model's forward + loss (and, through AOTAutograd, its backward)."""
    return torch.compile(model)


def compile_per_layer(model):
    """torch.compile of each sub-layer and of the loss head, the model's loop staying eager (torchtitan's
    per-block scheme). For models with graph breaks inside a sub-layer: a break inside the whole model's
    layer loop makes dynamo compile one resume function per break, each guarded on the loop's position."""
    for layer in model.layers:
        layer.compile()
    model.loss = torch.compile(model.loss)
    return model


def parser(doc, **defaults):
    """The flags both peers take; `defaults` overrides a peer's own defaults."""
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--mode", choices=["eager", "compile", "both"], default="both")
    p.add_argument("--hidden-size", type=int, default=2048)
    p.add_argument("--num-attention-heads", type=int, default=32)
    p.add_argument("--num-query-groups", type=int, default=8)
    p.add_argument("--ffn-hidden-size", type=int, default=8192)
    p.add_argument("--vocab-size", type=int, default=50304, help="already padded (GPT-2's 50257 -> 50304)")
    p.add_argument("--seq-length", type=int, default=4096)
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--global-batch-size", type=int, nargs="+", default=[2],
                   help="one run per value (one process: the Triton autotuning and compile caches are reused)")
    p.add_argument("--norm-epsilon", type=float, default=1e-5)
    p.add_argument("--init-method-std", type=float, default=0.02)
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--gqa", choices=["native", "repeat"], default="native",
                   help="native: SDPA enable_gqa=True; repeat: repeat_interleave k/v to all heads")
    p.add_argument("--sdpa-backend", choices=["auto"] + list(BACKENDS), default="auto")
    p.add_argument("--config-name", default=None, help="default: a shape summary")
    p.add_argument("--json", default=None, help="append one JSON line per mode to this file")
    p.set_defaults(**defaults)
    return p


def start(a, pattern, kinds, config_name):
    """Checks the shapes, allows TF32, prints the device, parameter and FLOP lines; returns FLOPs per token."""
    assert a.num_attention_heads % a.num_query_groups == 0
    assert all(g % a.micro_batch_size == 0 for g in a.global_batch_size), \
        "--global-batch-size: each must be a multiple of --micro-batch-size"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    matmul, flops_token = model_flops(a, pattern, kinds)
    with torch.device("meta"):  # counts the parameters without allocating them
        model = LanguageModel(a, pattern, kinds)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    assert linear == matmul, f"the FLOP count's matmul weights ({matmul}) differ from the model's ({linear})"
    print(f"device={torch.cuda.get_device_name()} torch={torch.__version__} config={config_name} pattern={pattern}")
    print(f"params={sum(p.numel() for p in model.parameters())} matmul_params={matmul} "
          f"flops_per_token={flops_token:.6e}")
    return flops_token


def run_mode(mode, a, gbs, pattern, kinds, flops_token, config_name, compile_model, model_class=None):
    """Trains `a.warmup_steps + a.steps` steps of `gbs` sequences of random tokens; prints the record (and with
    --json appends it). model_class: LanguageModel or a subclass taking the same arguments."""
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    counters.clear()
    torch.manual_seed(a.seed)
    model = (model_class or LanguageModel)(a, pattern, kinds).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    # The clip and the fused AdamW step stay eager: fused AdamW is already a few multi-tensor kernels.
    fwd = compile_model(model) if mode == "compile" else model
    n_micro = gbs // a.micro_batch_size
    gen = torch.Generator(device="cuda").manual_seed(a.seed)
    data = [torch.randint(0, a.vocab_size, (a.micro_batch_size, a.seq_length + 1), device="cuda", generator=gen)
            for _ in range(n_micro)]

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
    tokens_s = gbs * a.seq_length / (step_ms / 1e3)
    tflops = flops_token * tokens_s / 1e12
    rec = {"peer": mode, "config": config_name, "mbs": a.micro_batch_size, "gbs": gbs,
           "seq": a.seq_length, "step_ms": round(step_ms, 3), "tokens_per_s": round(tokens_s, 1),
           "tflops_per_gpu": round(tflops, 2), "mfu": round(100 * tflops / PEAK_TFLOPS, 2),
           "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2), "loss": round(loss, 5),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__, "gqa": a.gqa,
           "sdpa_backend": a.sdpa_backend, "min_step_ms": round(min(times), 3), "steps": a.steps,
           "warmup_s": round(warmup_s, 1), "flops_per_token": flops_token}
    print(" ".join(f"{k}={rec[k]}" + ("%" if k == "mfu" else "") for k in
                   ("peer", "config", "mbs", "gbs", "seq", "step_ms", "tokens_per_s", "tflops_per_gpu", "mfu",
                    "peak_mem_gib", "loss")))
    graphs = ""
    if mode == "compile":  # how much of the step the compiler saw: compiled graphs and graph breaks
        graphs = f"; {counters['stats']['unique_graphs']} graphs, {sum(counters['graph_break'].values())} graph breaks"
    print(f"# {mode}: {a.warmup_steps} warm-up steps took {warmup_s:.1f} s; step_ms min {min(times):.3f} "
          f"max {max(times):.3f}{graphs}")
    if a.json:
        with open(a.json, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
    del model, opt, fwd, data, step
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def run_modes(a, pattern, kinds, flops_token, config_name, compile_model):
    for gbs in a.global_batch_size:
        for mode in (["eager", "compile"] if a.mode == "both" else [a.mode]):
            run_mode(mode, a, gbs, pattern, kinds, flops_token, config_name, compile_model)


# Kernel peers: the median of `repeats` timed calls (CUDA events) after `warmup` calls, and bench_ops's record.
def median_ms(call, warmup, repeats):
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    ms = []
    for _ in range(repeats):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        call()
        t1.record()
        t1.synchronize()
        ms.append(t0.elapsed_time(t1))
    return statistics.median(ms)


def record(op, shape, dtype, ms, flops, device):  # bench_ops's "%-15s %-32s %-5s %10.4f %14s  %s"
    per_s = flops / (ms * 1e-3)
    rate = f"{per_s / 1e12:.1f} TFLOP/s" if per_s >= 1e12 else f"{per_s / 1e9:.2f} GFLOP/s"
    print(f"{op:<15} {shape:<32} {dtype:<5} {ms:10.4f} {rate:>14}  {device}", flush=True)
