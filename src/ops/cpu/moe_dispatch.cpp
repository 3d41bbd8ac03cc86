// MoE token movement and expert activation, CPU reference (ops.h "mixture-of-experts"; docs/spec/names.md §7,
// docs/spec/moe.md §4-§5). Math in the compute type T (float, double for fp64 data), every row read before it is
// written (so dh may alias h).
//   gather_rows       y[r,:] = x[idx[r],:], a byte copy (any dtype); an idx outside [0,N) throws.
//   scatter_add_rows  y[n,:] = sum over j in [offsets[n], offsets[n+1]) of x[rows[j],:], added in j
//                     order to a zero accumulator in T, rounded once. Segments need
//                     0 <= offsets[n] <= offsets[n+1] <= R (rows past offsets[N], e.g. capacity
//                     padding, are never read) and used rows in [0,R); anything else throws.
//   moe_act_fwd/bwd   y = a * p[r] with a = act(h) per output column f:
//     GLU kinds, gate column c(f) = f/I*2I + f%I and linear column c(f)+I of h (docs/spec/names.md §7; the plain
//     layout [gate F | linear F] is I = F):
//       g = min(gate, L), u = clamp(lin, -L, L) + linear_offset (no clamping when L <= 0),
//       a = act(g) u, act(v) = v sigmoid(k v), k = 1 (SwiGLU) or 1.702 (QuickGeGLU),
//       act'(v) = s (1 + k v (1 - s)), s = sigmoid(k v);
//       dgate = dy p u act'(g) [gate <= L],  dlin = dy p act(g) [-L <= lin <= L].
//     GeLU: a = v Phi(v), a' = Phi(v) + v phi(v) (exact erf form, as gelu_fwd);
//     SquaredReLU: a = max(v,0)^2, a' = 2 max(v,0) (0 at the kink);  dh = dy p a'.
//     dprobs[r] = sum_f a[r,f] dy[r,f], accumulated in T over f in order.
// Clamp gradients at the boundary follow torch.clamp (Megatron's unfused path calls
// gate.clamp(max=L) and lin.clamp(-L, L)): the gradient passes where the input lies inside the
// CLOSED interval, so gate == L and lin == +-L get the full gradient (torch.minimum would split the
// gate's tie in half; we do not). A NaN input propagates to y and gets a zero gradient.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {
namespace {

using Kind = ops::ExpertActivation;

bool is_glu(Kind k) { return k == Kind::SwiGLU || k == Kind::QuickGeGLU; }

// Column of h holding the gate of output column f; its linear partner is I columns further on.
int64_t gate_col(int64_t f, int64_t I) { return f / I * 2 * I + f % I; }

// k of act(v) = v sigmoid(k v) for the GLU kinds.
template <class T>
T glu_slope(Kind k) {
  return k == Kind::QuickGeGLU ? T(1.702) : T(1);
}

template <class T>
T normal_cdf(T v) {
  return T(0.5) * (T(1) + std::erf(v / std::numbers::sqrt2_v<T>));
}

// act(v): the gate function of a GLU kind, or the whole activation of the others.
template <class T>
T act_value(Kind k, T v) {
  switch (k) {
    case Kind::GeLU: return v * normal_cdf(v);
    case Kind::SquaredReLU: return v > T(0) ? v * v : T(0);
    default: return v * sigmoid(glu_slope<T>(k) * v);
  }
}

// act'(v).
template <class T>
T act_grad(Kind k, T v) {
  switch (k) {
    case Kind::GeLU: {
      const T pdf = std::exp(T(-0.5) * v * v) * std::numbers::inv_sqrtpi_v<T> / std::numbers::sqrt2_v<T>;
      return normal_cdf(v) + v * pdf;
    }
    case Kind::SquaredReLU: return v > T(0) ? T(2) * v : T(0);
    default: {
      const T a = glu_slope<T>(k), s = sigmoid(a * v);
      return s * (T(1) + a * v * (T(1) - s));
    }
  }
}

// The clamped GLU inputs of one output column (clamp L <= 0: none), written so a NaN propagates.
template <class T>
struct GluInputs {
  T g, u;                // min(gate, L), clamp(lin, -L, L) + offset
  bool gate_in, lin_in;  // the input lies where the clamp passes the gradient
  GluInputs(T gate, T lin, T offset, T L) {
    const bool on = L > T(0);
    g = on && gate > L ? L : gate;
    u = (on && lin > L ? L : on && lin < -L ? -L : lin) + offset;
    gate_in = !on || gate <= L;
    lin_in = !on || (lin >= -L && lin <= L);
  }
};

template <class T>
void act_fwd_impl(Tensor& y, const Tensor& h, const Tensor& probs, Kind k, int64_t I, T offset, T L) {
  const int64_t R = y.size(0), F = y.size(1), W = h.size(1);
  std::vector<T> pbuf;
  const T* p = load_view<T>(probs, 0, R, pbuf);  // (R)
  parallel_for(R, std::max<int64_t>(1, 8192 / std::max<int64_t>(W, 1)), [&](int64_t r0, int64_t r1) {
    std::vector<T> hr(static_cast<size_t>(W)), yr(static_cast<size_t>(F));  // (W), (F)
    for (int64_t r = r0; r < r1; ++r) {
      load(h, r * W, W, hr.data());
      for (int64_t f = 0; f < F; ++f) {
        T a;
        if (is_glu(k)) {
          const int64_t c = gate_col(f, I);
          const GluInputs<T> in(hr[size_t(c)], hr[size_t(c + I)], offset, L);
          a = act_value(k, in.g) * in.u;
        } else {
          a = act_value(k, hr[size_t(f)]);
        }
        yr[size_t(f)] = a * p[r];
      }
      store(y, r * F, F, yr.data());
    }
  });
}

template <class T>
void act_bwd_impl(Tensor& dh, Tensor& dprobs, const Tensor& dy, const Tensor& h, const Tensor& probs, Kind k, int64_t I,
                  T offset, T L) {
  const int64_t R = dy.size(0), F = dy.size(1), W = h.size(1);
  std::vector<T> pbuf;
  const T* p = load_view<T>(probs, 0, R, pbuf);  // (R)
  parallel_for(R, std::max<int64_t>(1, 8192 / std::max<int64_t>(W, 1)), [&](int64_t r0, int64_t r1) {
    std::vector<T> hr(static_cast<size_t>(W)), dyr(static_cast<size_t>(F));  // (W) h row, then dh row; (F)
    for (int64_t r = r0; r < r1; ++r) {
      load(h, r * W, W, hr.data());
      load(dy, r * F, F, dyr.data());
      T dp = T(0);
      for (int64_t f = 0; f < F; ++f) {
        const T d = dyr[size_t(f)], dyp = d * p[r];
        if (is_glu(k)) {
          const int64_t c = gate_col(f, I);
          const GluInputs<T> in(hr[size_t(c)], hr[size_t(c + I)], offset, L);
          const T a = act_value(k, in.g);
          dp += a * in.u * d;
          hr[size_t(c)] = in.gate_in ? dyp * in.u * act_grad(k, in.g) : T(0);
          hr[size_t(c + I)] = in.lin_in ? dyp * a : T(0);
        } else {
          const T v = hr[size_t(f)];
          dp += act_value(k, v) * d;
          hr[size_t(f)] = dyp * act_grad(k, v);
        }
      }
      store(dh, r * W, W, hr.data());
      store(dprobs, r, 1, &dp);
    }
  });
}

template <class T>
void scatter_add_impl(Tensor& y, const Tensor& x, const int32_t* off, const int32_t* rows) {
  const int64_t N = y.size(0), C = y.size(1);
  parallel_for(N, std::max<int64_t>(1, 4096 / std::max<int64_t>(C, 1)), [&](int64_t n0, int64_t n1) {
    std::vector<T> acc(static_cast<size_t>(C)), xr(static_cast<size_t>(C));  // (C) each
    for (int64_t n = n0; n < n1; ++n) {
      std::fill(acc.begin(), acc.end(), T(0));
      for (int64_t j = off[n]; j < off[n + 1]; ++j) {
        load(x, int64_t(rows[j]) * C, C, xr.data());
        for (int64_t c = 0; c < C; ++c) acc[size_t(c)] += xr[size_t(c)];
      }
      store(y, n * C, C, acc.data());
    }
  });
}

}  // namespace

void gather_rows(Exec&, Tensor& y, const Tensor& x, const Tensor& idx) {
  const int64_t R = idx.size(0), N = x.size(0);
  const int32_t* id = idx.data<int32_t>();
  for (int64_t r = 0; r < R; ++r)
    HYTRA_CHECK(id[r] >= 0 && id[r] < N, "gather_rows: idx[", r, "] = ", id[r], " is outside [0, N = ", N, ")");
  const size_t row_bytes = size_t(x.size(1)) * dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  parallel_for(R, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      std::memcpy(dst + size_t(r) * row_bytes, src + size_t(id[r]) * row_bytes, row_bytes);
  });
}

void scatter_add_rows(Exec&, Tensor& y, const Tensor& x, const Tensor& offsets, const Tensor& rows) {
  const int64_t N = y.size(0), R = x.size(0);
  const int32_t* off = offsets.data<int32_t>();
  const int32_t* row = rows.data<int32_t>();
  for (int64_t n = 0; n < N; ++n) {
    HYTRA_CHECK(off[n] >= 0 && off[n] <= off[n + 1] && off[n + 1] <= R, "scatter_add_rows: segment ", n, " = [", off[n],
                ", ", off[n + 1], ") is decreasing or not inside [0, R = ", R, "]");
    for (int64_t j = off[n]; j < off[n + 1]; ++j)
      HYTRA_CHECK(row[j] >= 0 && row[j] < R, "scatter_add_rows: rows[", j, "] = ", row[j], " is outside [0, R = ", R,
                  ")");
  }
  with_compute_type(x.dtype(), [&](auto t) { scatter_add_impl<decltype(t)>(y, x, off, row); });
}

void moe_act_fwd(Exec&, Tensor& y, const Tensor& h, const Tensor& probs, ops::ExpertActivation act,
                 int64_t glu_interleave, double linear_offset, double clamp) {
  const int64_t I = glu_interleave > 0 ? glu_interleave : y.size(1);
  with_compute_type(h.dtype(), [&](auto t) {
    using T = decltype(t);
    act_fwd_impl<T>(y, h, probs, act, I, T(linear_offset), T(clamp));
  });
}

void moe_act_bwd(Exec&, Tensor& dh, Tensor& dprobs, const Tensor& dy, const Tensor& h, const Tensor& probs,
                 ops::ExpertActivation act, int64_t glu_interleave, double linear_offset, double clamp) {
  const int64_t I = glu_interleave > 0 ? glu_interleave : dy.size(1);
  with_compute_type(h.dtype(), [&](auto t) {
    using T = decltype(t);
    act_bwd_impl<T>(dh, dprobs, dy, h, probs, act, I, T(linear_offset), T(clamp));
  });
}

}  // namespace hytra::cpu
