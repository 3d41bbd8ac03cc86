// The op names, one line each: drives the parity harness's coverage check and `hytra ops`.
// X(name, family). Keep in the order of ops.h.
#pragma once

#define HYTRA_OP_LIST(X)          \
  X(gemm, gemm)                   \
  X(fill, elementwise)            \
  X(copy, elementwise)            \
  X(add, elementwise)             \
  X(axpy, elementwise)            \
  X(scale, elementwise)           \
  X(slice_copy, elementwise)      \
  X(slice_scatter, elementwise)   \
  X(sum, reduce)                  \
  X(sum_squares, reduce)          \
  X(embedding_fwd, embedding)     \
  X(embedding_bwd, embedding)     \
  X(rmsnorm_fwd, norm)            \
  X(rmsnorm_bwd, norm)            \
  X(add_rmsnorm_fwd, norm)        \
  X(rmsnorm_bwd_add, norm)        \
  X(layernorm_fwd, norm)          \
  X(layernorm_bwd, norm)          \
  X(gated_rmsnorm_fwd, norm)      \
  X(gated_rmsnorm_bwd, norm)      \
  X(rope_fwd, rope)               \
  X(rope_bwd, rope)               \
  X(qkv_rope_fwd, rope)           \
  X(qkv_rope_bwd, rope)           \
  X(attention_fwd, attention)     \
  X(attention_bwd, attention)     \
  X(conv1d_fwd, conv1d)           \
  X(conv1d_bwd, conv1d)           \
  X(ssd_chunk_scan_fwd, ssd)      \
  X(ssd_chunk_scan_bwd, ssd)      \
  X(gated_delta_rule_fwd, gdn)    \
  X(gated_delta_rule_bwd, gdn)    \
  X(swiglu_fwd, activation)       \
  X(swiglu_bwd, activation)       \
  X(gelu_fwd, activation)         \
  X(gelu_bwd, activation)         \
  X(sqrelu_fwd, activation)       \
  X(sqrelu_bwd, activation)       \
  X(moe_router_fwd, moe_router)    \
  X(moe_router_bwd, moe_router)    \
  X(moe_aux_loss, moe_router)      \
  X(moe_z_loss, moe_router)        \
  X(gather_rows, moe_dispatch)     \
  X(scatter_add_rows, moe_dispatch) \
  X(moe_act_fwd, moe_dispatch)     \
  X(moe_act_bwd, moe_dispatch)     \
  X(sinkhorn_fwd, mhc)             \
  X(sinkhorn_bwd, mhc)             \
  X(mhc_coeffs_fwd, mhc)           \
  X(mhc_coeffs_bwd, mhc)           \
  X(mhc_aggregate_fwd, mhc_mix)    \
  X(mhc_aggregate_bwd, mhc_mix)    \
  X(mhc_combine_fwd, mhc_mix)      \
  X(mhc_combine_bwd, mhc_mix)      \
  X(lm_head_ce_fwd, cross_entropy) \
  X(lm_head_ce_bwd, cross_entropy) \
  X(lm_head_ce_fwd_bwd, cross_entropy) \
  X(random_normal, random)         \
  X(adamw, adamw)

namespace hytra::ops {
struct OpInfo {
  const char* name;
  const char* family;
};
#define HYTRA_OP_INFO(name, family) OpInfo{#name, #family},
inline constexpr OpInfo kOpList[] = {HYTRA_OP_LIST(HYTRA_OP_INFO)};
#undef HYTRA_OP_INFO
inline constexpr int kNumOps = int(sizeof(kOpList) / sizeof(kOpList[0]));
static_assert(kNumOps == 59, "update the op count when adding an op to HYTRA_OP_LIST");
}  // namespace hytra::ops
