// The enum and struct parameters of the ops (ops/ops.def documents their meaning at the ops that take them).
#pragma once
#include <cstdint>

namespace hytra {
namespace ops {
enum class RouterScore { Softmax, Sigmoid };                            // moe_router_*, moe_aux_loss
enum class ExpertActivation { SwiGLU, QuickGeGLU, GeLU, SquaredReLU };  // moe_act_*
enum class MhcVariant { Main, Dev };                                    // sinkhorn_*, mhc_coeffs_*
// A rotation of RoPE pairs (factor 1: rope_fwd's frequencies; else YaRN's, ops.def mla_qkv_fwd); mla_qkv_*.
struct Rotary {
  double base = 10000;
  double factor = 1, low = 0, high = 1, scale = 1;
  bool interleaved = false;
  int64_t first_position = 0;
};
}  // namespace ops
// The backends' namespaces (hytra::cpu, hytra::cuda) see them unqualified, as ops.def writes them.
using ops::ExpertActivation;
using ops::MhcVariant;
using ops::Rotary;
using ops::RouterScore;
}  // namespace hytra
