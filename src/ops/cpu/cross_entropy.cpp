// LM head + vocabulary cross-entropy, CPU reference (ops.h "LM head + vocabulary cross-entropy";
// SPEC hytra decision 7), in the compute type (float, double for fp64). x (N,C), w (V,C).
// The logits z = x @ w^T exist only as one (kRows, chunk) block per task at a time:
//   forward   online log-sum-exp over the vocabulary chunks of each row:
//             m' = max(m, max_v z_v), l' = l*exp(m - m') + sum_v exp(z_v - m'), lse = m + log(l);
//             loss = lse - z[label], or 0 when label < 0
//   backward  dz = (exp(z - lse) - [v == label]) * dloss, rebuilt block by block (0 when label < 0);
//             dx = dz @ w (tasks over row blocks), dw += dz^T @ x (tasks over vocabulary blocks, which
//             recompute their logits). Every output element has one writer and sums in a fixed order,
//             so results do not depend on the thread count.
// The products are plain loops (row block x vocabulary row); a fast GEMM may replace them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {
namespace {

constexpr int64_t kRows = 16;        // rows of x per task
constexpr int64_t kVocabBlock = 64;  // vocabulary rows per dw task

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <class T>
T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// z (rows, cols) = xb (rows, C) @ w[v0 : v0+cols, :]^T.
template <class T>
void logits_block(T* z, const T* xb, int64_t rows, const Tensor& w, int64_t v0, int64_t cols,
                  std::vector<T>& scratch) {
  const int64_t C = w.size(1);
  for (int64_t c = 0; c < cols; ++c) {
    const T* wv = load_view(w, (v0 + c) * C, C, scratch);
    for (int64_t r = 0; r < rows; ++r) z[r * cols + c] = dot(xb + r * C, wv, C);
  }
}

// z (rows, cols) := (exp(z - lse) - [v0 + c == label]) * dloss per row, 0 for ignored rows.
template <class T>
void dlogits_block(T* z, int64_t rows, int64_t cols, int64_t v0, const int32_t* labels, const T* lse,
                   const T* dloss) {
  for (int64_t r = 0; r < rows; ++r) {
    T* zr = z + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const T onehot = v0 + c == labels[r] ? T(1) : T(0);
      zr[c] = labels[r] < 0 ? T(0) : (std::exp(zr[c] - lse[r]) - onehot) * dloss[r];
    }
  }
}

void check_labels(const char* op, const Tensor& labels, int64_t V) {
  const int32_t* lab = labels.data<int32_t>();
  for (int64_t n = 0; n < labels.numel(); ++n)
    HYTRA_CHECK(lab[n] < V, op, ": label ", lab[n], " at row ", n, " is not below the vocabulary size ", V);
}

template <class T>
void ce_fwd_impl(Tensor& loss, Tensor& lse, const Tensor& x, const Tensor& w, const Tensor& labels,
                 int64_t chunk) {
  const int64_t N = x.size(0), C = x.size(1), V = w.size(0);
  const int32_t* lab = labels.data<int32_t>();  // (N)
  T* loss_p = loss.data<T>();                   // (N)
  T* lse_p = lse.data<T>();                     // (N)
  chunk = std::min(chunk, V);
  parallel_for(ceil_div(N, kRows), 1, [&](int64_t b0, int64_t b1) {
    std::vector<T> x_scratch, w_scratch, z(kRows * chunk);  // z (kRows, chunk)
    std::vector<T> m(kRows), l(kRows), z_label(kRows);              // (kRows) each
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * kRows, rows = std::min(kRows, N - n0);
      const T* xb = load_view(x, n0 * C, rows * C, x_scratch);  // (rows, C)
      std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
      std::fill(l.begin(), l.end(), T(0));
      std::fill(z_label.begin(), z_label.end(), T(0));
      for (int64_t v0 = 0; v0 < V; v0 += chunk) {
        const int64_t cols = std::min(chunk, V - v0);
        logits_block(z.data(), xb, rows, w, v0, cols, w_scratch);
        for (int64_t r = 0; r < rows; ++r) {
          const T* zr = z.data() + r * cols;
          const T m_new = std::max(m[r], *std::max_element(zr, zr + cols));
          T s = 0;
          for (int64_t c = 0; c < cols; ++c) s += std::exp(zr[c] - m_new);
          l[r] = l[r] * std::exp(m[r] - m_new) + s;
          m[r] = m_new;
          const int64_t label = lab[n0 + r];
          if (label >= v0 && label < v0 + cols) z_label[r] = zr[label - v0];
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        lse_p[n0 + r] = m[r] + std::log(l[r]);
        loss_p[n0 + r] = lab[n0 + r] < 0 ? T(0) : lse_p[n0 + r] - z_label[r];
      }
    }
  });
}

template <class T>
void ce_bwd_dx(Tensor& dx, const Tensor& dloss, const Tensor& x, const Tensor& w, const Tensor& labels,
               const Tensor& lse, int64_t chunk) {
  const int64_t N = x.size(0), C = x.size(1), V = w.size(0);
  const int32_t* lab = labels.data<int32_t>();  // (N)
  const T* lse_p = lse.data<T>();               // (N)
  const T* dloss_p = dloss.data<T>();           // (N)
  chunk = std::min(chunk, V);
  parallel_for(ceil_div(N, kRows), 1, [&](int64_t b0, int64_t b1) {
    std::vector<T> x_scratch, w_scratch, z(kRows * chunk), dxb(kRows * C);  // (kRows, chunk|C)
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * kRows, rows = std::min(kRows, N - n0);
      const T* xb = load_view(x, n0 * C, rows * C, x_scratch);  // (rows, C)
      std::fill(dxb.begin(), dxb.end(), T(0));
      for (int64_t v0 = 0; v0 < V; v0 += chunk) {
        const int64_t cols = std::min(chunk, V - v0);
        logits_block(z.data(), xb, rows, w, v0, cols, w_scratch);
        dlogits_block(z.data(), rows, cols, v0, lab + n0, lse_p + n0, dloss_p + n0);
        for (int64_t c = 0; c < cols; ++c) {
          const T* wv = load_view(w, (v0 + c) * C, C, w_scratch);
          for (int64_t r = 0; r < rows; ++r) {
            const T g = z[size_t(r * cols + c)];
            T* dxr = dxb.data() + r * C;
            for (int64_t k = 0; k < C; ++k) dxr[k] += g * wv[k];
          }
        }
      }
      store(dx, n0 * C, rows * C, dxb.data());
    }
  });
}

template <class T>
void ce_bwd_dw(Tensor& dw, const Tensor& dloss, const Tensor& x, const Tensor& w, const Tensor& labels,
               const Tensor& lse, int64_t chunk) {
  const int64_t N = x.size(0), C = x.size(1), V = w.size(0);
  const int32_t* lab = labels.data<int32_t>();  // (N)
  const T* lse_p = lse.data<T>();               // (N)
  const T* dloss_p = dloss.data<T>();           // (N)
  const int64_t vblock = std::min(kVocabBlock, chunk);
  parallel_for(ceil_div(V, vblock), 1, [&](int64_t vb0, int64_t vb1) {
    std::vector<T> x_scratch, w_scratch, z(kRows * vblock);  // z (kRows, vblock)
    std::vector<T> acc(vblock * C), cur(C);          // (vblock, C), (C)
    for (int64_t vb = vb0; vb < vb1; ++vb) {
      const int64_t v0 = vb * vblock, cols = std::min(vblock, V - v0);
      std::fill(acc.begin(), acc.end(), T(0));
      for (int64_t n0 = 0; n0 < N; n0 += kRows) {
        const int64_t rows = std::min(kRows, N - n0);
        const T* xb = load_view(x, n0 * C, rows * C, x_scratch);  // (rows, C)
        logits_block(z.data(), xb, rows, w, v0, cols, w_scratch);
        dlogits_block(z.data(), rows, cols, v0, lab + n0, lse_p + n0, dloss_p + n0);
        for (int64_t c = 0; c < cols; ++c) {
          T* accv = acc.data() + c * C;
          for (int64_t r = 0; r < rows; ++r) {
            const T g = z[size_t(r * cols + c)];
            const T* xr = xb + r * C;
            for (int64_t k = 0; k < C; ++k) accv[k] += g * xr[k];
          }
        }
      }
      for (int64_t c = 0; c < cols; ++c) {
        load(dw, (v0 + c) * C, C, cur.data());
        for (int64_t k = 0; k < C; ++k) cur[k] += acc[size_t(c * C + k)];
        store(dw, (v0 + c) * C, C, cur.data());
      }
    }
  });
}

}  // namespace

void lm_head_ce_fwd(Exec&, Tensor& loss, Tensor& lse, const Tensor& x, const Tensor& w, const Tensor& labels,
                    int64_t vocab_chunk) {
  check_labels("lm_head_ce_fwd", labels, w.size(0));
  with_compute_type(x.dtype(),
                    [&](auto t) { ce_fwd_impl<decltype(t)>(loss, lse, x, w, labels, vocab_chunk); });
}

void lm_head_ce_bwd(Exec&, Tensor& dx, Tensor& dw, const Tensor& dloss, const Tensor& x, const Tensor& w,
                    const Tensor& labels, const Tensor& lse, int64_t vocab_chunk) {
  check_labels("lm_head_ce_bwd", labels, w.size(0));
  with_compute_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    ce_bwd_dx<T>(dx, dloss, x, w, labels, lse, vocab_chunk);
    ce_bwd_dw<T>(dw, dloss, x, w, labels, lse, vocab_chunk);
  });
}

}  // namespace hytra::cpu
