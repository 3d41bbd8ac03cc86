#!/usr/bin/env python3
"""PyTorch peer of hytra's hybrid stack (Mamba-2 + attention + MLP), timed eager and under torch.compile.

Defaults are examples/nemotron-h-1b: pattern M-M-M*-M-M-M*-M-M-M*-M-M- (11 `M`, 11 `-`, 3 `*`), hidden 2048;
`M` Mamba-2 with 64 heads x 64, state 128, 8 groups, chunk 128, conv kernel 4; `*` 16 heads / 8 KV heads x 128
without position embedding; `-` squared-ReLU MLP, ffn 8192; untied embedding, vocab 50304, seq 4096. Every
sub-layer is pre-RMSNorm with a residual. fp32 parameters, bf16 autocast, fused AdamW, grad clipping at 1.0.
The shell, the `*` and `-` sub-layers, the FLOP count and the training loop are peer_common.py's.
"""
import math, os, sys
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "third_party"))
from mamba_ssm.ops.triton.layernorm_gated import rmsnorm_fn  # noqa: E402
from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined  # noqa: E402

from peer_common import KINDS, Kind, RMSNorm, compile_per_layer, parser, run_modes, start  # noqa: E402

D_CONV = 4  # Megatron's d_conv
# Under torch.compile the Triton kernels run as they are, each call a graph break; inductor compiles the rest.
ssd_scan = torch.compiler.disable(mamba_chunk_scan_combined)
gated_rmsnorm = torch.compiler.disable(rmsnorm_fn)


class Mamba2Mixer(nn.Module):
    """`M` (docs/spec/mamba_gdn.md §1): pre-RMSNorm -> in_proj to [z, xBC, dt] -> xBC = silu(depthwise causal
    conv1d over time + bias) -> split x, B, C -> SSD chunk scan (A = -exp(A_log), softplus(dt + dt_bias), D skip)
    -> gated RMSNorm norm(y * silu(z)) over G groups, eps 1e-5 -> out_proj -> residual.

    Megatron-Core's MambaMixer without its fused path (mamba_split_conv1d_scan_combined needs the causal_conv1d
    CUDA extension): the same ops in its order, minus its [s, b] <-> [b, s] copies (this model is batch-first).
    """

    def __init__(self, a):
        super().__init__()
        self.H, self.P, self.G, self.N = a.mamba_num_heads, a.mamba_head_dim, a.mamba_num_groups, a.mamba_state_dim
        self.chunk_size, self.d_inner = a.mamba_chunk_size, self.H * self.P
        self.conv_dim = self.d_inner + 2 * self.G * self.N
        self.input_layernorm = RMSNorm(a.hidden_size, a.norm_epsilon)
        self.in_proj = nn.Linear(a.hidden_size, self.d_inner + self.conv_dim + self.H, bias=False)
        # Default init = Megatron's: kaiming-uniform (a = sqrt 5) weight and bias, U(+-1/sqrt(d_conv)).
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, D_CONV, groups=self.conv_dim, padding=D_CONV - 1)
        dt = torch.exp(torch.rand(self.H) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
        self.A_log = nn.Parameter(torch.empty(self.H).uniform_(1, 16).log())
        self.D = nn.Parameter(torch.ones(self.H))
        self.norm_weight = nn.Parameter(torch.ones(self.d_inner))
        self.out_proj = nn.Linear(self.d_inner, a.hidden_size, bias=False)

    def forward(self, x, rope):
        s = x.shape[1]
        z, xbc, dt = self.in_proj(self.input_layernorm(x)).split([self.d_inner, self.conv_dim, self.H], dim=-1)
        # Channels first for the conv; the padding is on both ends, so the first s outputs are the causal ones.
        xbc = F.silu(self.conv1d(xbc.transpose(1, 2).contiguous())[..., :s]).transpose(1, 2)
        xs, B, C = xbc.split([self.d_inner, self.G * self.N, self.G * self.N], dim=-1)
        y = ssd_scan(xs.unflatten(-1, (self.H, self.P)), dt, -torch.exp(self.A_log.float()),
                     B.unflatten(-1, (self.G, self.N)), C.unflatten(-1, (self.G, self.N)), self.chunk_size,
                     D=self.D, dt_bias=self.dt_bias, dt_softplus=True)
        y = gated_rmsnorm(y.flatten(2), self.norm_weight, None, z=z, eps=1e-5, group_size=self.d_inner // self.G,
                          norm_before_gate=False)
        return x + self.out_proj(y)


def mamba_params(a):  # in_proj + out_proj
    h, d_inner, gn = a.hidden_size, a.mamba_num_heads * a.mamba_head_dim, a.mamba_num_groups * a.mamba_state_dim
    return h * (2 * d_inner + 2 * gn + a.mamba_num_heads) + d_inner * h


def ssd_flops(a):  # the SSD scan: Megatron's 7 d_inner N per token forward, a step is 3 forwards
    return 3.0 * 7.0 * a.mamba_num_heads * a.mamba_head_dim * a.mamba_state_dim


HYBRID_KINDS = {**KINDS, "M": Kind(Mamba2Mixer, mamba_params, ssd_flops)}


def add_mamba_args(p):
    p.add_argument("--mamba-num-heads", type=int, default=64)
    p.add_argument("--mamba-head-dim", type=int, default=64)
    p.add_argument("--mamba-num-groups", type=int, default=8)
    p.add_argument("--mamba-state-dim", type=int, default=128)
    p.add_argument("--mamba-chunk-size", type=int, default=128)


def main():
    p = parser(__doc__, num_attention_heads=16)
    p.add_argument("--hybrid-layer-pattern", default="M-M-M*-M-M-M*-M-M-M*-M-M-")
    p.add_argument("--kv-channels", type=int, default=128, help="attention head dim")
    add_mamba_args(p)
    a = p.parse_args()
    assert a.mamba_num_heads % a.mamba_num_groups == 0
    pattern = a.hybrid_layer_pattern
    assert set(pattern) <= set(HYBRID_KINDS), f"--hybrid-layer-pattern: symbols {''.join(HYBRID_KINDS)} only"
    a.head_dim, a.activation, a.position_embedding = a.kv_channels, "squared_relu", "none"
    a.num_layers = len(pattern)  # Megatron's num_layers of a hybrid model: one per symbol
    config_name = a.config_name or f"hybrid-h{a.hidden_size}-{pattern}"
    flops_token = start(a, pattern, HYBRID_KINDS, config_name)
    run_modes(a, pattern, HYBRID_KINDS, flops_token, config_name, compile_per_layer)


if __name__ == "__main__":
    main()
