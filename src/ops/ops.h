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

// ---- activations (rows N) ------------------------------------------------------------------------
// SwiGLU: y (N,F) = silu(x[:, :F]) * x[:, F:] for x (N,2F): the gate is the FIRST half (SPEC A2.1).
void swiglu_fwd(Exec& ex, Tensor& y, const Tensor& x);
void swiglu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x);  // dx (N,2F) =
// GeLU (exact, erf form, as torch.nn.functional.gelu): y = x * Phi(x). Any shape.
void gelu_fwd(Exec& ex, Tensor& y, const Tensor& x);
void gelu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x);
// Squared ReLU: y = max(x, 0)^2. Any shape.
void sqrelu_fwd(Exec& ex, Tensor& y, const Tensor& x);
void sqrelu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x);

// ---- LM head + vocabulary cross-entropy ----------------------------------------------------------
// logits = x @ w^T, computed `vocab_chunk` columns at a time and never stored whole (online
// log-sum-exp). loss[n] = lse[n] - logits[n, labels[n]]; a label < 0 is ignored (loss 0).
// x (N,C); w (V,C); labels (N) int32; loss, lse (N).
void lm_head_ce_fwd(Exec& ex, Tensor& loss, Tensor& lse, const Tensor& x, const Tensor& w,
                    const Tensor& labels, int64_t vocab_chunk = 4096);
// dlogits = (softmax(logits) - onehot(label)) * dloss[n], rebuilt chunk by chunk from lse;
// dx (N,C) = dlogits @ w; dw (V,C) += dlogits^T @ x. dloss (N). Ignored rows contribute nothing.
void lm_head_ce_bwd(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dloss, const Tensor& x, const Tensor& w,
                    const Tensor& labels, const Tensor& lse, int64_t vocab_chunk = 4096);

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
