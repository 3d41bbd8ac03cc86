// CUDA implementations of the ops, one free function per op, defined in ops/cuda/<family>.cu.
// Arguments were checked by ops:: dispatch; see ops.h for the semantics.
#pragma once
#include "core/tensor.h"
#include "ops/exec.h"
#include "ops/ops.h"

namespace hytra::cuda {

void gemm(Exec& ex, Tensor& C, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b, float alpha, float beta);
void fill(Exec& ex, Tensor& y, double value);
void copy(Exec& ex, Tensor& y, const Tensor& x);
void add(Exec& ex, Tensor& y, const Tensor& a, const Tensor& b);
void axpy(Exec& ex, Tensor& y, const Tensor& x, double alpha);
void scale(Exec& ex, Tensor& y, double alpha);
void slice_copy(Exec& ex, Tensor& y, const Tensor& x, int64_t dim, int64_t start);
void slice_scatter(Exec& ex, Tensor& y, const Tensor& x, int64_t dim, int64_t start);
void sum(Exec& ex, Tensor& out, const Tensor& x);
void sum_squares(Exec& ex, Tensor& out, const Tensor& x);
void embedding_fwd(Exec& ex, Tensor& y, const Tensor& ids, const Tensor& table);
void embedding_bwd(Exec& ex, Tensor& dtable, const Tensor& dy, const Tensor& ids);
void rmsnorm_fwd(Exec& ex, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, double eps);
void rmsnorm_bwd(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd);
void add_rmsnorm_fwd(Exec& ex, Tensor& sum, Tensor& y, Tensor& rstd, const Tensor& a, const Tensor& b, const Tensor& w, double eps);
void rmsnorm_bwd_add(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dres);
void layernorm_fwd(Exec& ex, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b, double eps);
void layernorm_bwd(Exec& ex, Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd);
void rope_fwd(Exec& ex, Tensor& y, const Tensor& x, int64_t rotary_dim, double base, bool interleaved);
void rope_bwd(Exec& ex, Tensor& dx, const Tensor& dy, int64_t rotary_dim, double base, bool interleaved);
void qkv_rope_fwd(Exec& ex, Tensor& q, Tensor& k, Tensor& v, const Tensor& qkv, int64_t rotary_dim, double base, bool interleaved);
void qkv_rope_bwd(Exec& ex, Tensor& dqkv, const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t rotary_dim, double base, bool interleaved);
void attention_fwd(Exec& ex, Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, double softmax_scale);
void attention_bwd(Exec& ex, Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, double softmax_scale);
void gated_rmsnorm_fwd(Exec& ex, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& z, const Tensor& w, int64_t group_size, double eps, bool norm_before_gate);
void gated_rmsnorm_bwd(Exec& ex, Tensor& dx, Tensor& dz, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& z, const Tensor& w, const Tensor& rstd, int64_t group_size, bool norm_before_gate);
void conv1d_fwd(Exec& ex, Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu);
void conv1d_bwd(Exec& ex, Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu);
void ssd_chunk_scan_fwd(Exec& ex, Tensor& y, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm, const Tensor& dt_bias, const Tensor& A_log, const Tensor& D, int64_t chunk_size);
void ssd_chunk_scan_bwd(Exec& ex, Tensor& dx, Tensor& ddt_raw, Tensor& dB, Tensor& dC, Tensor& ddt_bias, Tensor& dA_log, Tensor& dD, const Tensor& dy, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm, const Tensor& dt_bias, const Tensor& A_log, const Tensor& D, int64_t chunk_size);
void gated_delta_rule_fwd(Exec& ex, Tensor& o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha, const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias, int64_t chunk_size);
void gated_delta_rule_bwd(Exec& ex, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dalpha, Tensor& dbeta_raw, Tensor& dA_log, Tensor& ddt_bias, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha, const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias, int64_t chunk_size);
void swiglu_fwd(Exec& ex, Tensor& y, const Tensor& x);
void swiglu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x);
void gelu_fwd(Exec& ex, Tensor& y, const Tensor& x);
void gelu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x);
void sqrelu_fwd(Exec& ex, Tensor& y, const Tensor& x);
void sqrelu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x);
void moe_router_fwd(Exec& ex, Tensor& probs, Tensor& top, const Tensor& logits, const Tensor& expert_bias, int64_t k, ops::RouterScore score, bool pre_softmax, int64_t num_groups, int64_t group_topk, double scaling);
void moe_router_bwd(Exec& ex, Tensor& dlogits, const Tensor& dprobs, const Tensor& logits, const Tensor& top, ops::RouterScore score, bool pre_softmax, double scaling);
void moe_aux_loss(Exec& ex, Tensor& loss, Tensor& counts, Tensor& dlogits, const Tensor& logits, const Tensor& global_counts, int64_t k, ops::RouterScore score, int64_t num_seqs, double coeff, double grad_scale);
void moe_z_loss(Exec& ex, Tensor& loss, Tensor& dlogits, const Tensor& logits, double coeff, double grad_scale);
void gather_rows(Exec& ex, Tensor& y, const Tensor& x, const Tensor& idx);
void scatter_add_rows(Exec& ex, Tensor& y, const Tensor& x, const Tensor& offsets, const Tensor& rows);
void moe_act_fwd(Exec& ex, Tensor& y, const Tensor& h, const Tensor& probs, ops::ExpertActivation act, int64_t glu_interleave, double linear_offset, double clamp);
void moe_act_bwd(Exec& ex, Tensor& dh, Tensor& dprobs, const Tensor& dy, const Tensor& h, const Tensor& probs, ops::ExpertActivation act, int64_t glu_interleave, double linear_offset, double clamp);
void sinkhorn_fwd(Exec& ex, Tensor& M, const Tensor& logits, int64_t iterations, ops::MhcVariant variant);
void sinkhorn_bwd(Exec& ex, Tensor& dlogits, const Tensor& dM, const Tensor& logits, int64_t iterations, ops::MhcVariant variant);
void mhc_coeffs_fwd(Exec& ex, Tensor& h_pre, Tensor& h_post, Tensor& h_res, Tensor& r, const Tensor& x, const Tensor& proj, const Tensor& alpha, const Tensor& bias, int64_t iterations, ops::MhcVariant variant);
void mhc_coeffs_bwd(Exec& ex, Tensor& dx, Tensor& dproj, Tensor& dalpha, Tensor& dbias, const Tensor& dh_pre, const Tensor& dh_post, const Tensor& dh_res, const Tensor& x, const Tensor& proj, const Tensor& alpha, const Tensor& bias, const Tensor& r, int64_t iterations, ops::MhcVariant variant);
void mhc_aggregate_fwd(Exec& ex, Tensor& u, const Tensor& X, const Tensor& h_pre);
void mhc_aggregate_bwd(Exec& ex, Tensor& dX, Tensor& dh_pre, const Tensor& du, const Tensor& X, const Tensor& h_pre);
void mhc_combine_fwd(Exec& ex, Tensor& Y, const Tensor& X, const Tensor& F, const Tensor& h_res, const Tensor& h_post);
void mhc_combine_bwd(Exec& ex, Tensor& dX, Tensor& dF, Tensor& dh_res, Tensor& dh_post, const Tensor& dY, const Tensor& X, const Tensor& F, const Tensor& h_res, const Tensor& h_post);
void lm_head_ce_fwd(Exec& ex, Tensor& loss, Tensor& lse, const Tensor& x, const Tensor& w, const Tensor& labels, int64_t vocab_chunk);
void lm_head_ce_bwd(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dloss, const Tensor& x, const Tensor& w, const Tensor& labels, const Tensor& lse, int64_t vocab_chunk);
void lm_head_ce_fwd_bwd(Exec& ex, Tensor& loss, Tensor& dx, Tensor& dw, const Tensor& x, const Tensor& w, const Tensor& labels, const Tensor& dloss, int64_t token_chunk);
void random_normal(Exec& ex, Tensor& y, uint64_t seed, uint64_t stream, double mean, double std);
void adamw(Exec& ex, Tensor& p, Tensor& m, Tensor& v, const Tensor& g, Tensor& p_copy, double lr, double beta1, double beta2, double eps, double weight_decay, double grad_scale, int64_t step);

}  // namespace hytra::cuda
