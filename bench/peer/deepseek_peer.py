#!/usr/bin/env python3
"""PyTorch peer of hytra's DeepSeek-V3-like model (bench/configs/deepseek-v3-2b.yaml), timed eager and under
torch.compile.

The pattern [+-][+E]x7/+E: `+` multi-latent attention (docs/spec/mla.md: hidden 2048, 16 heads, query latent 768 and
key/value latent 512 with RMSNorms, dn 128 no-RoPE and dr 64 RoPE channels per query/key head with one shared RoPE
key, dv 128; YaRN factor 40 with mscale 1/1; SDPA over dn + dr with the values zero-padded to that width, the
padding dropped after), `-` a SwiGLU MLP of 8192, `E` moe_peer.py's MoE (32 experts of 1024 top-6, sigmoid router
with the expert bias and 8 groups of which 3 are kept, scaling 2.5, one shared expert of 1024, the seq-aux loss),
and one MTP depth (enorm / hnorm of the next token's embedding and the hidden state, eh_proj, one `+E` layer, the
final norm and the shared output layer; its loss weighs 0.1). fp32 parameters, bf16 autocast, fused AdamW, grad
clipping at 1.0; the training loop is peer_common.py's.
"""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_pre_hook

from moe_peer import MoE, bias_update_hook, moe_params
from peer_common import KINDS, OUTPUT_PROJECTIONS, Kind, LanguageModel, RMSNorm, compile_whole, parser, run_mode


def yarn_mscale(factor, mscale):
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_tables(a):
    """cos and sin [s, 1, dr] of YaRN's RoPE over the dr channels (docs/spec/mla.md §2), rotate-half layout."""
    dr, base, f = a.qk_pos_emb_head_dim, a.rotary_base, a.rotary_scaling_factor
    extra = 1.0 / (base ** (torch.arange(0, dr, 2, dtype=torch.float32) / dr))
    corr = lambda r: dr * math.log(4096 / (2 * math.pi * r)) / (2 * math.log(base))
    low, high = max(math.floor(corr(32)), 0), min(math.ceil(corr(1)), dr - 1)
    high = high + 0.001 if high == low else high
    ramp = ((torch.arange(dr // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    inv_freq = extra / f * ramp + extra * (1 - ramp)
    freqs = torch.outer(torch.arange(a.seq_length, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]
    scale = yarn_mscale(f, a.mscale) / yarn_mscale(f, a.mscale_all_dim)
    return emb.cos() * scale, emb.sin() * scale


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class MLA(nn.Module):
    """`+`: input RMSNorm -> q = up(norm(down(x))), [kv_c, k_pe] = kv_down(x), [k_nope, v] = kv_up(norm(kv_c)) ->
    YaRN RoPE on q_pe and the shared k_pe -> causal SDPA over [q_nope, q_pe] . [k_nope, k_pe] with scale
    m^2 / sqrt(dn + dr), v padded to dn + dr -> linear_proj -> residual."""

    def __init__(self, a):
        super().__init__()
        h, n = a.hidden_size, a.num_attention_heads
        self.n, self.dn, self.dr, self.dv, self.rkv = n, a.qk_head_dim, a.qk_pos_emb_head_dim, a.v_head_dim, \
            a.kv_lora_rank
        self.input_layernorm = RMSNorm(h, a.norm_epsilon)
        self.linear_q_down_proj = nn.Linear(h, a.q_lora_rank, bias=False)
        self.q_layernorm = RMSNorm(a.q_lora_rank, a.norm_epsilon)
        self.linear_q_up_proj = nn.Linear(a.q_lora_rank, n * (self.dn + self.dr), bias=False)
        self.linear_kv_down_proj = nn.Linear(h, self.rkv + self.dr, bias=False)
        self.kv_layernorm = RMSNorm(self.rkv, a.norm_epsilon)
        self.linear_kv_up_proj = nn.Linear(self.rkv, n * (self.dn + self.dv), bias=False)
        self.linear_proj = nn.Linear(n * self.dv, h, bias=False)
        m = yarn_mscale(a.rotary_scaling_factor, a.mscale_all_dim)
        self.scale = m * m / math.sqrt(self.dn + self.dr)
        cos, sin = yarn_tables(a)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x, rope):
        b, s, _ = x.shape
        n, dn, dr, dv = self.n, self.dn, self.dr, self.dv
        xn = self.input_layernorm(x)
        q = self.linear_q_up_proj(self.q_layernorm(self.linear_q_down_proj(xn))).view(b, s, n, dn + dr)
        kv_c, k_pe = self.linear_kv_down_proj(xn).split([self.rkv, dr], dim=-1)
        k_nope, v = self.linear_kv_up_proj(self.kv_layernorm(kv_c)).view(b, s, n, dn + dv).split([dn, dv], dim=-1)
        q_nope, q_pe = q.split([dn, dr], dim=-1)
        cos, sin = self.cos[:s], self.sin[:s]
        q_pe = (q_pe * cos + rotate_half(q_pe) * sin).to(v.dtype)
        k_pe = (k_pe.unsqueeze(2) * cos + rotate_half(k_pe.unsqueeze(2)) * sin).to(v.dtype)
        qq = torch.cat([q_nope, q_pe], dim=-1).transpose(1, 2)
        kk = torch.cat([k_nope, k_pe.expand(b, s, n, dr)], dim=-1).transpose(1, 2)
        vv = F.pad(v, (0, dn + dr - dv)).transpose(1, 2)
        o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True, scale=self.scale)[..., :dv]
        return x + self.linear_proj(o.transpose(1, 2).reshape(b, s, n * dv))


def mla_params(a):  # as src/model/layer_kinds.cpp: the down and up projections + linear_proj
    h, n, rq, rkv = a.hidden_size, a.num_attention_heads, a.q_lora_rank, a.kv_lora_rank
    dq, dv = a.qk_head_dim + a.qk_pos_emb_head_dim, a.v_head_dim
    return h * rq + rq * n * dq + h * (rkv + a.qk_pos_emb_head_dim) + rkv * n * (a.qk_head_dim + dv) + n * dv * h


def mla_core_flops(a):  # causal QK^T over dn + dr and PV over dv, a step is 3 forwards
    return 3.0 * a.seq_length * a.num_attention_heads * (a.qk_head_dim + a.qk_pos_emb_head_dim + a.v_head_dim)


DS_KINDS = {**KINDS, "E": Kind(MoE, moe_params, lambda a: 0.0), "+": Kind(MLA, mla_params, mla_core_flops)}


class DeepSeekModel(LanguageModel):
    """LanguageModel with one MTP depth (docs/spec/mtp.md): the next token's embedding and the main stack's output,
    each normed, concatenated and projected (eh_proj), one `+E` layer, the final norm and the shared output layer;
    its cross-entropy against the labels one further on (the last position ignored) weighs mtp_scale."""

    def __init__(self, a, pattern, kinds):
        main, mtp = pattern.split("/")
        super().__init__(a, main, kinds)
        h = a.hidden_size
        self.enorm, self.hnorm = RMSNorm(h, a.norm_epsilon), RMSNorm(h, a.norm_epsilon)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        self.mtp_layers = nn.ModuleList(kinds[c].make(a) for c in mtp)
        self.mtp_norm = RMSNorm(h, a.norm_epsilon)
        self.mtp_scale = a.mtp_loss_scaling_factor
        std, out_std = a.init_method_std, a.init_method_std / math.sqrt(2 * a.num_layers)
        for name, p in [("eh_proj.weight", self.eh_proj.weight), *self.mtp_layers.named_parameters()]:
            if p.dim() == 2:  # Megatron's init, as LanguageModel's for the main stack
                nn.init.normal_(p, 0.0, out_std if name.endswith(OUTPUT_PROJECTIONS) else std)

    def forward(self, tokens, labels):
        x = self.word_embeddings(tokens).to(torch.bfloat16)
        for layer in self.layers:
            x = layer(x, None)
        lm = self.loss(x, labels)
        nxt = torch.roll(tokens, -1, dims=1)
        e = self.word_embeddings(nxt).to(torch.bfloat16)
        y = self.eh_proj(torch.cat([self.enorm(e), self.hnorm(x)], dim=-1))
        for layer in self.mtp_layers:
            y = layer(y, None)
        logits = self.output_layer(self.mtp_norm(y)).float()
        mtp_labels = torch.roll(labels, -1, dims=1)
        mtp_labels[:, -1] = -100
        mtp = F.cross_entropy(logits.view(-1, logits.shape[-1]), mtp_labels.reshape(-1), ignore_index=-100)
        return lm + self.mtp_scale * mtp


def flops_per_token(a, main, mtp):
    """src/model/flops.cpp: 6 x (matmul weights of every sub-layer, the LM head, and per MTP depth its layers,
    eh_proj and one more LM head) + the other FLOPs."""
    layers = main + mtp
    matmul = sum(DS_KINDS[c].matmul_params(a) for c in layers) + a.vocab_size * a.hidden_size
    matmul += 2 * a.hidden_size * a.hidden_size + a.vocab_size * a.hidden_size
    return 6.0 * matmul + sum(DS_KINDS[c].other_flops(a) for c in layers)


def main():
    p = parser(__doc__, num_attention_heads=16, num_query_groups=16, ffn_hidden_size=8192, norm_epsilon=1e-6)
    p.add_argument("--hybrid-layer-pattern", default="+-" + "+E" * 7 + "/+E")
    p.add_argument("--q-lora-rank", type=int, default=768)
    p.add_argument("--kv-lora-rank", type=int, default=512)
    p.add_argument("--qk-head-dim", type=int, default=128)
    p.add_argument("--qk-pos-emb-head-dim", type=int, default=64)
    p.add_argument("--v-head-dim", type=int, default=128)
    p.add_argument("--rotary-base", type=float, default=10000.0)
    p.add_argument("--rotary-scaling-factor", type=float, default=40.0)
    p.add_argument("--mscale", type=float, default=1.0)
    p.add_argument("--mscale-all-dim", type=float, default=1.0)
    p.add_argument("--num-experts", type=int, default=32)
    p.add_argument("--moe-router-topk", type=int, default=6)
    p.add_argument("--moe-router-num-groups", type=int, default=8)
    p.add_argument("--moe-router-group-topk", type=int, default=3)
    p.add_argument("--moe-router-topk-scaling-factor", type=float, default=2.5)
    p.add_argument("--moe-ffn-hidden-size", type=int, default=1024)
    p.add_argument("--moe-shared-expert-intermediate-size", type=int, default=1024)
    p.add_argument("--moe-aux-loss-coeff", type=float, default=1e-4)
    p.add_argument("--moe-router-enable-expert-bias", type=int, choices=[0, 1], default=1)
    p.add_argument("--moe-router-bias-update-rate", type=float, default=1e-3)
    p.add_argument("--moe-router-dtype", choices=["none", "fp32"], default="none")
    p.add_argument("--mtp-loss-scaling-factor", type=float, default=0.1)
    a = p.parse_args()
    pattern = a.hybrid_layer_pattern
    main_part, mtp_part = pattern.split("/")
    a.head_dim, a.activation, a.position_embedding, a.gqa = a.qk_head_dim, "swiglu", "none", "native"
    a.num_layers = len(main_part) // 2  # Megatron's count for the output projections' init: transformer layers
    config_name = a.config_name or "deepseek-v3-2b"
    flops = flops_per_token(a, main_part, mtp_part)
    torch.backends.cuda.matmul.allow_tf32 = True
    with torch.device("meta"):
        params = sum(p.numel() for p in DeepSeekModel(a, pattern, DS_KINDS).parameters())
    print(f"device={torch.cuda.get_device_name()} torch={torch.__version__} config={config_name} pattern={pattern}")
    print(f"params={params} flops_per_token={flops:.6e}")
    register_optimizer_step_pre_hook(bias_update_hook)
    for gbs in a.global_batch_size:
        MoE.aux_scale = a.micro_batch_size / gbs
        for mode in (["eager", "compile"] if a.mode == "both" else [a.mode]):
            run_mode(mode, a, gbs, pattern, DS_KINDS, flops, config_name, compile_whole, model_class=DeepSeekModel)


if __name__ == "__main__":
    main()
