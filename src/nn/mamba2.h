// Mamba-2 mixer (`M`, docs/spec/mamba_gdn.md §1): f(x) = out_proj(gated_norm(ssd(conv(in_proj(norm(x)))), z)).
//   zxBCdt = in_proj(norm(x)), split along features into z (d_inner), xBC (d_inner + 2GN), dt (H);
//   xBC = silu(causal depthwise conv1d(xBC) + bias), split into x (H,P), B (G,N), C (G,N);
//   y = SSD scan (softplus(dt + dt_bias), A = -exp(A_log), D skip), chunk by chunk;
//   out = out_proj(rmsnorm_groups(y * silu(z)) * norm.weight)  (gate first; eps 1e-5, G groups).
// Keys under `<prefix>mixer.` (docs/spec/README.md decision 2): in_proj.layer_norm_weight, in_proj.weight
// [2 d_inner + 2GN + H, C], conv1d.weight [d_inner + 2GN, 1, d_conv], conv1d.bias, A_log [H],
// D [H], dt_bias [H], norm.weight [d_inner], out_proj.weight [C, d_inner]. No linear biases.
// Init (Megatron): in_proj N(0, std), out_proj N(0, std / sqrt(2 L)), conv weight and bias
// U(+-1/sqrt(d_conv)) (kaiming-uniform a=sqrt(5) of fan-in d_conv), dt_bias = softplus^-1 of a
// log-uniform dt in [1e-3, 0.1] (floor 1e-4), A_log = ln U(1, 16), D = 1, norm weight 1.
// The SSD scan reads the fp32 masters of dt_bias, A_log and D (docs/ARCHITECTURE.md "Precision": SSM maths in fp32).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "nn/linear.h"
#include "nn/norm.h"
#include "nn/pre_norm.h"

namespace hytra {

struct Mamba2Options : PreNormOptions {
  int64_t hidden = 0;        // C (d_model)
  int64_t num_heads = 0;     // H (--mamba-num-heads)
  int64_t head_dim = 64;     // P (--mamba-head-dim)
  int64_t state_dim = 128;   // N (--mamba-state-dim)
  int64_t num_groups = 8;    // G (--mamba-num-groups)
  int64_t conv_kernel = 4;   // d_conv
  int64_t chunk_size = 128;  // --mamba-chunk-size
};

class Mamba2Mixer : public PreNormModule {
 public:
  Mamba2Mixer(const Mamba2Options& opt, const std::string& prefix, ParamStore& store);

  Norm& input_norm() override { return *norm_; }
  Tensor forward_body(StepContext& ctx, const Tensor& y) override;  // y = norm(x) (B,T,C) -> (B,T,C)
  Tensor backward_body(StepContext& ctx, const Tensor& df) override;
  void backward_dw(StepContext& ctx) override;

 private:
  int64_t d_inner() const { return opt_.num_heads * opt_.head_dim; }
  int64_t conv_dim() const { return d_inner() + 2 * opt_.num_groups * opt_.state_dim; }
  // Row-pitched parts of a (B,T,2 d_inner + 2GN + H) in_proj-shaped tensor, read or written in place:
  // the gate z as (B*T, d_inner), the conv input xBC as (B,T,conv_dim) and the raw dt as (B,T,H).
  Tensor gate(const Tensor& zxbcdt) const {
    return zxbcdt.view({zxbcdt.size(0) * zxbcdt.size(1), zxbcdt.size(2)}).narrow(1, 0, d_inner());
  }
  Tensor conv_input(const Tensor& zxbcdt) const { return zxbcdt.narrow(2, d_inner(), conv_dim()); }
  Tensor dt_part(const Tensor& zxbcdt) const { return zxbcdt.narrow(2, d_inner() + conv_dim(), opt_.num_heads); }

  struct Cache {  // one-token decoding (nn/decode_cache.h)
    Tensor conv;  // (B,K-1,conv_dim): the last K-1 conv inputs
    Tensor ssm;   // (B,H,P,N) fp32: the SSD state
  };
  // forward_body with ctx.decode set: one token per sequence, (B,1,C), through the cached conv inputs and state.
  Tensor decode_body(StepContext& ctx, const Tensor& y);

  struct Saved {
    Tensor zxbcdt;  // (B,T,2 d_inner + 2GN + H) in_proj output: the gate z, the conv input, raw dt
    Tensor x;       // (B,T,H,P) conv output, x part
    Tensor b, c;    // (B,T,G,N) conv output, B and C parts
    Tensor y;       // (B*T, d_inner) SSD output
    Tensor rstd;    // (B*T, G) gated norm statistics
    std::vector<Tensor> ssd_kept;  // the SSD forward's intermediates its backward reuses (ops.def)
  };
  Mamba2Options opt_;
  std::unique_ptr<Norm> norm_;
  std::unique_ptr<Linear> in_proj_, out_proj_;
  Param* conv_w_;   // (conv_dim, 1, d_conv)
  Param* conv_b_;   // (conv_dim)
  Param* a_log_;    // (H)
  Param* d_;        // (H)
  Param* dt_bias_;  // (H)
  Param* norm_w_;   // (d_inner)
};

}  // namespace hytra
