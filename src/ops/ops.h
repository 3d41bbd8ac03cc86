// THE op interface: every numerical primitive hytra uses, one declaration each.
// Argument order: Exec&, outputs, inputs, scalars. Shapes use the fixed letters of
// docs/GLOSSARY.md (N = rows = B*T, C = channels, V = vocab, F = ffn width, H/Hkv heads, D head dim).
// Conventions:
//  - Tensors must be contiguous and on ex.device(); dispatch checks devices, dtypes and shapes
//    once and throws a clear hytra::Error naming the op and argument.
//  - Floating tensors are fp32 or fp64 (CPU; gradient checks) or bf16 (activations, CUDA).
//    "Statistics" outputs (rstd, mean, lse, loss) are fp32, or fp64 when the inputs are fp64.
//  - Parameter gradients accumulate (`+=`, marked "+="); activation gradients are overwritten ("=").
//  - Results never depend on the thread count or launch order (fixed reduction trees).
#pragma once
#include "core/tensor.h"
#include "ops/exec.h"

namespace hytra::ops {

// ---- GEMM --------------------------------------------------------------------------------------
// C = alpha * op(A) @ op(B) + beta * C, fp32 accumulation. op(A) is A [M,K] or, with trans_a,
// A^T for A [K,M]; op(B) is B [K,N] or, with trans_b, B^T for B [N,K]. 2-D, or 3-D with one
// leading batch dim shared by A, B and C. A and B share a dtype (fp32, bf16, fp64); C is that
// dtype or fp32 (bf16 inputs).
void gemm(Exec& ex, Tensor& C, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b,
          float alpha = 1.0f, float beta = 0.0f);

// ---- elementwise (any shape; same numel) ---------------------------------------------------------
void fill(Exec& ex, Tensor& y, double value);                           // y = value
void copy(Exec& ex, Tensor& y, const Tensor& x);                        // y = x, converting dtype
void add(Exec& ex, Tensor& y, const Tensor& a, const Tensor& b);        // y = a + b
void axpy(Exec& ex, Tensor& y, const Tensor& x, double alpha);          // y += alpha * x
void scale(Exec& ex, Tensor& y, double alpha);                          // y *= alpha

// ---- slices (contiguous x, y of equal rank; every dim but `dim` equal) -----------------------------
// y = x[.., start : start + y.size(dim), ..] along `dim` (e.g. q/k/v out of a fused projection).
void slice_copy(Exec& ex, Tensor& y, const Tensor& x, int64_t dim, int64_t start);
// y[.., start : start + x.size(dim), ..] = x; the rest of y is left as it is (the slice's backward).
void slice_scatter(Exec& ex, Tensor& y, const Tensor& x, int64_t dim, int64_t start);

// ---- reductions (out: one element, fp32, or fp64 for fp64 x; fixed-order, deterministic) --------
void sum(Exec& ex, Tensor& out, const Tensor& x);          // out = sum(x)
void sum_squares(Exec& ex, Tensor& out, const Tensor& x);  // out = sum(x^2)

// ---- embedding -----------------------------------------------------------------------------------
// y[n,:] = table[ids[n],:]; y (N,C), ids (N) int32 in [0,V), table (V,C).
void embedding_fwd(Exec& ex, Tensor& y, const Tensor& ids, const Tensor& table);
// dtable[ids[n],:] += dy[n,:] (fixed order over n); dtable (V,C), dy (N,C).
void embedding_bwd(Exec& ex, Tensor& dtable, const Tensor& dy, const Tensor& ids);

// ---- norms (rows N, channels C) ------------------------------------------------------------------
// RMSNorm: rstd = 1/sqrt(mean(x^2) + eps); y = x * rstd * w. y,x (N,C); w (C); rstd (N).
void rmsnorm_fwd(Exec& ex, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, double eps);
// dx (N,C) =; dw (C) +=.
void rmsnorm_bwd(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                 const Tensor& rstd);
// Residual add fused with the next sub-layer's RMSNorm: sum = a + b (rounded to sum's dtype), then
// exactly rmsnorm_fwd(y, rstd, sum, w, eps) on the ROUNDED sum, so the result equals `add` followed
// by `rmsnorm_fwd` bitwise on each backend. sum, y, a, b (N,C) one dtype; w (C); rstd (N).
// sum may alias a (in-place residual stream); y aliases none of the others.
void add_rmsnorm_fwd(Exec& ex, Tensor& sum, Tensor& y, Tensor& rstd, const Tensor& a, const Tensor& b,
                     const Tensor& w, double eps);
// rmsnorm_bwd with the residual-stream gradient added: dx (N,C) = dres + (the RMSNorm input
// gradient), rounded once; dw (C) += as in rmsnorm_bwd. dres (N,C); dx may alias dres (not dy, x).
void rmsnorm_bwd_add(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                     const Tensor& rstd, const Tensor& dres);
// LayerNorm: y = (x - mean) * rstd * w + b; b may be undefined (no bias). mean, rstd (N).
void layernorm_fwd(Exec& ex, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w,
                   const Tensor& b, double eps);
// dx =; dw +=; db += (skipped when undefined).
void layernorm_bwd(Exec& ex, Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                   const Tensor& w, const Tensor& mean, const Tensor& rstd);

// Gated RMSNorm over groups of `group_size` channels (C % group_size == 0); w is (C), or
// (group_size) shared by every group. rstd (N, C/group_size) fp32 (fp64 with fp64 x).
//   norm_before_gate = false (Mamba-2 mixer.norm, docs/spec/mamba_gdn.md §1 step 5): u = x * silu(z),
//     y = u * rstd * w with rstd = 1/sqrt(mean_group(u^2) + eps);
//   norm_before_gate = true (gated delta net out_norm, docs/spec/mamba_gdn.md §2 step 6): y = x * rstd * w * silu(z)
//     with rstd = 1/sqrt(mean_group(x^2) + eps).
// x, z, y (N,C) one dtype; w in x's dtype.
void gated_rmsnorm_fwd(Exec& ex, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& z, const Tensor& w,
                       int64_t group_size, double eps, bool norm_before_gate);
// dx, dz (N,C) =; dw += (fp32, fp64 with fp64 x; fixed-order sum over rows).
void gated_rmsnorm_bwd(Exec& ex, Tensor& dx, Tensor& dz, Tensor& dw, const Tensor& dy, const Tensor& x,
                       const Tensor& z, const Tensor& w, const Tensor& rstd, int64_t group_size,
                       bool norm_before_gate);

// ---- rotary position embedding -------------------------------------------------------------------
// x, y (B,T,H,D); positions 0..T-1. The first rotary_dim (even, <= D) channels rotate with
// inv_freq[i] = base^(-2i/rotary_dim) computed in fp32 (Megatron). Rotate-half pairs (i, i+R/2), or
// adjacent pairs (2i, 2i+1) when interleaved; channels >= rotary_dim pass through. y may alias x.
void rope_fwd(Exec& ex, Tensor& y, const Tensor& x, int64_t rotary_dim, double base, bool interleaved);
// The inverse rotation: dx (B,T,H,D) =. dx may alias dy.
void rope_bwd(Exec& ex, Tensor& dx, const Tensor& dy, int64_t rotary_dim, double base, bool interleaved);

// ---- fused QKV split + rotary (one pass over the QKV projection) ---------------------------------
// qkv (B,T,Hkv*(R+2)*D) in Megatron's grouped layout (per token and KV group g: R = H/Hkv query
// heads, then k, then v, each D wide) -> q (B,T,H,D) with q[.., g*R + r, :] = rope(query r of g),
// k (B,T,Hkv,D) = rope(k of g), v (B,T,Hkv,D) = v of g; rope as rope_fwd (positions 0..T-1).
void qkv_rope_fwd(Exec& ex, Tensor& q, Tensor& k, Tensor& v, const Tensor& qkv, int64_t rotary_dim, double base,
                  bool interleaved);
// The backward: dqkv (B,T,Hkv*(R+2)*D) = the grouped layout of rope_bwd(dq), rope_bwd(dk), dv.
void qkv_rope_bwd(Exec& ex, Tensor& dqkv, const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t rotary_dim,
                  double base, bool interleaved);

// ---- attention -----------------------------------------------------------------------------------
// Causal GQA softmax attention. q, out (B,T,H,D); k, v (B,T,Hkv,D), H % Hkv == 0, query head h
// reads kv head h / (H/Hkv); lse (B,H,T) = log-sum-exp of the scaled scores of each query row.
void attention_fwd(Exec& ex, Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                   double softmax_scale);
// dq (B,T,H,D) =, dk and dv (B,T,Hkv,D) =.
void attention_bwd(Exec& ex, Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                   const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   double softmax_scale);

// ---- causal depthwise conv1d (Mamba-2 and gated delta net, docs/spec/mamba_gdn.md) ----------------
// y[b,t,c] = act(bias[c] + sum_{j<K} w[c,j] * x[b, t-(K-1)+j, c]) with x = 0 before t = 0; act is
// SiLU when `silu`, else the identity. x, y (B,T,C); w (C,K) (the checkpoint's [C,1,K] viewed 2-D)
// and bias (C) in x's dtype.
void conv1d_fwd(Exec& ex, Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu);
// dx (B,T,C) =; dw (C,K) +=, dbias (C) += (fp32, fp64 for fp64 x; fixed-order sums over B and T).
void conv1d_bwd(Exec& ex, Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x, const Tensor& w,
                const Tensor& bias, bool silu);

// ---- Mamba-2 SSD scan (docs/spec/mamba_gdn.md §1 steps 3-4) -----------------------------------
// Per batch b and head h (group g = h / (H/G)), in fp32: dt_t = softplus(dt_raw_t + dt_bias[h]),
// A = -exp(A_log[h]), state S (P,N) from 0:
//   S_t = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T;   y_t = S_t C_t + D[h] x_t.
// Computed chunk by chunk (chunk_size tokens; T need not be a multiple), equal to the sequential
// recurrence up to rounding. x, y (B,T,H,P); dt_raw (B,T,H); Bm, Cm (B,T,G,N), all in x's dtype;
// dt_bias, A_log, D (H) fp32 (fp64 with fp64 x).
void ssd_chunk_scan_fwd(Exec& ex, Tensor& y, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm,
                        const Tensor& dt_bias, const Tensor& A_log, const Tensor& D, int64_t chunk_size);
// dx (B,T,H,P), ddt_raw (B,T,H), dB, dC (B,T,G,N) = (x's dtype); ddt_bias, dA_log, dD (H) += (fp32,
// fp64 with fp64 x; fixed-order sums).
void ssd_chunk_scan_bwd(Exec& ex, Tensor& dx, Tensor& ddt_raw, Tensor& dB, Tensor& dC, Tensor& ddt_bias,
                        Tensor& dA_log, Tensor& dD, const Tensor& dy, const Tensor& x, const Tensor& dt_raw,
                        const Tensor& Bm, const Tensor& Cm, const Tensor& dt_bias, const Tensor& A_log,
                        const Tensor& D, int64_t chunk_size);

// ---- gated delta rule (gated delta net, docs/spec/mamba_gdn.md §2 steps 3-5) -------------------
// Per batch b and value head h (key head h / (Hv/Hk): q and k repeat_interleave'd), in fp32:
// q, k L2-normalised over dk (u * rsqrt(sum u^2 + 1e-6)); g_t = -exp(A_log[h]) * softplus(alpha_t +
// dt_bias[h]); beta_t = sigmoid(beta_raw_t); state S (dv,dk) from 0:
//   S_t = exp(g_t) S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T;   o_t = S_t q_t / sqrt(dk).
// Computed chunk by chunk (chunk_size tokens; T need not be a multiple), equal to the sequential
// recurrence up to rounding. q, k (B,T,Hk,dk); v, o (B,T,Hv,dv); alpha, beta_raw (B,T,Hv), all in
// q's dtype; A_log, dt_bias (Hv) fp32 (fp64 with fp64 q).
void gated_delta_rule_fwd(Exec& ex, Tensor& o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha,
                          const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias, int64_t chunk_size);
// dq, dk (B,T,Hk,dk), dv (B,T,Hv,dv), dalpha, dbeta_raw (B,T,Hv) = (q's dtype); dA_log, ddt_bias
// (Hv) += (fp32, fp64 with fp64 q; fixed-order sums).
void gated_delta_rule_bwd(Exec& ex, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dalpha, Tensor& dbeta_raw,
                          Tensor& dA_log, Tensor& ddt_bias, const Tensor& dout, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& alpha, const Tensor& beta_raw, const Tensor& A_log,
                          const Tensor& dt_bias, int64_t chunk_size);

// ---- activations (rows N) ------------------------------------------------------------------------
// SwiGLU: y (N,F) = silu(x[:, :F]) * x[:, F:] for x (N,2F): the gate is the FIRST half (docs/spec/names.md §1).
void swiglu_fwd(Exec& ex, Tensor& y, const Tensor& x);
void swiglu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x);  // dx (N,2F) =
// GeLU (exact, erf form, as torch.nn.functional.gelu): y = x * Phi(x). Any shape.
void gelu_fwd(Exec& ex, Tensor& y, const Tensor& x);
void gelu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x);
// Squared ReLU: y = max(x, 0)^2. Any shape.
void sqrelu_fwd(Exec& ex, Tensor& y, const Tensor& x);
void sqrelu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x);

// ---- mixture-of-experts (docs/spec/moe.md) -----------------------------------------------------
enum class RouterScore { Softmax, Sigmoid };
// Top-k routing of N tokens over E experts (docs/spec/moe.md §1), in fp32 from logits (N,E) fp32 (fp64 on CPU):
//  - Softmax, !pre_softmax: select on the raw logits; probs = softmax over the k selected logits.
//  - Softmax, pre_softmax: s = softmax over all E; select on s; probs = the selected s.
//  - Sigmoid: s = sigmoid(logits); select on s + expert_bias (when defined, (E) fp32); probs = the
//    selected UNBIASED s, divided by (their sum + 1e-20) when k > 1.
//  - Group-limited (num_groups > 0): experts viewed as [num_groups, E/num_groups]; a group's score
//    is the sum of its top (k / group_topk, integer division) selection scores; only the group_topk
//    best groups stay selectable (ties to the lower group index).
//  Then probs *= scaling. Selection is top-k in descending order, ties to the lower index.
// probs (N,K) in logits' dtype; top (N,K) int32 expert ids, best first.
void moe_router_fwd(Exec& ex, Tensor& probs, Tensor& top, const Tensor& logits, const Tensor& expert_bias,
                    int64_t k, RouterScore score, bool pre_softmax, int64_t num_groups, int64_t group_topk,
                    double scaling);
// dlogits (N,E) = (d probs / d logits)^T dprobs with the selection `top` held fixed.
void moe_router_bwd(Exec& ex, Tensor& dlogits, const Tensor& dprobs, const Tensor& logits, const Tensor& top,
                    RouterScore score, bool pre_softmax, double scaling);
// Switch load-balancing loss (docs/spec/moe.md §2) over num_seqs consecutive groups of N/num_seqs tokens (1 group:
// aux_loss and global_aux_loss; one per sequence: seq_aux_loss). scores (N,E): softmax over E, or
// sigmoid normalised to sum 1 per token; counts (num_seqs,E) fp32 = how many tokens of each group
// have expert e among the top k of their scores. With tokens = global_counts ((1,E) fp32, the
// running mean over the global batch) when defined, else counts, and T = N/num_seqs:
//   loss (1) fp32 = coeff * E / (k T^2) * sum_s sum_e (sum_{t in s} scores[t,e]) tokens[s,e] / num_seqs;
// dlogits (N,E) += grad_scale * dloss/dlogits when dlogits is defined (counts held constant).
void moe_aux_loss(Exec& ex, Tensor& loss, Tensor& counts, Tensor& dlogits, const Tensor& logits,
                  const Tensor& global_counts, int64_t k, RouterScore score, int64_t num_seqs, double coeff,
                  double grad_scale);
// z-loss (docs/spec/moe.md §2): loss (1) fp32 = coeff * mean_t logsumexp(logits_t)^2; dlogits (N,E) += grad_scale * dloss/dlogits.
void moe_z_loss(Exec& ex, Tensor& loss, Tensor& dlogits, const Tensor& logits, double coeff, double grad_scale);
// Token permutation (docs/spec/moe.md §4): y[r,:] = x[idx[r],:]; y (R,C), x (N,C), idx (R) int32 in [0,N).
void gather_rows(Exec& ex, Tensor& y, const Tensor& x, const Tensor& idx);
// Un-permutation as a plain scatter-add (docs/spec/moe.md §4 step 8), deterministic: y[n,:] = sum over
// j in [offsets[n], offsets[n+1]) of x[rows[j],:], in that order (0 when empty). y (N,C) =,
// x (R,C), offsets (N+1) int32 from 0 to M, rows (M) int32 in [0,R) (M = R for the un-permutation;
// fewer when some rows feed no output, e.g. padding rows in the probability gradient).
void scatter_add_rows(Exec& ex, Tensor& y, const Tensor& x, const Tensor& offsets, const Tensor& rows);
// Expert activation with the routing probability applied after it (docs/spec/moe.md §5): y (R,F) = act(h) * probs.
// GLU kinds (SwiGLU: silu; QuickGeGLU: g * sigmoid(1.702 g)) read h (R,2F) as gate and linear halves
// (plain: [gate F | linear F]; glu_interleave I > 0: alternating blocks of I gate and I linear
// columns, docs/spec/names.md §7) and compute act(min(gate, clamp)) * (min(max(lin, -clamp), clamp) + linear_offset)
// (clamp <= 0: no clamping); GeLU and SquaredReLU read h (R,F). probs (R) fp32.
enum class ExpertActivation { SwiGLU, QuickGeGLU, GeLU, SquaredReLU };
void moe_act_fwd(Exec& ex, Tensor& y, const Tensor& h, const Tensor& probs, ExpertActivation act,
                 int64_t glu_interleave, double linear_offset, double clamp);
// dh (R,2F or F) =; dprobs (R) fp32 = sum_f act(h)[r,f] * dy[r,f].
void moe_act_bwd(Exec& ex, Tensor& dh, Tensor& dprobs, const Tensor& dy, const Tensor& h, const Tensor& probs,
                 ExpertActivation act, int64_t glu_interleave, double linear_offset, double clamp);

// ---- mHC hyper-connections (docs/spec/mhc.md; maths in fp32 whatever the activation dtype) -------
enum class MhcVariant { Main, Dev };
// Sinkhorn-Knopp projection of per-token logits onto doubly stochastic n x n matrices (docs/spec/mhc.md §3).
// Main: M = exp(L - rowmax L); T times: rows /= max(rowsum, 1e-6), then columns /= max(colsum, 1e-6).
// Dev: M = softmax_row(L) + 1e-6; columns /= (colsum + 1e-6); then T-1 times rows then columns, each
// /= (sum + 1e-6). M, logits (R,n,n) fp32 (fp64 on CPU); iterations T >= 1.
void sinkhorn_fwd(Exec& ex, Tensor& M, const Tensor& logits, int64_t iterations, MhcVariant variant);
// dlogits (R,n,n) = exact gradient through the T unrolled iterations (recomputed from logits).
void sinkhorn_bwd(Exec& ex, Tensor& dlogits, const Tensor& dM, const Tensor& logits, int64_t iterations,
                  MhcVariant variant);
// The per-token mixing coefficients (docs/spec/mhc.md §2 steps 1-4) from x (N, n*C) (the flattened streams, any
// float dtype) and proj = mapping_proj(x) (N, n^2+2n) fp32: r = 1 / (||x||_2 / sqrt(nC) + 1e-6),
// h = r * proj * alpha + bias with alpha = (alpha[0] x n, alpha[1] x n, alpha[2] x n^2);
// h_pre = sigmoid(h[0:n]) (+ 1e-6 for Dev), h_post = 2 sigmoid(h[n:2n]),
// h_res = sinkhorn(h[2n:] as n x n, row-major; for Dev transposed after, the H_res^T of docs/spec/mhc.md §1).
// h_pre, h_post (N,n), h_res (N,n,n), r (N) fp32; alpha (3), bias (n^2+2n) fp32 (fp64 on CPU).
void mhc_coeffs_fwd(Exec& ex, Tensor& h_pre, Tensor& h_post, Tensor& h_res, Tensor& r, const Tensor& x,
                    const Tensor& proj, const Tensor& alpha, const Tensor& bias, int64_t iterations,
                    MhcVariant variant);
// dx (N, n*C) += the r path's gradient (x's dtype); dproj (N, n^2+2n) = ; dalpha (3), dbias (n^2+2n) +=.
void mhc_coeffs_bwd(Exec& ex, Tensor& dx, Tensor& dproj, Tensor& dalpha, Tensor& dbias, const Tensor& dh_pre,
                    const Tensor& dh_post, const Tensor& dh_res, const Tensor& x, const Tensor& proj,
                    const Tensor& alpha, const Tensor& bias, const Tensor& r, int64_t iterations,
                    MhcVariant variant);
// Aggregation (docs/spec/mhc.md §2 step 5): u[t,:] = sum_i h_pre[t,i] X[t,i,:]. X (N,n,C), u (N,C) one dtype;
// h_pre (N,n) fp32.
void mhc_aggregate_fwd(Exec& ex, Tensor& u, const Tensor& X, const Tensor& h_pre);
// dX (N,n,C) += h_pre[t,i] du[t,:]; dh_pre (N,n) fp32 = <X[t,i,:], du[t,:]>.
void mhc_aggregate_bwd(Exec& ex, Tensor& dX, Tensor& dh_pre, const Tensor& du, const Tensor& X, const Tensor& h_pre);
// Combine (docs/spec/mhc.md §2 step 6): Y[t,i,:] = sum_j h_res[t,i,j] X[t,j,:] + h_post[t,i] F[t,:].
// Y, X (N,n,C), F (N,C) one dtype; h_res (N,n,n), h_post (N,n) fp32. Y aliases nothing.
void mhc_combine_fwd(Exec& ex, Tensor& Y, const Tensor& X, const Tensor& F, const Tensor& h_res, const Tensor& h_post);
// dX (N,n,C) = h_res^T dY; dF (N,C) = sum_i h_post[t,i] dY[t,i,:]; dh_res (N,n,n), dh_post (N,n) fp32 =.
void mhc_combine_bwd(Exec& ex, Tensor& dX, Tensor& dF, Tensor& dh_res, Tensor& dh_post, const Tensor& dY,
                     const Tensor& X, const Tensor& F, const Tensor& h_res, const Tensor& h_post);

// ---- LM head + vocabulary cross-entropy ----------------------------------------------------------
// logits = x @ w^T, computed `vocab_chunk` columns at a time and never stored whole (online
// log-sum-exp). loss[n] = lse[n] - logits[n, labels[n]]; a label < 0 is ignored (loss 0).
// x (N,C); w (V,C); labels (N) int32; loss, lse (N). The logits are rounded to x's dtype (the GEMM's
// output, as Megatron's bf16 output layer; the CPU reference keeps them in its compute type); the
// softmax math is fp32.
void lm_head_ce_fwd(Exec& ex, Tensor& loss, Tensor& lse, const Tensor& x, const Tensor& w,
                    const Tensor& labels, int64_t vocab_chunk = 4096);
// dlogits = (softmax(logits) - onehot(label)) * dloss[n], rebuilt chunk by chunk from lse;
// dx (N,C) = dlogits @ w; dw (V,C) += dlogits^T @ x. dloss (N). Ignored rows contribute nothing.
void lm_head_ce_bwd(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dloss, const Tensor& x, const Tensor& w,
                    const Tensor& labels, const Tensor& lse, int64_t vocab_chunk = 4096);
// Both at once, when dloss is known before the forward (training): loss as lm_head_ce_fwd, dx (N,C)
// = dlogits @ w (overwritten), dw (V,C) += dlogits^T @ x, with dlogits as lm_head_ce_bwd. The logits
// are computed once (no recompute in a later backward), `token_chunk` rows at a time over the whole
// vocabulary: the scratch holds token_chunk x V logits, never all N rows unless N <= token_chunk.
void lm_head_ce_fwd_bwd(Exec& ex, Tensor& loss, Tensor& dx, Tensor& dw, const Tensor& x, const Tensor& w,
                        const Tensor& labels, const Tensor& dloss, int64_t token_chunk);

// ---- random ------------------------------------------------------------------------------------
// y[i] = mean + std * philox_normal(seed, stream, i) (core/philox.h): element i's value depends only
// on (seed, stream, i), so CPU and GPU produce the same numbers (parameter init). y fp32/bf16/fp64.
void random_normal(Exec& ex, Tensor& y, uint64_t seed, uint64_t stream, double mean, double std);

// ---- optimizer -----------------------------------------------------------------------------------
// AdamW (decoupled weight decay, PyTorch/Megatron order) on fp32 master weights, step >= 1, with
// the gradient first multiplied by grad_scale (the global-norm clip coefficient, fused here so
// clipping costs no pass of its own; 1 = unclipped):
//   g = grad_scale*g; p -= lr*wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
//   p -= lr * (m/(1-b1^step)) / (sqrt(v/(1-b2^step)) + eps).
// p, m, v, g same shape, fp32 (fp64 on CPU allowed). p_copy, when defined, receives the updated p
// converted to its own dtype (the bf16 model weights).
void adamw(Exec& ex, Tensor& p, Tensor& m, Tensor& v, const Tensor& g, Tensor& p_copy, double lr,
           double beta1, double beta2, double eps, double weight_decay, double grad_scale, int64_t step);

}  // namespace hytra::ops
