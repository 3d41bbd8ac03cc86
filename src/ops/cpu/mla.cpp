// Multi-latent attention's head assembly, CPU reference (ops.def mla_qkv_fwd / mla_qkv_bwd; docs/spec/mla.md),
// one token at a time in the compute type (float, double for fp64). Per head h of token (b, t):
//   forward   Q_h = [rot(q_pe_h), q_nope_h], K_h = [rot(k_pe), k_nope_h], V_h = [v_h, 0 ...]
//   backward  dq_h = [dQ_h[dr:], rot^T(dQ_h[:dr])], dkv_h = [dK_h[dr:], dV_h[:dv]],
//             dk_pe = rot^T(sum_h dK_h[:dr])  (heads summed in order, rounded once)
// rot rotates the dr channels at position first + t with the frequencies of ops.def mla_qkv_fwd (rope_math.h).
#include <algorithm>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/rope_math.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {
namespace {

struct MlaDims {
  int64_t tokens, T, H, dn, dr, dv, Dv;
  int64_t D() const { return dn + dr; }
};

MlaDims dims_of(const Tensor& Q, const Tensor& V, const Tensor& kv, const Tensor& k_pe) {
  const int64_t H = Q.size(2), dr = k_pe.size(2), dn = Q.size(3) - dr;
  return {Q.size(0) * Q.size(1), Q.size(1), H, dn, dr, kv.size(2) / H - dn, V.size(3)};
}

// Rows of a token's work: `in` and `out` wide enough for any head row, `pe` the shared key's dr channels.
template <class T>
struct Rows {
  std::vector<T> in, out, pe;
  explicit Rows(const MlaDims& d)
      : in(static_cast<size_t>(std::max({d.D(), d.dn + d.dv, d.Dv}))),
        out(static_cast<size_t>(std::max({d.D(), d.dn + d.dv, d.Dv}))),
        pe(static_cast<size_t>(d.dr)) {}
};

// Runs fn(token, cos, sin, rows) over the tokens in parallel with position first + t's rotation (sign -1: inverse).
template <class T, class Fn>
void for_tokens(const MlaDims& d, const Rotary& rot, T sign, Fn fn) {
  const std::vector<float> inv_freq = rope_frequencies(d.dr, rot.base, rot.factor, rot.low, rot.high);
  parallel_for(d.tokens, 16, [&](int64_t r0, int64_t r1) {
    std::vector<T> c(static_cast<size_t>(d.dr / 2)), s(static_cast<size_t>(d.dr / 2));
    Rows<T> rows(d);
    for (int64_t r = r0; r < r1; ++r) {
      rope_angles(rot.first_position + r % d.T, inv_freq, T(rot.scale), sign, c.data(), s.data());
      fn(r, c.data(), s.data(), rows);
    }
  });
}

template <class T>
void fwd_impl(Tensor& Q, Tensor& K, Tensor& V, const Tensor& q, const Tensor& kv, const Tensor& k_pe,
              const Rotary& rot) {
  const MlaDims d = dims_of(Q, V, kv, k_pe);
  const int64_t D = d.D(), H = d.H;
  for_tokens<T>(d, rot, T(1), [&](int64_t r, const T* c, const T* s, Rows<T>& rows) {
    std::vector<T>&in = rows.in, &out = rows.out, &pe = rows.pe;
    load(k_pe, r * d.dr, d.dr, pe.data());
    rope_rotate(pe.data(), d.dr, c, s, rot.interleaved);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = r * H + h;
      load(q, row * D, D, in.data());  // [q_nope, q_pe]
      std::copy_n(in.data() + d.dn, d.dr, out.data());
      rope_rotate(out.data(), d.dr, c, s, rot.interleaved);
      std::copy_n(in.data(), d.dn, out.data() + d.dr);
      store(Q, row * D, D, out.data());
      load(kv, row * (d.dn + d.dv), d.dn + d.dv, in.data());  // [k_nope, v]
      std::copy_n(pe.data(), d.dr, out.data());
      std::copy_n(in.data(), d.dn, out.data() + d.dr);
      store(K, row * D, D, out.data());
      std::fill_n(out.begin(), d.Dv, T(0));
      std::copy_n(in.data() + d.dn, d.dv, out.data());
      store(V, row * d.Dv, d.Dv, out.data());
    }
  });
}

template <class T>
void bwd_impl(Tensor& dq, Tensor& dkv, Tensor& dk_pe, const Tensor& dQ, const Tensor& dK, const Tensor& dV,
              const Rotary& rot) {
  const MlaDims d = dims_of(dQ, dV, dkv, dk_pe);
  const int64_t D = d.D(), H = d.H;
  for_tokens<T>(d, rot, T(-1), [&](int64_t r, const T* c, const T* s, Rows<T>& rows) {
    std::vector<T>&in = rows.in, &out = rows.out, &pe = rows.pe;
    std::fill(pe.begin(), pe.end(), T(0));
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = r * H + h;
      load(dQ, row * D, D, in.data());  // [dq_pe, dq_nope]
      std::copy_n(in.data() + d.dr, d.dn, out.data());
      std::copy_n(in.data(), d.dr, out.data() + d.dn);
      rope_rotate(out.data() + d.dn, d.dr, c, s, rot.interleaved);
      store(dq, row * D, D, out.data());
      load(dK, row * D, D, in.data());  // [dk_pe, dk_nope]
      for (int64_t i = 0; i < d.dr; ++i) pe[size_t(i)] += in[size_t(i)];
      std::copy_n(in.data() + d.dr, d.dn, out.data());
      load(dV, row * d.Dv, d.Dv, in.data());
      std::copy_n(in.data(), d.dv, out.data() + d.dn);
      store(dkv, row * (d.dn + d.dv), d.dn + d.dv, out.data());
    }
    rope_rotate(pe.data(), d.dr, c, s, rot.interleaved);
    store(dk_pe, r * d.dr, d.dr, pe.data());
  });
}

}  // namespace

void mla_qkv_fwd(Exec&, Tensor& Q, Tensor& K, Tensor& V, const Tensor& q, const Tensor& kv, const Tensor& k_pe,
                 const Rotary& rot) {
  with_compute_type(q.dtype(), [&](auto t) { fwd_impl<decltype(t)>(Q, K, V, q, kv, k_pe, rot); });
}

void mla_qkv_bwd(Exec&, Tensor& dq, Tensor& dkv, Tensor& dk_pe, const Tensor& dQ, const Tensor& dK, const Tensor& dV,
                 const Rotary& rot) {
  with_compute_type(dQ.dtype(), [&](auto t) { bwd_impl<decltype(t)>(dq, dkv, dk_pe, dQ, dK, dV, rot); });
}

}  // namespace hytra::cpu
