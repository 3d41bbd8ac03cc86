// One-token decoding ops on CUDA (ops.def "one-token decoding"): fp32 math on fp32 or bf16 data with the CPU
// reference's formulas (cpu/decode.cpp); the recurrent states are fp32. Layouts:
//  - attention_decode: kv_append_kernel, one block per (b, KV head), threads over channels, writes the rotated k
//    and v into row `position` of the caches; then, in stream order, attention_decode_kernel, one block per
//    (b, query head): the rotated q (rounded to its dtype) in shared memory; warp w takes keys w, w + kWarps, ...
//    (lanes over channels) for the scores, kept in fp32 scratch (B*H, position+1), then again for its partial
//    sums of p and p v (shared memory), which are added in warp order at the end.
//  - conv1d_step: one thread per (b, channel); it alone reads and shifts its column of the state, so in place.
//  - ssd_step, gdn_step: one block per (b, head); warp w takes state rows w, w + kWarps, ... with lanes along the
//    row (coalesced), the row's dot products summed by warp_sum.
// Every sum has an order fixed by the shapes alone: results are deterministic.
#include <cmath>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/rope_math.cuh"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// RoPE at the token's position (rotary dim R, 0 = none).
struct Rope {
  int64_t pos, R;
  float base;
  bool interleaved;
};

// Threads for a block that walks n items once: n rounded up to whole warps, at most kThreads.
int threads_for(int64_t n) { return int(n >= kThreads ? kThreads : (n + 31) / 32 * 32); }

// v as a store to dtype t would leave it.
__device__ __forceinline__ float round_to(DType t, float v) {
  return t == DType::BF16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}

// Channel d of the row at x + off rotated as rope_fwd does (same fp32 formulas): pair i < R/2 is (i, i + R/2), or
// (2i, 2i + 1) interleaved, y_a = x_a cos - x_b sin, y_b = x_b cos + x_a sin; channels >= R pass through.
__device__ __forceinline__ float rotated(const void* x, DType t, int64_t off, int64_t d, const Rope& rp) {
  const float xd = load_f(x, t, off + d);
  if (d >= rp.R) return xd;
  const int64_t half = rp.R / 2;
  const bool first = rp.interleaved ? d % 2 == 0 : d < half;  // d is x_a of its pair
  const int64_t i = rp.interleaved ? d / 2 : (first ? d : d - half);
  const int64_t mate = rp.interleaved ? (first ? d + 1 : d - 1) : (first ? d + half : d - half);
  const float inv_freq = rope_inv_freq(i, rp.R, rp.base);
  const float angle = float(rp.pos) * inv_freq;
  const float c = cosf(angle), s = sinf(angle), xm = load_f(x, t, off + mate);
  return first ? xd * c - xm * s : xd * c + xm * s;
}

// Grid B*G, block (b, KV head g); threads over the D channels.
__global__ void kv_append_kernel(void* k_cache, void* v_cache, const void* k, const void* v, DType t, int64_t S,
                                 int64_t G, int64_t D, Rope rp) {
  const int64_t bg = blockIdx.x, b = bg / G, g = bg % G;
  const int64_t src = bg * D, dst = ((b * S + rp.pos) * G + g) * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    store_f(k_cache, t, dst + d, rotated(k, t, src, d, rp));
    store_f(v_cache, t, dst + d, load_f(v, t, src + d));
  }
}

// Grid B*H, block (b, query head) of kThreads; scores (B*H, pos+1) scratch; dynamic shared memory
// ((kWarps + 1) D + kWarps) floats.
__global__ void __launch_bounds__(kThreads)
    attention_decode_kernel(void* out, float* scores, const void* k_cache, const void* v_cache, const void* q, DType t,
                            int64_t H, int64_t G, int64_t S, int64_t D, float scale, Rope rp) {
  extern __shared__ float smem[];
  float* qs = smem;              // (D) rotated q
  float* acc = qs + D;           // (kWarps, D): each warp's sum of p v
  float* lw = acc + kWarps * D;  // (kWarps): each warp's sum of p
  __shared__ float red[32];
  const int64_t bh = blockIdx.x, b = bh / H, g = (bh % H) / (H / G), n = rp.pos + 1;
  const int64_t kv0 = (b * S * G + g) * D, ld = G * D;  // key j's row in a cache: kv0 + j ld
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) qs[d] = round_to(t, rotated(q, t, bh * D, d, rp));
  __syncthreads();
  scores += bh * n;
  float m = -INFINITY;
  for (int64_t j = w; j < n; j += kWarps) {
    float part = 0.0f;
    for (int64_t d = lane; d < D; d += 32) part += qs[d] * load_f(k_cache, t, kv0 + j * ld + d);
    const float s = scale * warp_sum(part);
    if (lane == 0) scores[j] = s;
    m = fmaxf(m, s);
  }
  m = block_max(m, red);  // its barrier also publishes the scores
  float l = 0.0f;
  for (int64_t d = lane; d < D; d += 32) acc[w * D + d] = 0.0f;
  for (int64_t j = w; j < n; j += kWarps) {
    const float p = expf(scores[j] - m);
    l += p;
    for (int64_t d = lane; d < D; d += 32) acc[w * D + d] += p * load_f(v_cache, t, kv0 + j * ld + d);
  }
  if (lane == 0) lw[w] = l;
  __syncthreads();
  l = 0.0f;
  for (int i = 0; i < kWarps; ++i) l += lw[i];
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int i = 0; i < kWarps; ++i) o += acc[i * D + d];
    store_f(out, t, bh * D + d, o / l);
  }
}

// One thread per (b, c) of x (B,C), grid-stride; state (B,K-1,C), oldest row first.
__global__ void conv1d_step_kernel(void* y, void* state, const void* x, const void* w, const void* bias, DType t,
                                   int64_t BC, int64_t C, int64_t K, bool silu) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < BC; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % C, s0 = (e / C) * (K - 1) * C + c;  // state (b, j, c) is at s0 + j C
    const float xv = load_f(x, t, e);
    float acc = load_f(bias, t, c);
    for (int64_t j = 0; j < K - 1; ++j) acc += load_f(w, t, c * K + j) * load_f(state, t, s0 + j * C);
    acc += load_f(w, t, c * K + K - 1) * xv;
    store_f(y, t, e, silu ? acc * sigmoid(acc) : acc);
    for (int64_t j = 0; j < K - 2; ++j) store_f(state, t, s0 + j * C, load_f(state, t, s0 + (j + 1) * C));
    store_f(state, t, s0 + (K - 2) * C, xv);
  }
}

// Grid B*H, block (b, h) of kThreads; state (B,H,P,N); dynamic shared memory: the B and C rows of the head's
// group (2N floats).
__global__ void __launch_bounds__(kThreads)
    ssd_step_kernel(void* y, float* state, const void* x, const void* dt_raw, const void* Bm, const void* Cm,
                    const float* dt_bias, const float* A_log, const float* Dp, DType t, int64_t H, int64_t G, int64_t P,
                    int64_t N) {
  extern __shared__ float smem[];
  float* bs = smem;
  float* cs = smem + N;
  const int64_t bh = blockIdx.x, h = bh % H, bg = (bh / H) * G + h / (H / G);
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) {
    bs[n] = load_f(Bm, t, bg * N + n);
    cs[n] = load_f(Cm, t, bg * N + n);
  }
  __syncthreads();
  const float dt = softplus(load_f(dt_raw, t, bh) + dt_bias[h]), decay = expf(dt * -expf(A_log[h])), d = Dp[h];
  const int lane = threadIdx.x % 32;
  for (int64_t p = threadIdx.x / 32; p < P; p += kWarps) {
    float* s = state + (bh * P + p) * N;
    const float xp = load_f(x, t, bh * P + p), dtx = dt * xp;
    float part = 0.0f;
    for (int64_t n = lane; n < N; n += 32) {
      const float v = decay * s[n] + dtx * bs[n];
      s[n] = v;
      part += v * cs[n];
    }
    const float yp = warp_sum(part) + d * xp;
    if (lane == 0) store_f(y, t, bh * P + p, yp);
  }
}

// dst (n) = the n elements at x + off times 1 / sqrt(|x|^2 + 1e-6) (gated_delta_rule_fwd's L2 norm); the whole
// block calls it, and dst is ready for every thread on return.
__device__ void load_normalized(float* dst, const void* x, DType t, int64_t off, int64_t n, float* red) {
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    dst[i] = load_f(x, t, off + i);
    ss += dst[i] * dst[i];
  }
  const float r = 1.0f / sqrtf(block_sum(ss, red) + 1e-6f);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] *= r;
  __syncthreads();
}

// Grid B*Hv, block (b, value head h) of kThreads; state (B,Hv,dv,dk), row i of S along dk; dynamic shared memory:
// the normalised q and k of the head's key head (2 dk floats).
__global__ void __launch_bounds__(kThreads)
    gdn_step_kernel(void* o, float* state, const void* q, const void* k, const void* v, const void* alpha,
                    const void* beta_raw, const float* A_log, const float* dt_bias, DType t, int64_t Hk, int64_t Hv,
                    int64_t dk, int64_t dv) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* ks = smem + dk;
  __shared__ float red[32];
  const int64_t bh = blockIdx.x, h = bh % Hv, qk = ((bh / Hv) * Hk + h / (Hv / Hk)) * dk;
  load_normalized(qs, q, t, qk, dk, red);
  load_normalized(ks, k, t, qk, dk, red);
  const float decay = expf(-expf(A_log[h]) * softplus(load_f(alpha, t, bh) + dt_bias[h]));
  const float beta = sigmoid(load_f(beta_raw, t, bh)), scale = 1.0f / sqrtf(float(dk));
  const int lane = threadIdx.x % 32;
  for (int64_t i = threadIdx.x / 32; i < dv; i += kWarps) {
    float* s = state + (bh * dv + i) * dk;
    float part = 0.0f;
    for (int64_t j = lane; j < dk; j += 32) part += decay * s[j] * ks[j];
    const float u = beta * (load_f(v, t, bh * dv + i) - warp_sum(part));
    part = 0.0f;
    for (int64_t j = lane; j < dk; j += 32) {
      const float sj = decay * s[j] + u * ks[j];
      s[j] = sj;
      part += sj * qs[j];
    }
    const float oi = warp_sum(part) * scale;
    if (lane == 0) store_f(o, t, bh * dv + i, oi);
  }
}

}  // namespace

void attention_decode(Exec& ex, Tensor& out, Tensor& k_cache, Tensor& v_cache, const Tensor& q, const Tensor& k,
                      const Tensor& v, int64_t position, double softmax_scale, int64_t rotary_dim, double rotary_base,
                      bool interleaved) {
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), G = k.size(1), S = k_cache.size(1);
  const Rope rp{position, rotary_dim, float(rotary_base), interleaved};
  const DType t = q.dtype();
  cudaStream_t s = stream_of(ex);
  if (k.numel() > 0) {
    kv_append_kernel<<<unsigned(B * G), threads_for(D), 0, s>>>(k_cache.raw(), v_cache.raw(), k.raw(), v.raw(), t, S, G,
                                                                D, rp);
    check_launch("kv_append_kernel");
  }
  if (q.numel() == 0) return;
  Tensor scores = Tensor::empty({B * H, position + 1}, DType::F32, Device::CUDA);
  const size_t smem = size_t((kWarps + 1) * D + kWarps) * sizeof(float);
  attention_decode_kernel<<<unsigned(B * H), kThreads, smem, s>>>(
      out.raw(), scores.data<float>(), k_cache.raw(), v_cache.raw(), q.raw(), t, H, G, S, D, float(softmax_scale), rp);
  check_launch("attention_decode_kernel");
}

void conv1d_step(Exec& ex, Tensor& y, Tensor& state, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu) {
  const int64_t BC = x.numel();
  if (BC == 0) return;
  conv1d_step_kernel<<<grid_for(BC, kThreads), kThreads, 0, stream_of(ex)>>>(
      y.raw(), state.raw(), x.raw(), w.raw(), bias.raw(), x.dtype(), BC, x.size(1), w.size(1), silu);
  check_launch("conv1d_step_kernel");
}

void ssd_step(Exec& ex, Tensor& y, Tensor& state, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm,
              const Tensor& Cm, const Tensor& dt_bias, const Tensor& A_log, const Tensor& D) {
  const int64_t B = x.size(0), H = x.size(1), P = x.size(2), G = Bm.size(1), N = Bm.size(2);
  if (B * H == 0) return;
  ssd_step_kernel<<<unsigned(B * H), kThreads, size_t(2 * N) * sizeof(float), stream_of(ex)>>>(
      y.raw(), state.data<float>(), x.raw(), dt_raw.raw(), Bm.raw(), Cm.raw(), dt_bias.data<float>(),
      A_log.data<float>(), D.data<float>(), x.dtype(), H, G, P, N);
  check_launch("ssd_step_kernel");
}

void gdn_step(Exec& ex, Tensor& o, Tensor& state, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& alpha, const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias) {
  const int64_t B = q.size(0), Hk = q.size(1), dk = q.size(2), Hv = v.size(1), dv = v.size(2);
  if (B * Hv == 0) return;
  gdn_step_kernel<<<unsigned(B * Hv), kThreads, size_t(2 * dk) * sizeof(float), stream_of(ex)>>>(
      o.raw(), state.data<float>(), q.raw(), k.raw(), v.raw(), alpha.raw(), beta_raw.raw(), A_log.data<float>(),
      dt_bias.data<float>(), q.dtype(), Hk, Hv, dk, dv);
  check_launch("gdn_step_kernel");
}

}  // namespace hytra::cuda
