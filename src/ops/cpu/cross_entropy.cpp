// LM head + vocabulary cross-entropy, CPU reference (ops.h "LM head + vocabulary cross-entropy";
// docs/spec/README.md decision 7), in the compute type (float, double for fp64). x (N,C), w (V,C).
// The logits z = x @ w^T exist only as one (kRows, chunk) block at a time:
//   forward   online log-sum-exp over the vocabulary chunks of each row:
//             m' = max(m, max_v z_v), l' = l*exp(m - m') + sum_v exp(z_v - m'), lse = m + log(l);
//             loss = lse - z[label], or 0 when label < 0
//   backward  dz = (exp(z - lse) - [v == label]) * dloss, rebuilt block by block (0 when label < 0; a label >= V,
//             another vocabulary shard's, has no one-hot term);
//             dx_block = sum over chunks of dz @ w_chunk, dw_chunk += dz^T @ x_block.
// Blocks run in a fixed order (row blocks outer, chunks inner) and each product is the
// thread-count-independent CPU GEMM, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/gemm_cpu.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {
namespace {

constexpr int64_t kRows = 256;  // rows of x per block

// C (M,N) = alpha * op(A) @ op(B) + beta * C on row-major buffers, in the compute type.
void gemm_t(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
            int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_f32(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}
void gemm_t(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
            int64_t ldb, double beta, double* C, int64_t ldc) {
  gemm_f64(ta, tb, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc);
}

void check_labels(const char* op, const Tensor& labels, int64_t V) {
  const int32_t* lab = labels.data<int32_t>();
  for (int64_t n = 0; n < labels.numel(); ++n)
    HYTRA_CHECK(lab[n] < V, op, ": label ", lab[n], " at row ", n, " is not below the vocabulary size ", V);
}

// z (rows, cols) := (exp(z - lse) - [v0 + c == label]) * dloss per row, 0 for ignored rows.
template <class T>
void dlogits_block(T* z, int64_t rows, int64_t cols, int64_t v0, const int32_t* labels, const T* lse,
                   const T* dloss) {
  parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* zr = z + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const T onehot = v0 + c == labels[r] ? T(1) : T(0);
        zr[c] = labels[r] < 0 ? T(0) : (std::exp(zr[c] - lse[r]) - onehot) * dloss[r];
      }
    }
  });
}

template <class T>
void ce_fwd_impl(Tensor& loss, Tensor& lse, const Tensor& x, const Tensor& w, const Tensor& labels,
                 int64_t chunk) {
  const int64_t N = x.size(0), C = x.size(1), V = w.size(0);
  chunk = std::min(chunk, V);
  std::vector<T> xs, ws, z(size_t(std::min(kRows, N) * chunk));  // z (kRows, chunk)
  const T* xp = load_view(x, 0, N * C, xs);                        // (N, C)
  const T* wp = load_view(w, 0, V * C, ws);                        // (V, C)
  const int32_t* lab = labels.data<int32_t>();                     // (N)
  T* loss_p = loss.data<T>();                                      // (N)
  T* lse_p = lse.data<T>();                                        // (N)
  std::vector<T> m(size_t(N), -std::numeric_limits<T>::infinity()), l(size_t(N), T(0)), z_label(size_t(N), T(0));
  for (int64_t n0 = 0; n0 < N; n0 += kRows) {
    const int64_t rows = std::min(kRows, N - n0);
    for (int64_t v0 = 0; v0 < V; v0 += chunk) {
      const int64_t cols = std::min(chunk, V - v0);
      gemm_t(false, true, rows, cols, C, xp + n0 * C, C, wp + v0 * C, C, T(0), z.data(), cols);
      parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t n = n0 + r;
          const T* zr = z.data() + r * cols;
          const T m_new = std::max(m[n], *std::max_element(zr, zr + cols));
          T s = 0;
          for (int64_t c = 0; c < cols; ++c) s += std::exp(zr[c] - m_new);
          l[n] = l[n] * std::exp(m[n] - m_new) + s;
          m[n] = m_new;
          if (lab[n] >= v0 && lab[n] < v0 + cols) z_label[n] = zr[lab[n] - v0];
        }
      });
    }
  }
  for (int64_t n = 0; n < N; ++n) {
    lse_p[n] = m[n] + std::log(l[n]);
    loss_p[n] = lab[n] < 0 ? T(0) : lse_p[n] - z_label[n];
  }
}

template <class T>
void ce_bwd_impl(Tensor& dx, Tensor& dw, const Tensor& dloss, const Tensor& x, const Tensor& w,
                 const Tensor& labels, const Tensor& lse, int64_t chunk) {
  const int64_t N = x.size(0), C = x.size(1), V = w.size(0);
  chunk = std::min(chunk, V);
  std::vector<T> xs, ws, lses, dls, z(size_t(std::min(kRows, N) * chunk));  // z (kRows, chunk)
  std::vector<T> dxv(size_t(N * C)), dwv(size_t(V * C));                    // (N, C), (V, C)
  const T* xp = load_view(x, 0, N * C, xs);
  const T* wp = load_view(w, 0, V * C, ws);
  const T* lse_p = load_view(lse, 0, N, lses);
  const T* dloss_p = load_view(dloss, 0, N, dls);
  const int32_t* lab = labels.data<int32_t>();
  load(dw, 0, V * C, dwv.data());  // dw accumulates
  for (int64_t n0 = 0; n0 < N; n0 += kRows) {
    const int64_t rows = std::min(kRows, N - n0);
    for (int64_t v0 = 0; v0 < V; v0 += chunk) {
      const int64_t cols = std::min(chunk, V - v0);
      gemm_t(false, true, rows, cols, C, xp + n0 * C, C, wp + v0 * C, C, T(0), z.data(), cols);
      dlogits_block(z.data(), rows, cols, v0, lab + n0, lse_p + n0, dloss_p + n0);
      // dx rows (rows, C) (+)= dz @ w_chunk; dw_chunk (cols, C) += dz^T @ x rows.
      gemm_t(false, false, rows, C, cols, z.data(), cols, wp + v0 * C, C, v0 == 0 ? T(0) : T(1),
             dxv.data() + n0 * C, C);
      gemm_t(true, false, cols, C, rows, z.data(), cols, xp + n0 * C, C, T(1), dwv.data() + v0 * C, C);
    }
  }
  store(dx, 0, N * C, dxv.data());
  store(dw, 0, V * C, dwv.data());
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
  with_compute_type(x.dtype(),
                    [&](auto t) { ce_bwd_impl<decltype(t)>(dx, dw, dloss, x, w, labels, lse, vocab_chunk); });
}

// The reference of the fused op: the forward, then the backward from its lse, each over the whole
// vocabulary per row block (token_chunk only bounds the CUDA scratch; the results do not depend on it).
void lm_head_ce_fwd_bwd(Exec& ex, Tensor& loss, Tensor& dx, Tensor& dw, const Tensor& x, const Tensor& w,
                        const Tensor& labels, const Tensor& dloss, int64_t) {
  Tensor lse = Tensor::empty({x.size(0)}, loss.dtype());
  lm_head_ce_fwd(ex, loss, lse, x, w, labels, w.size(0));
  lm_head_ce_bwd(ex, dx, dw, dloss, x, w, labels, lse, w.size(0));
}

}  // namespace hytra::cpu
