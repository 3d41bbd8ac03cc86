// mHC stream mixing on CUDA (ops.h "mHC hyper-connections", docs/spec/mhc.md §2 steps 5-6), math in fp32:
//   aggregate: u[t,:] = sum_i h_pre[t,i] X[t,i,:]
//              dh_pre[t,i] = <X[t,i,:], du[t,:]>;  dX[t,i,:] += h_pre[t,i] du[t,:] (dX not null)
//   combine:   Y[t,i,:] = sum_j h_res[t,i,j] X[t,j,:] + h_post[t,i] F[t,:]
//              dX[t,j,:] = sum_i h_res[t,i,j] dY[t,i,:];  dF[t,:] = sum_i h_post[t,i] dY[t,i,:]
//              dh_res[t,i,j] = <dY[t,i,:], X[t,j,:]>;  dh_post[t,i] = <dY[t,i,:], F[t,:]>
// One block per token walks the channels, each thread holding V channels of all n streams in
// registers (V = 8, 16-byte vectors, when C % 8 == 0 and every row is 16-byte aligned; else V = 1).
// n is a run-time value below the compile-time bound NM (2, 4, 8 or 16). The channel dot products
// are kept per thread, then summed by warp shuffles and across warps in warp order: a fixed order
// set by the block size alone, so results are deterministic (no atomics).
#include <initializer_list>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxStreams = 16;

// As load_v, for a buffer the kernel also writes (dX of aggregate_bwd).
template <int V, class T>
__device__ __forceinline__ void load_v_rw(const T* p, float* out) {
  if constexpr (V == 1)
    load_v<1>(p, out);
  else
    load_n_rw<V>(p, out);
}

// Sums acc[k] (K per-thread partials) over the block and calls emit(k, total) for k < K, spread
// over the threads. red holds kWarps * K floats. Lanes reduce by warp_sum, then warps add in order.
template <int K, class Emit>
__device__ __forceinline__ void block_sums(const float* acc, float* red, Emit emit) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const float s = warp_sum(acc[k]);
    if (lane == 0) red[warp * K + k] = s;
  }
  __syncthreads();
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    float s = 0.0f;
    for (int w = 0; w < kWarps; ++w) s += red[w * K + k];
    emit(k, s);
  }
}

// u (N,C) from X (N,n,C), h_pre (N,n).
template <class T, int NM, int V>
__global__ void __launch_bounds__(kThreads) aggregate_fwd_kernel(T* u, const T* X, const float* h_pre, int n,
                                                                 int64_t C) {
  const int64_t t = blockIdx.x;
  const T* x = X + t * n * C;
  float h[NM];
#pragma unroll
  for (int i = 0; i < NM; ++i) h[i] = i < n ? h_pre[t * n + i] : 0.0f;
  for (int64_t c = int64_t(threadIdx.x) * V; c < C; c += int64_t(blockDim.x) * V) {
    float acc[V] = {};
#pragma unroll
    for (int i = 0; i < NM; ++i) {
      if (i < n) {
        float xv[V];
        load_v<V>(x + i * C + c, xv);
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] += h[i] * xv[e];
      }
    }
    store_v<V>(u + t * C + c, acc);
  }
}

// dh_pre (N,n) =, and dX (N,n,C) += unless dX is null, from du (N,C), X (N,n,C), h_pre (N,n).
template <class T, int NM, int V>
__global__ void __launch_bounds__(kThreads) aggregate_bwd_kernel(T* dX, float* dh_pre, const T* du, const T* X,
                                                                 const float* h_pre, int n, int64_t C) {
  __shared__ float red[kWarps * NM];
  const int64_t t = blockIdx.x;
  const T* x = X + t * n * C;
  T* dx = dX == nullptr ? nullptr : dX + t * n * C;
  float h[NM], dot[NM];
#pragma unroll
  for (int i = 0; i < NM; ++i) {
    h[i] = i < n ? h_pre[t * n + i] : 0.0f;
    dot[i] = 0.0f;
  }
  for (int64_t c = int64_t(threadIdx.x) * V; c < C; c += int64_t(blockDim.x) * V) {
    float g[V];
    load_v<V>(du + t * C + c, g);
#pragma unroll
    for (int i = 0; i < NM; ++i) {
      if (i < n) {
        float xv[V];
        load_v<V>(x + i * C + c, xv);
#pragma unroll
        for (int e = 0; e < V; ++e) dot[i] += xv[e] * g[e];
        if (dX != nullptr) {
          float dv[V];
          load_v_rw<V>(dx + i * C + c, dv);
#pragma unroll
          for (int e = 0; e < V; ++e) dv[e] += h[i] * g[e];
          store_v<V>(dx + i * C + c, dv);
        }
      }
    }
  }
  block_sums<NM>(dot, red, [&](int k, float s) {
    if (k < n) dh_pre[t * n + k] = s;
  });
}

// Y (N,n,C) from X (N,n,C), F (N,C), h_res (N,n,n), h_post (N,n).
template <class T, int NM, int V>
__global__ void __launch_bounds__(kThreads) combine_fwd_kernel(T* Y, const T* X, const T* F, const float* h_res,
                                                               const float* h_post, int n, int64_t C) {
  __shared__ float hr[NM * NM], hp[NM];
  const int64_t t = blockIdx.x;
  for (int k = threadIdx.x; k < n * n; k += blockDim.x) hr[(k / n) * NM + k % n] = h_res[t * n * n + k];
  if (threadIdx.x < n) hp[threadIdx.x] = h_post[t * n + threadIdx.x];
  __syncthreads();
  const T* x = X + t * n * C;
  T* y = Y + t * n * C;
  for (int64_t c = int64_t(threadIdx.x) * V; c < C; c += int64_t(blockDim.x) * V) {
    float xv[NM][V], f[V];
    load_v<V>(F + t * C + c, f);
#pragma unroll
    for (int j = 0; j < NM; ++j)
      if (j < n) load_v<V>(x + j * C + c, xv[j]);
#pragma unroll
    for (int i = 0; i < NM; ++i) {
      if (i < n) {
        float acc[V] = {};
#pragma unroll
        for (int j = 0; j < NM; ++j) {
          if (j < n) {
#pragma unroll
            for (int e = 0; e < V; ++e) acc[e] += hr[i * NM + j] * xv[j][e];
          }
        }
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] += hp[i] * f[e];
        store_v<V>(y + i * C + c, acc);
      }
    }
  }
}

// dX (N,n,C), dF (N,C), dh_res (N,n,n), dh_post (N,n) from dY (N,n,C), X, F, h_res, h_post.
// Partials: acc[i*NM + j] = <dY_i, X_j>, acc[NM*NM + i] = <dY_i, F>.
// For NM <= 4 at least 6 blocks an SM (at most 85 registers a thread; 5 blocks at the 86 it takes otherwise): the
// kernel waits on memory latency, and the extra block is worth about 5% (bench_ops, H100). NM = 8, 16 keep every
// register their accumulators can have.
template <class T, int NM, int V>
__global__ void __launch_bounds__(kThreads, NM <= 4 ? 6 : 1)
    combine_bwd_kernel(T* dX, T* dF, float* dh_res, float* dh_post, const T* dY, const T* X, const T* F,
                       const float* h_res, const float* h_post, int n, int64_t C) {
  constexpr int K = NM * NM + NM;
  __shared__ float hr[NM * NM], hp[NM], red[kWarps * K];
  const int64_t t = blockIdx.x;
  for (int k = threadIdx.x; k < n * n; k += blockDim.x) hr[(k / n) * NM + k % n] = h_res[t * n * n + k];
  if (threadIdx.x < n) hp[threadIdx.x] = h_post[t * n + threadIdx.x];
  __syncthreads();
  const T* x = X + t * n * C;
  const T* dy = dY + t * n * C;
  T* dx = dX + t * n * C;
  float acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0.0f;
  for (int64_t c = int64_t(threadIdx.x) * V; c < C; c += int64_t(blockDim.x) * V) {
    float g[NM][V], f[V], df[V] = {};
    load_v<V>(F + t * C + c, f);
#pragma unroll
    for (int i = 0; i < NM; ++i) {
      if (i < n) {
        load_v<V>(dy + i * C + c, g[i]);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          df[e] += hp[i] * g[i][e];
          acc[NM * NM + i] += g[i][e] * f[e];
        }
      }
    }
    store_v<V>(dF + t * C + c, df);
#pragma unroll
    for (int j = 0; j < NM; ++j) {
      if (j < n) {
        float xv[V], d[V] = {};
        load_v<V>(x + j * C + c, xv);
#pragma unroll
        for (int i = 0; i < NM; ++i) {
          if (i < n) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
              d[e] += hr[i * NM + j] * g[i][e];
              acc[i * NM + j] += g[i][e] * xv[e];
            }
          }
        }
        store_v<V>(dx + j * C + c, d);
      }
    }
  }
  block_sums<K>(acc, red, [&](int k, float s) {
    if (k < NM * NM) {
      const int i = k / NM, j = k % NM;
      if (i < n && j < n) dh_res[(t * n + i) * n + j] = s;
    } else if (k - NM * NM < n) {
      dh_post[t * n + k - NM * NM] = s;
    }
  });
}

// Checks the CUDA limits and calls f(T{}, NM, V) (std::integral_constant for NM and V) for the
// activation dtype of X, the stream bound and the vector width; launches nothing when N == 0.
template <class F>
void dispatch(const char* op, const Tensor& X, std::initializer_list<const Tensor*> rows,
              std::initializer_list<const Tensor*> coeffs, F&& f) {
  const int64_t N = X.size(0), n = X.size(1), C = X.size(2);
  HYTRA_CHECK(X.dtype() == DType::F32 || X.dtype() == DType::BF16, op, " on CUDA: X must be fp32 or bf16, got ",
              X.desc());
  for (const Tensor* c : coeffs)
    HYTRA_CHECK(c->dtype() == DType::F32, op, " on CUDA: coefficients must be fp32, got ", c->desc());
  HYTRA_CHECK(n <= kMaxStreams, op, " on CUDA: at most ", kMaxStreams, " streams, got n = ", n);
  if (N == 0) return;
  bool vec = C % 8 == 0;
  for (const Tensor* r : rows) vec = vec && (!r->defined() || aligned16(r->raw()));  // an undefined dX: none
  auto with_v = [&](auto t, auto nm) {
    if (vec)
      f(t, nm, std::integral_constant<int, 8>{});
    else
      f(t, nm, std::integral_constant<int, 1>{});
  };
  auto with_nm = [&](auto t) {
    if (n <= 2)
      with_v(t, std::integral_constant<int, 2>{});
    else if (n <= 4)
      with_v(t, std::integral_constant<int, 4>{});
    else if (n <= 8)
      with_v(t, std::integral_constant<int, 8>{});
    else
      with_v(t, std::integral_constant<int, 16>{});
  };
  with_type(X.dtype(), with_nm);
}

template <class T>
T* ptr(Tensor& t) {
  return static_cast<T*>(t.raw());
}
template <class T>
const T* ptr(const Tensor& t) {
  return static_cast<const T*>(t.raw());
}

}  // namespace

void mhc_aggregate_fwd(Exec& ex, Tensor& u, const Tensor& X, const Tensor& h_pre) {
  const int n = int(X.size(1));
  const int64_t C = X.size(2);
  dispatch("mhc_aggregate_fwd", X, {&u, &X}, {&h_pre}, [&](auto t, auto nm, auto v) {
    using T = decltype(t);
    aggregate_fwd_kernel<T, decltype(nm)::value, decltype(v)::value>
        <<<unsigned(X.size(0)), kThreads, 0, stream_of(ex)>>>(ptr<T>(u), ptr<T>(X), h_pre.data<float>(), n, C);
    check_launch("aggregate_fwd_kernel");
  });
}

void mhc_aggregate_bwd(Exec& ex, Tensor& dX, Tensor& dh_pre, const Tensor& du, const Tensor& X, const Tensor& h_pre) {
  const int n = int(X.size(1));
  const int64_t C = X.size(2);
  dispatch("mhc_aggregate_bwd", X, {&dX, &du, &X}, {&h_pre, &dh_pre}, [&](auto t, auto nm, auto v) {
    using T = decltype(t);
    aggregate_bwd_kernel<T, decltype(nm)::value, decltype(v)::value>
        <<<unsigned(X.size(0)), kThreads, 0, stream_of(ex)>>>(dX.defined() ? ptr<T>(dX) : nullptr, dh_pre.data<float>(),
                                                              ptr<T>(du), ptr<T>(X), h_pre.data<float>(), n, C);
    check_launch("aggregate_bwd_kernel");
  });
}

void mhc_combine_fwd(Exec& ex, Tensor& Y, const Tensor& X, const Tensor& F, const Tensor& h_res, const Tensor& h_post) {
  const int n = int(X.size(1));
  const int64_t C = X.size(2);
  dispatch("mhc_combine_fwd", X, {&Y, &X, &F}, {&h_res, &h_post}, [&](auto t, auto nm, auto v) {
    using T = decltype(t);
    combine_fwd_kernel<T, decltype(nm)::value, decltype(v)::value>
        <<<unsigned(X.size(0)), kThreads, 0, stream_of(ex)>>>(ptr<T>(Y), ptr<T>(X), ptr<T>(F), h_res.data<float>(),
                                                             h_post.data<float>(), n, C);
    check_launch("combine_fwd_kernel");
  });
}

void mhc_combine_bwd(Exec& ex, Tensor& dX, Tensor& dF, Tensor& dh_res, Tensor& dh_post, const Tensor& dY,
                     const Tensor& X, const Tensor& F, const Tensor& h_res, const Tensor& h_post) {
  const int n = int(X.size(1));
  const int64_t C = X.size(2);
  dispatch("mhc_combine_bwd", X, {&dX, &dF, &dY, &X, &F}, {&h_res, &h_post, &dh_res, &dh_post},
           [&](auto t, auto nm, auto v) {
             using T = decltype(t);
             combine_bwd_kernel<T, decltype(nm)::value, decltype(v)::value>
                 <<<unsigned(X.size(0)), kThreads, 0, stream_of(ex)>>>(
                     ptr<T>(dX), ptr<T>(dF), dh_res.data<float>(), dh_post.data<float>(), ptr<T>(dY), ptr<T>(X),
                     ptr<T>(F), h_res.data<float>(), h_post.data<float>(), n, C);
             check_launch("combine_bwd_kernel");
           });
}

}  // namespace hytra::cuda
