// The CUDA backend: forwards each Backend method to hytra::cuda::<op>.
#include "ops/cuda/cuda_ops.h"
#include "ops/backend.h"

namespace hytra {
namespace {

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  void gemm(Exec& ex, Tensor& C, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b, float alpha, float beta) override { cuda::gemm(ex, C, A, B, trans_a, trans_b, alpha, beta); }
  void fill(Exec& ex, Tensor& y, double value) override { cuda::fill(ex, y, value); }
  void copy(Exec& ex, Tensor& y, const Tensor& x) override { cuda::copy(ex, y, x); }
  void add(Exec& ex, Tensor& y, const Tensor& a, const Tensor& b) override { cuda::add(ex, y, a, b); }
  void axpy(Exec& ex, Tensor& y, const Tensor& x, double alpha) override { cuda::axpy(ex, y, x, alpha); }
  void scale(Exec& ex, Tensor& y, double alpha) override { cuda::scale(ex, y, alpha); }
  void slice_copy(Exec& ex, Tensor& y, const Tensor& x, int64_t dim, int64_t start) override { cuda::slice_copy(ex, y, x, dim, start); }
  void slice_scatter(Exec& ex, Tensor& y, const Tensor& x, int64_t dim, int64_t start) override { cuda::slice_scatter(ex, y, x, dim, start); }
  void sum(Exec& ex, Tensor& out, const Tensor& x) override { cuda::sum(ex, out, x); }
  void sum_squares(Exec& ex, Tensor& out, const Tensor& x) override { cuda::sum_squares(ex, out, x); }
  void embedding_fwd(Exec& ex, Tensor& y, const Tensor& ids, const Tensor& table) override { cuda::embedding_fwd(ex, y, ids, table); }
  void embedding_bwd(Exec& ex, Tensor& dtable, const Tensor& dy, const Tensor& ids) override { cuda::embedding_bwd(ex, dtable, dy, ids); }
  void rmsnorm_fwd(Exec& ex, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, double eps) override { cuda::rmsnorm_fwd(ex, y, rstd, x, w, eps); }
  void rmsnorm_bwd(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd) override { cuda::rmsnorm_bwd(ex, dx, dw, dy, x, w, rstd); }
  void add_rmsnorm_fwd(Exec& ex, Tensor& sum, Tensor& y, Tensor& rstd, const Tensor& a, const Tensor& b, const Tensor& w, double eps) override { cuda::add_rmsnorm_fwd(ex, sum, y, rstd, a, b, w, eps); }
  void rmsnorm_bwd_add(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dres) override { cuda::rmsnorm_bwd_add(ex, dx, dw, dy, x, w, rstd, dres); }
  void layernorm_fwd(Exec& ex, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b, double eps) override { cuda::layernorm_fwd(ex, y, mean, rstd, x, w, b, eps); }
  void layernorm_bwd(Exec& ex, Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) override { cuda::layernorm_bwd(ex, dx, dw, db, dy, x, w, mean, rstd); }
  void rope_fwd(Exec& ex, Tensor& y, const Tensor& x, int64_t rotary_dim, double base, bool interleaved) override { cuda::rope_fwd(ex, y, x, rotary_dim, base, interleaved); }
  void rope_bwd(Exec& ex, Tensor& dx, const Tensor& dy, int64_t rotary_dim, double base, bool interleaved) override { cuda::rope_bwd(ex, dx, dy, rotary_dim, base, interleaved); }
  void qkv_rope_fwd(Exec& ex, Tensor& q, Tensor& k, Tensor& v, const Tensor& qkv, int64_t rotary_dim, double base, bool interleaved) override { cuda::qkv_rope_fwd(ex, q, k, v, qkv, rotary_dim, base, interleaved); }
  void qkv_rope_bwd(Exec& ex, Tensor& dqkv, const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t rotary_dim, double base, bool interleaved) override { cuda::qkv_rope_bwd(ex, dqkv, dq, dk, dv, rotary_dim, base, interleaved); }
  void attention_fwd(Exec& ex, Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, double softmax_scale) override { cuda::attention_fwd(ex, out, lse, q, k, v, softmax_scale); }
  void attention_bwd(Exec& ex, Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, double softmax_scale) override { cuda::attention_bwd(ex, dq, dk, dv, dout, q, k, v, out, lse, softmax_scale); }
  void gated_rmsnorm_fwd(Exec& ex, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& z, const Tensor& w, int64_t group_size, double eps, bool norm_before_gate) override { cuda::gated_rmsnorm_fwd(ex, y, rstd, x, z, w, group_size, eps, norm_before_gate); }
  void gated_rmsnorm_bwd(Exec& ex, Tensor& dx, Tensor& dz, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& z, const Tensor& w, const Tensor& rstd, int64_t group_size, bool norm_before_gate) override { cuda::gated_rmsnorm_bwd(ex, dx, dz, dw, dy, x, z, w, rstd, group_size, norm_before_gate); }
  void conv1d_fwd(Exec& ex, Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu) override { cuda::conv1d_fwd(ex, y, x, w, bias, silu); }
  void conv1d_bwd(Exec& ex, Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu) override { cuda::conv1d_bwd(ex, dx, dw, dbias, dy, x, w, bias, silu); }
  void ssd_chunk_scan_fwd(Exec& ex, Tensor& y, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm, const Tensor& dt_bias, const Tensor& A_log, const Tensor& D, int64_t chunk_size) override { cuda::ssd_chunk_scan_fwd(ex, y, x, dt_raw, Bm, Cm, dt_bias, A_log, D, chunk_size); }
  void ssd_chunk_scan_bwd(Exec& ex, Tensor& dx, Tensor& ddt_raw, Tensor& dB, Tensor& dC, Tensor& ddt_bias, Tensor& dA_log, Tensor& dD, const Tensor& dy, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm, const Tensor& dt_bias, const Tensor& A_log, const Tensor& D, int64_t chunk_size) override { cuda::ssd_chunk_scan_bwd(ex, dx, ddt_raw, dB, dC, ddt_bias, dA_log, dD, dy, x, dt_raw, Bm, Cm, dt_bias, A_log, D, chunk_size); }
  void gated_delta_rule_fwd(Exec& ex, Tensor& o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha, const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias, int64_t chunk_size) override { cuda::gated_delta_rule_fwd(ex, o, q, k, v, alpha, beta_raw, A_log, dt_bias, chunk_size); }
  void gated_delta_rule_bwd(Exec& ex, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dalpha, Tensor& dbeta_raw, Tensor& dA_log, Tensor& ddt_bias, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha, const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias, int64_t chunk_size) override { cuda::gated_delta_rule_bwd(ex, dq, dk, dv, dalpha, dbeta_raw, dA_log, ddt_bias, dout, q, k, v, alpha, beta_raw, A_log, dt_bias, chunk_size); }
  void swiglu_fwd(Exec& ex, Tensor& y, const Tensor& x) override { cuda::swiglu_fwd(ex, y, x); }
  void swiglu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x) override { cuda::swiglu_bwd(ex, dx, dy, x); }
  void gelu_fwd(Exec& ex, Tensor& y, const Tensor& x) override { cuda::gelu_fwd(ex, y, x); }
  void gelu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x) override { cuda::gelu_bwd(ex, dx, dy, x); }
  void sqrelu_fwd(Exec& ex, Tensor& y, const Tensor& x) override { cuda::sqrelu_fwd(ex, y, x); }
  void sqrelu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x) override { cuda::sqrelu_bwd(ex, dx, dy, x); }
  void moe_router_fwd(Exec& ex, Tensor& probs, Tensor& top, const Tensor& logits, const Tensor& expert_bias, int64_t k, ops::RouterScore score, bool pre_softmax, int64_t num_groups, int64_t group_topk, double scaling) override { cuda::moe_router_fwd(ex, probs, top, logits, expert_bias, k, score, pre_softmax, num_groups, group_topk, scaling); }
  void moe_router_bwd(Exec& ex, Tensor& dlogits, const Tensor& dprobs, const Tensor& logits, const Tensor& top, ops::RouterScore score, bool pre_softmax, double scaling) override { cuda::moe_router_bwd(ex, dlogits, dprobs, logits, top, score, pre_softmax, scaling); }
  void moe_aux_loss(Exec& ex, Tensor& loss, Tensor& counts, Tensor& dlogits, const Tensor& logits, const Tensor& global_counts, int64_t k, ops::RouterScore score, int64_t num_seqs, double coeff, double grad_scale) override { cuda::moe_aux_loss(ex, loss, counts, dlogits, logits, global_counts, k, score, num_seqs, coeff, grad_scale); }
  void moe_z_loss(Exec& ex, Tensor& loss, Tensor& dlogits, const Tensor& logits, double coeff, double grad_scale) override { cuda::moe_z_loss(ex, loss, dlogits, logits, coeff, grad_scale); }
  void gather_rows(Exec& ex, Tensor& y, const Tensor& x, const Tensor& idx) override { cuda::gather_rows(ex, y, x, idx); }
  void scatter_add_rows(Exec& ex, Tensor& y, const Tensor& x, const Tensor& offsets, const Tensor& rows) override { cuda::scatter_add_rows(ex, y, x, offsets, rows); }
  void moe_act_fwd(Exec& ex, Tensor& y, const Tensor& h, const Tensor& probs, ops::ExpertActivation act, int64_t glu_interleave, double linear_offset, double clamp) override { cuda::moe_act_fwd(ex, y, h, probs, act, glu_interleave, linear_offset, clamp); }
  void moe_act_bwd(Exec& ex, Tensor& dh, Tensor& dprobs, const Tensor& dy, const Tensor& h, const Tensor& probs, ops::ExpertActivation act, int64_t glu_interleave, double linear_offset, double clamp) override { cuda::moe_act_bwd(ex, dh, dprobs, dy, h, probs, act, glu_interleave, linear_offset, clamp); }
  void sinkhorn_fwd(Exec& ex, Tensor& M, const Tensor& logits, int64_t iterations, ops::MhcVariant variant) override { cuda::sinkhorn_fwd(ex, M, logits, iterations, variant); }
  void sinkhorn_bwd(Exec& ex, Tensor& dlogits, const Tensor& dM, const Tensor& logits, int64_t iterations, ops::MhcVariant variant) override { cuda::sinkhorn_bwd(ex, dlogits, dM, logits, iterations, variant); }
  void mhc_coeffs_fwd(Exec& ex, Tensor& h_pre, Tensor& h_post, Tensor& h_res, Tensor& r, const Tensor& x, const Tensor& proj, const Tensor& alpha, const Tensor& bias, int64_t iterations, ops::MhcVariant variant) override { cuda::mhc_coeffs_fwd(ex, h_pre, h_post, h_res, r, x, proj, alpha, bias, iterations, variant); }
  void mhc_coeffs_bwd(Exec& ex, Tensor& dx, Tensor& dproj, Tensor& dalpha, Tensor& dbias, const Tensor& dh_pre, const Tensor& dh_post, const Tensor& dh_res, const Tensor& x, const Tensor& proj, const Tensor& alpha, const Tensor& bias, const Tensor& r, int64_t iterations, ops::MhcVariant variant) override { cuda::mhc_coeffs_bwd(ex, dx, dproj, dalpha, dbias, dh_pre, dh_post, dh_res, x, proj, alpha, bias, r, iterations, variant); }
  void mhc_aggregate_fwd(Exec& ex, Tensor& u, const Tensor& X, const Tensor& h_pre) override { cuda::mhc_aggregate_fwd(ex, u, X, h_pre); }
  void mhc_aggregate_bwd(Exec& ex, Tensor& dX, Tensor& dh_pre, const Tensor& du, const Tensor& X, const Tensor& h_pre) override { cuda::mhc_aggregate_bwd(ex, dX, dh_pre, du, X, h_pre); }
  void mhc_combine_fwd(Exec& ex, Tensor& Y, const Tensor& X, const Tensor& F, const Tensor& h_res, const Tensor& h_post) override { cuda::mhc_combine_fwd(ex, Y, X, F, h_res, h_post); }
  void mhc_combine_bwd(Exec& ex, Tensor& dX, Tensor& dF, Tensor& dh_res, Tensor& dh_post, const Tensor& dY, const Tensor& X, const Tensor& F, const Tensor& h_res, const Tensor& h_post) override { cuda::mhc_combine_bwd(ex, dX, dF, dh_res, dh_post, dY, X, F, h_res, h_post); }
  void lm_head_ce_fwd(Exec& ex, Tensor& loss, Tensor& lse, const Tensor& x, const Tensor& w, const Tensor& labels, int64_t vocab_chunk) override { cuda::lm_head_ce_fwd(ex, loss, lse, x, w, labels, vocab_chunk); }
  void lm_head_ce_bwd(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dloss, const Tensor& x, const Tensor& w, const Tensor& labels, const Tensor& lse, int64_t vocab_chunk) override { cuda::lm_head_ce_bwd(ex, dx, dw, dloss, x, w, labels, lse, vocab_chunk); }
  void lm_head_ce_fwd_bwd(Exec& ex, Tensor& loss, Tensor& dx, Tensor& dw, const Tensor& x, const Tensor& w, const Tensor& labels, const Tensor& dloss, int64_t token_chunk) override { cuda::lm_head_ce_fwd_bwd(ex, loss, dx, dw, x, w, labels, dloss, token_chunk); }
  void random_normal(Exec& ex, Tensor& y, uint64_t seed, uint64_t stream, double mean, double std) override { cuda::random_normal(ex, y, seed, stream, mean, std); }
  void adamw(Exec& ex, Tensor& p, Tensor& m, Tensor& v, const Tensor& g, Tensor& p_copy, double lr, double beta1, double beta2, double eps, double weight_decay, double grad_scale, int64_t step) override { cuda::adamw(ex, p, m, v, g, p_copy, lr, beta1, beta2, eps, weight_decay, grad_scale, step); }
};

}  // namespace

Backend& cuda_backend() {
  static CudaBackend b;
  return b;
}

}  // namespace hytra
