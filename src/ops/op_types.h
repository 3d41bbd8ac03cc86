// The enum parameters of the ops (ops/ops.def documents their meaning at the ops that take them).
#pragma once

namespace hytra {
namespace ops {
enum class RouterScore { Softmax, Sigmoid };                            // moe_router_*, moe_aux_loss
enum class ExpertActivation { SwiGLU, QuickGeGLU, GeLU, SquaredReLU };  // moe_act_*
enum class MhcVariant { Main, Dev };                                    // sinkhorn_*, mhc_coeffs_*
}  // namespace ops
// The backends' namespaces (hytra::cpu, hytra::cuda) see them unqualified, as ops.def writes them.
using ops::ExpertActivation;
using ops::MhcVariant;
using ops::RouterScore;
}  // namespace hytra
