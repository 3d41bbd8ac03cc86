#!/usr/bin/env python3
"""PyTorch peer of hytra's mixture-of-experts stack (bench/configs/moe-2b.yaml), timed eager and under torch.compile.

Defaults are moe-2b: pattern *E*E*E*E*E*E*E*E, hidden 2048; `*` 16 heads / 4 KV heads x 128 with RoPE (base
10000); `E` 32 routed experts, top-6, expert FFN 1024 with SwiGLU, one shared SwiGLU expert of 2048 (no gate),
a sigmoid router with expert bias (aux-loss-free balancing, rate 1e-3) and the sequence-level aux loss (coeff
1e-4), dropless; untied embedding, vocab 50304, seq 4096. fp32 parameters, bf16 autocast, fused AdamW, grad
clipping at 1.0. The experts run TorchTitan-style: the (token, k) pairs sorted by expert, the tokens gathered
in that order, `torch._grouped_mm` for both expert GEMMs, the rows gathered back and summed over k.
The shell, the `*` sub-layer and the training loop are peer_common.py's.
"""
import math, weakref
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_pre_hook

from peer_common import KINDS, Kind, LanguageModel, RMSNorm, compile_per_layer, compile_whole, model_flops, \
    parser, run_mode

BF16 = torch.bfloat16
_MOE_LAYERS = weakref.WeakSet()  # live MoE layers, for the expert-bias update before each optimizer step


def grouped_mm(a, b, offs):
    """torch._grouped_mm of a [rows, K] (rows sorted by group) by b [G, K, N], group g = rows offs[g-1]:offs[g]."""
    return torch._grouped_mm(a, b, offs=offs)


class AuxLossScaler(torch.autograd.Function):
    """Megatron's MoEAuxLossAutoScaler: the identity on the activation; in backward it injects the aux loss's
    gradient, scaled like the LM loss's (1 / micro-batches). The loss value itself is never added to the LM loss
    (docs/spec/moe.md §2; hytra logs it apart)."""

    @staticmethod
    def forward(ctx, x, aux, scale):
        ctx.scale = scale
        ctx.save_for_backward(aux)
        return x.clone()

    @staticmethod
    def backward(ctx, dx):
        (aux,) = ctx.saved_tensors
        return dx, torch.full_like(aux, ctx.scale), None


class SharedExperts(nn.Module):
    """The shared expert (docs/spec/moe.md §6): a SwiGLU MLP of moe_shared_expert_intermediate_size on the same
    pre-MLP-norm output, no gate; forward returns its output alone (the MoE layer adds it)."""

    def __init__(self, a):
        super().__init__()
        self.linear_fc1 = nn.Linear(a.hidden_size, 2 * a.moe_shared_expert_intermediate_size, bias=False)
        self.linear_fc2 = nn.Linear(a.moe_shared_expert_intermediate_size, a.hidden_size, bias=False)

    def forward(self, h):
        gate, up = self.linear_fc1(h).chunk(2, dim=-1)
        return self.linear_fc2(F.silu(gate) * up)


class MoE(nn.Module):
    """`E` (docs/spec/moe.md): pre-RMSNorm -> router logits x W^T (bf16, hytra's default without
    --moe-router-dtype; fp32 with --moe-router-dtype fp32) -> s = sigmoid(logits) in fp32 -> top-k chosen on
    s + expert_bias, the unbiased s gathered and normalised p = s / (sum_k s + 1e-20), rounded to the logits'
    dtype -> the T*k (token, k) pairs stably sorted by expert, the tokens gathered in that order -> grouped fc1
    ([gate; up] per expert) -> silu(gate) * up -> times p (after the activation, before fc2, as Megatron's
    TEGroupedMLP) -> grouped fc2 -> rows back in (token, k) order, summed over k -> + shared expert -> residual.

    The seq-aux loss (§2): per sequence, coeff * E / (k * S^2) * sum_e (sum_s p'[s, e]) * n[e], averaged over
    the sequences, with p' = s normalised over all E and n[e] the tokens routed to e by top-k of p' (no bias);
    its gradient goes in through AuxLossScaler. Each training micro-batch adds its tokens per expert to a
    buffer; before each optimizer step (once per global batch) bias += rate * sign(mean count - count_e) and
    the counts are reset (§1).
    """
    aux_scale = 1.0  # the LM loss's gradient scale, 1 / micro-batches; set per run

    def __init__(self, a):
        super().__init__()
        H, E, Fe = a.hidden_size, a.num_experts, a.moe_ffn_hidden_size
        self.E, self.k, self.Fe = E, a.moe_router_topk, Fe
        self.aux_coeff, self.rate, self.fp32_router = a.moe_aux_loss_coeff, a.moe_router_bias_update_rate, \
            a.moe_router_dtype == "fp32"
        # Group-limited routing (Megatron's group_limited_topk; 0: none) and the top-k scaling factor (0: none).
        self.groups, self.group_topk = getattr(a, "moe_router_num_groups", 0), getattr(a, "moe_router_group_topk", 0)
        self.scaling = getattr(a, "moe_router_topk_scaling_factor", 0.0)
        self.pre_mlp_layernorm = RMSNorm(H, a.norm_epsilon)
        self.router = nn.Linear(H, E, bias=False)
        # Per expert, nn.Linear's [out, in] layout: fc1 rows [gate; up] (hytra's and Megatron's), fc2 [H, Fe].
        # 3-D, so LanguageModel's init loop leaves them alone: Megatron's init here, fc2 as an output projection.
        self.weight1 = nn.Parameter(torch.empty(E, 2 * Fe, H))
        self.weight2 = nn.Parameter(torch.empty(E, H, Fe))
        nn.init.normal_(self.weight1, 0.0, a.init_method_std)
        nn.init.normal_(self.weight2, 0.0, a.init_method_std / math.sqrt(2 * a.num_layers))
        self.shared_experts = SharedExperts(a) if a.moe_shared_expert_intermediate_size > 0 else None
        self.use_bias = a.moe_router_enable_expert_bias
        self.register_buffer("expert_bias", torch.zeros(E, dtype=torch.float32))
        self.register_buffer("tokens_per_expert", torch.zeros(E, dtype=torch.float32))
        _MOE_LAYERS.add(self)

    def forward(self, x, rope):
        b, s, h = x.shape
        E, k = self.E, self.k
        xn = self.pre_mlp_layernorm(x)
        flat = xn.reshape(b * s, h)
        T = flat.shape[0]
        if self.fp32_router:
            with torch.autocast("cuda", enabled=False):
                logits = F.linear(flat.float(), self.router.weight.float())
        else:
            logits = self.router(flat)  # bf16 under autocast: Megatron's logits in the activation dtype
        scores = torch.sigmoid(logits.float())  # [T, E], all score arithmetic in fp32
        choose = scores + self.expert_bias if self.use_bias else scores
        if self.groups > 1:  # each group scored by the sum of its top k / group_topk, the best group_topk kept
            G = self.groups
            group = choose.detach().view(T, G, E // G).topk(k // self.group_topk, dim=-1).values.sum(-1)
            keep = torch.zeros(T, G, device=x.device).scatter_(1, group.topk(self.group_topk, dim=-1).indices, 1.0)
            choose = choose.masked_fill(keep.repeat_interleave(E // G, dim=1) == 0, float("-inf"))
        top = torch.topk(choose.detach(), k, dim=-1).indices  # [T, k]; the bias only chooses
        sel = scores.gather(1, top)
        probs = sel / (sel.sum(-1, keepdim=True) + 1e-20)
        probs = (probs * self.scaling if self.scaling > 0 else probs).to(logits.dtype)
        training = torch.is_grad_enabled()
        if training and self.aux_coeff > 0:
            probs = AuxLossScaler.apply(probs, self.seq_aux_loss(scores, b, s), MoE.aux_scale)

        # Dispatch: the (token, k) pairs stably sorted by expert (token order inside an expert, Megatron's
        # permute); group g's rows end at offs[g].
        eid = top.reshape(-1)
        order = torch.argsort(eid, stable=True)
        counts = torch.zeros(E, dtype=torch.int64, device=x.device).scatter_add_(0, eid, torch.ones_like(eid))
        if training and self.use_bias:
            self.tokens_per_expert.add_(counts.float())
        offs = counts.cumsum(0).to(torch.int32)
        xs = flat.index_select(0, order // k).to(BF16)
        h1 = grouped_mm(xs, self.weight1.to(BF16).transpose(-2, -1), offs)  # [T k, 2 Fe]
        gate, up = h1.chunk(2, dim=-1)
        act = F.silu(gate) * up * probs.reshape(-1).index_select(0, order).to(BF16).unsqueeze(-1)
        ys = grouped_mm(act, self.weight2.to(BF16).transpose(-2, -1), offs)  # [T k, H]
        # Combine: back to (token, k) order by the inverse permutation, then the k rows of a token summed.
        inv = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=x.device))
        out = ys.index_select(0, inv).view(T, k, h).sum(1)
        if self.shared_experts is not None:
            out = out + self.shared_experts(xn).reshape(T, h)
        return x + out.view(b, s, h).to(x.dtype)

    def seq_aux_loss(self, scores, b, s):
        E, k = self.E, self.k
        p = scores / (scores.sum(-1, keepdim=True) + 1e-20)  # [T, E]
        top = torch.topk(p.detach(), k, dim=-1).indices
        routed = torch.zeros_like(p).scatter_(1, top, 1.0)
        agg = p.view(b, s, E).sum(1)          # [b, E]: each sequence its own set of experts
        n = routed.view(b, s, E).sum(1)
        return (agg * n).sum() * (E * self.aux_coeff / (k * s * s)) / b

    @torch.no_grad()
    def update_expert_bias(self):
        c = self.tokens_per_expert
        self.expert_bias.add_(self.rate * torch.sign(c.mean() - c))
        c.zero_()

    def token_weights(self):
        """The matmul weights one token is multiplied by: router, k of the E experts' fc1 and fc2, shared."""
        shared = 0 if self.shared_experts is None else \
            self.shared_experts.linear_fc1.weight.numel() + self.shared_experts.linear_fc2.weight.numel()
        return self.router.weight.numel() + (self.weight1.numel() + self.weight2.numel()) * self.k // self.E + shared


def moe_params(a):  # as src/model/layer_kinds.cpp: router, k routed experts (SwiGLU fc1 to 2 Fe, fc2), shared
    H, Fe, Fs = a.hidden_size, a.moe_ffn_hidden_size, a.moe_shared_expert_intermediate_size
    return a.num_experts * H + a.moe_router_topk * (H * Fe * 2 + Fe * H) + (H * Fs * 2 + Fs * H)


MOE_KINDS = {**KINDS, "E": Kind(MoE, moe_params, lambda a: 0.0)}


def bias_update_hook(opt, args, kwargs):
    """Before every optimizer step (after the last micro-batch's backward, as Megatron's finalize_model_grads):
    the expert-bias update of each MoE layer this optimizer trains."""
    ids = {id(p) for g in opt.param_groups for p in g["params"]}
    for m in list(_MOE_LAYERS):
        if m.use_bias and id(m.router.weight) in ids:
            m.update_expert_bias()


def start(a, pattern, config_name):
    """Like peer_common.start, with the MoE layers' per-token weights in the check against the FLOP count."""
    assert a.num_attention_heads % a.num_query_groups == 0
    assert all(g % a.micro_batch_size == 0 for g in a.global_batch_size), \
        "--global-batch-size: each must be a multiple of --micro-batch-size"
    assert a.moe_router_topk <= a.num_experts
    for n, v in (("--hidden-size", a.hidden_size), ("--moe-ffn-hidden-size", a.moe_ffn_hidden_size)):
        assert v % 8 == 0, f"{n}: torch._grouped_mm needs rows of a multiple of 16 bytes"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    matmul, flops_token = model_flops(a, pattern, MOE_KINDS)
    with torch.device("meta"):
        model = LanguageModel(a, pattern, MOE_KINDS)
    moe = [m for m in model.modules() if isinstance(m, MoE)]
    in_moe = {id(p) for m in moe for p in m.parameters()}
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear) and id(m.weight) not in in_moe)
    counted = linear + sum(m.token_weights() for m in moe)
    assert counted == matmul, f"the FLOP count's matmul weights ({matmul}) differ from the model's ({counted})"
    print(f"device={torch.cuda.get_device_name()} torch={torch.__version__} config={config_name} pattern={pattern}")
    print(f"params={sum(p.numel() for p in model.parameters())} matmul_params={matmul} "
          f"flops_per_token={flops_token:.6e}")
    return flops_token


def main():
    p = parser(__doc__, num_attention_heads=16, num_query_groups=4)
    p.add_argument("--hybrid-layer-pattern", default="*E" * 8)
    p.add_argument("--kv-channels", type=int, default=128, help="attention head dim")
    p.add_argument("--rotary-base", type=float, default=10000.0)
    p.add_argument("--num-experts", type=int, default=32)
    p.add_argument("--moe-router-topk", type=int, default=6)
    p.add_argument("--moe-ffn-hidden-size", type=int, default=1024)
    p.add_argument("--moe-shared-expert-intermediate-size", type=int, default=2048, help="0: no shared expert")
    p.add_argument("--moe-aux-loss-coeff", type=float, default=1e-4, help="seq_aux_loss; 0: none")
    p.add_argument("--moe-router-enable-expert-bias", type=int, choices=[0, 1], default=1)
    p.add_argument("--moe-router-bias-update-rate", type=float, default=1e-3)
    p.add_argument("--moe-router-dtype", choices=["none", "fp32"], default="none",
                   help="none: logits in the activation dtype (hytra's and Megatron's default); fp32")
    p.add_argument("--compile-scope", choices=["whole", "layer"], default="whole",
                   help="whole: torch.compile of the model's forward + loss; layer: of each sub-layer and the loss")
    a = p.parse_args()
    if not hasattr(torch, "_grouped_mm"):
        raise SystemExit(f"moe_peer.py: this torch ({torch.__version__}) has no torch._grouped_mm (2.8 or later)")
    pattern = a.hybrid_layer_pattern
    assert set(pattern) <= set(MOE_KINDS), f"--hybrid-layer-pattern: symbols {''.join(MOE_KINDS)} only"
    a.head_dim, a.activation, a.position_embedding = a.kv_channels, "swiglu", "rope"
    a.num_layers = len(pattern)  # Megatron's num_layers of a hybrid model: one per symbol
    config_name = a.config_name or (f"moe-h{a.hidden_size}-{pattern}-e{a.num_experts}k{a.moe_router_topk}"
                                    f"f{a.moe_ffn_hidden_size}s{a.moe_shared_expert_intermediate_size}")
    flops_token = start(a, pattern, config_name)
    register_optimizer_step_pre_hook(bias_update_hook)
    compile_model = compile_whole if a.compile_scope == "whole" else compile_per_layer
    for gbs in a.global_batch_size:
        MoE.aux_scale = a.micro_batch_size / gbs
        for mode in (["eager", "compile"] if a.mode == "both" else [a.mode]):
            run_mode(mode, a, gbs, pattern, MOE_KINDS, flops_token, config_name, compile_model)


if __name__ == "__main__":
    main()
