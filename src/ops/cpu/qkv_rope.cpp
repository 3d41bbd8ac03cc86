// Fused QKV split + rotary, CPU reference (ops.h "fused QKV split + rotary"): by definition the
// slices of the grouped QKV projection followed by rope_fwd (and rope_bwd followed by the
// scatter back into the grouped layout).
#include "ops/cpu/cpu_ops.h"

namespace hytra::cpu {
namespace {

struct QkvDims {
  int64_t B, T, H, Hkv, D;
  int64_t R() const { return H / Hkv; }
  Shape grouped() const { return {B * T * Hkv, R() + 2, D}; }  // the QKV projection's (rows, R+2, D) view
};

QkvDims dims_of(const Tensor& q, const Tensor& k) { return {q.size(0), q.size(1), q.size(2), k.size(2), q.size(3)}; }

}  // namespace

void qkv_rope_fwd(Exec& ex, Tensor& q, Tensor& k, Tensor& v, const Tensor& qkv, int64_t rotary_dim, double base,
                  bool interleaved) {
  const QkvDims d = dims_of(q, k);
  const Tensor g = qkv.view(d.grouped());
  Tensor qs = Tensor::empty({d.B * d.T * d.Hkv, d.R(), d.D}, q.dtype()), ks = Tensor::empty({d.B * d.T * d.Hkv, 1, d.D}, k.dtype());
  Tensor vs = v.view({d.B * d.T * d.Hkv, 1, d.D});
  slice_copy(ex, qs, g, 1, 0);
  slice_copy(ex, ks, g, 1, d.R());
  slice_copy(ex, vs, g, 1, d.R() + 1);
  rope_fwd(ex, q, qs.view(q.shape()), rotary_dim, base, interleaved);
  rope_fwd(ex, k, ks.view(k.shape()), rotary_dim, base, interleaved);
}

void qkv_rope_bwd(Exec& ex, Tensor& dqkv, const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t rotary_dim,
                  double base, bool interleaved) {
  const QkvDims d = dims_of(dq, dk);
  Tensor dqr = Tensor::empty(dq.shape(), dq.dtype()), dkr = Tensor::empty(dk.shape(), dk.dtype());
  rope_bwd(ex, dqr, dq, rotary_dim, base, interleaved);
  rope_bwd(ex, dkr, dk, rotary_dim, base, interleaved);
  Tensor g = dqkv.view(d.grouped());
  slice_scatter(ex, g, dqr.view({d.B * d.T * d.Hkv, d.R(), d.D}), 1, 0);
  slice_scatter(ex, g, dkr.view({d.B * d.T * d.Hkv, 1, d.D}), 1, d.R());
  slice_scatter(ex, g, dv.view({d.B * d.T * d.Hkv, 1, d.D}), 1, d.R() + 1);
}

}  // namespace hytra::cpu
