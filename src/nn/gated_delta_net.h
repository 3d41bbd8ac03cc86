// Gated delta net (`G`, docs/spec/mamba_gdn.md §2): f(x) = out_proj(rmsnorm_heads(o) * silu(z)) with
//   qkvzba = in_proj(norm(x)), split along features into q, k (Hk*dk each), v, z (Hv*dv each),
//   beta_raw, alpha (Hv each);
//   [q k v] = silu(causal depthwise conv1d([q k v]) + bias);
//   o = gated delta rule (L2-normalised q and k, g = -exp(A_log) softplus(alpha + dt_bias),
//       beta = sigmoid(beta_raw), chunk size 64);
//   out_norm: RMSNorm over dv per head (weight [dv], eps --norm-epsilon), times silu(z).
// Keys under `<prefix>self_attention.` (docs/spec/names.md §2): in_proj.layer_norm_weight, in_proj.weight
// [2 Hk dk + 2 Hv dv + 2 Hv, C], conv1d.weight [2 Hk dk + Hv dv, 1, K], conv1d.bias, A_log [Hv],
// dt_bias [Hv], out_norm.weight [dv], out_proj.weight [C, Hv dv] (no linear biases by default, as
// Megatron's GDN; the bias option serves the gradient checks). Init (Megatron): in_proj N(0, std), out_proj N(0, std /
// sqrt(2 L)), conv weight and bias U(+-1/sqrt(K)), dt_bias = 1, A_log = ln U(1, 16), norms 1. The recurrence reads the
// fp32 masters of A_log and dt_bias (docs/ARCHITECTURE.md "Precision": SSM maths in fp32).
#pragma once
#include <memory>
#include <string>

#include "nn/linear.h"
#include "nn/norm.h"
#include "nn/pre_norm.h"

namespace hytra {

struct GatedDeltaNetOptions : PreNormOptions {
  int64_t hidden = 0;            // C
  int64_t key_heads = 16;        // Hk (--linear-num-key-heads)
  int64_t value_heads = 32;      // Hv (--linear-num-value-heads)
  int64_t key_head_dim = 128;    // dk (--linear-key-head-dim)
  int64_t value_head_dim = 128;  // dv (--linear-value-head-dim)
  int64_t conv_kernel = 4;       // --linear-conv-kernel-dim
  int64_t chunk_size = 64;
  bool bias = false;  // linear biases (Megatron: none)
};

class GatedDeltaNet : public PreNormModule {
 public:
  GatedDeltaNet(const GatedDeltaNetOptions& opt, const std::string& prefix, ParamStore& store);

  Norm& input_norm() override { return *norm_; }
  Tensor forward_body(StepContext& ctx, const Tensor& y) override;  // y = norm(x) (B,T,C) -> (B,T,C)
  Tensor backward_body(StepContext& ctx, const Tensor& df) override;
  void backward_dw(StepContext& ctx) override;

 private:
  int64_t qk_dim() const { return opt_.key_heads * opt_.key_head_dim; }
  int64_t v_dim() const { return opt_.value_heads * opt_.value_head_dim; }
  int64_t conv_dim() const { return 2 * qk_dim() + v_dim(); }
  int64_t proj_dim() const { return conv_dim() + v_dim() + 2 * opt_.value_heads; }
  // Row-pitched parts of a (B,T,proj_dim) in_proj-shaped tensor, read or written in place: the conv
  // input [q k v] as (B,T,conv_dim) and the gate z as (B*T, v_dim).
  Tensor conv_input(const Tensor& proj) const { return proj.narrow(2, 0, conv_dim()); }
  Tensor gate(const Tensor& proj) const {
    return proj.view({proj.size(0) * proj.size(1), proj.size(2)}).narrow(1, conv_dim(), v_dim());
  }

  struct Cache {  // one-token decoding (nn/decode_cache.h)
    Tensor conv;  // (B,K-1,conv_dim): the last K-1 conv inputs
    Tensor S;     // (B,Hv,dv,dk) fp32: the delta-rule state
  };
  // forward_body with ctx.decode set: one token per sequence, (B,1,C), through the cached conv inputs and state.
  Tensor decode_body(StepContext& ctx, const Tensor& y);

  struct Saved {
    Tensor proj;         // (B,T,proj_dim) in_proj output: the conv input and the gate z, read in place
    Tensor q, k;         // (B,T,Hk,dk) conv output
    Tensor v;            // (B,T,Hv,dv) conv output
    Tensor beta, alpha;  // (B,T,Hv) raw
    Tensor o;            // (B*T, Hv*dv) recurrence output
    Tensor rstd;         // (B*T, Hv) out_norm statistics
  };
  GatedDeltaNetOptions opt_;
  std::unique_ptr<Norm> norm_;
  std::unique_ptr<Linear> in_proj_, out_proj_;
  Param* conv_w_;      // (conv_dim, 1, K)
  Param* conv_b_;      // (conv_dim)
  Param* a_log_;       // (Hv)
  Param* dt_bias_;     // (Hv)
  Param* out_norm_w_;  // (dv)
};

}  // namespace hytra
