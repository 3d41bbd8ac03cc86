// The SSD kernels both directions run (ssd_fwd.cu's header has the algorithm): dt and the chunk-local
// cumulative log-decay, the C.B blocks, and the chunk-to-chunk state recurrence.
#include <algorithm>

#include "core/cuda_check_cuda.h"
#include "ops/cuda/ssd.cuh"

namespace hytra::cuda::ssd {
namespace {

constexpr int kDtWarps = 8;
constexpr int kCbThreads = 128;    // 4 warps x 16 rows of a 64x64 block
constexpr int kScanThreads = 128;  // 4 warps x 16 rows of a 64x64 state tile

// One warp per (b, h, chunk): dt = softplus(dt_raw + dt_bias) (0 past T), cum = inclusive sum of
// dt*A/ln 2 over the chunk (decays are exp2 of differences), 32 steps at a time with a carry.
template <class T>
__global__ void ssd_dt_kernel(Args<T> a) {
  const Dims& d = a.d;
  const int64_t w = int64_t(blockIdx.x) * kDtWarps + threadIdx.x / 32;
  if (w >= d.B * d.H * d.nC) return;  // whole warps
  const int lane = int(threadIdx.x) & 31;
  const int64_t c = w % d.nC, bh = w / d.nC, b = bh / d.H, h = bh % d.H;
  const float bias = a.dt_bias[h], A2 = -expf(a.A_log[h]) * kLog2e;
  float carry = 0.0f;
  for (int j0 = 0; j0 < d.Q; j0 += 32) {
    const int64_t t = c * d.Q + j0 + lane;
    const float dt = t < d.T ? softplus(to_float(a.dt_raw[(b * d.T + t) * d.ldt + h]) + bias) : 0.0f;
    float s = dt * A2;
    for (int o = 1; o < 32; o <<= 1) {
      const float u = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += u;
    }
    a.dt[bh * d.TQ() + t] = dt;
    a.cum[bh * d.TQ() + t] = carry + s;
    carry += __shfl_sync(0xffffffffu, s, 31);
  }
}

// One 64x64 block (ti, tj) of out[b,c,g][r][s] = X_r . Y_s (rows r, s of the chunk): warp w computes
// rows 16w.., N in steps of 64 through shared memory. Only blocks on the side the readers use
// (tj <= ti, or tj >= ti when `upper`) are computed.
template <class T>
__global__ void __launch_bounds__(kCbThreads) ssd_cb_kernel(Args<T> a, const T* X, const T* Y, bool upper) {
  const Dims& d = a.d;
  const int tq = d.Q / kTile, ti = int(blockIdx.x) / tq, tj = int(blockIdx.x) % tq;
  if (upper ? tj < ti : tj > ti) return;
  const int64_t g = blockIdx.y, b = blockIdx.z / d.nC, c = blockIdx.z % d.nC, t0 = c * d.Q;
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int ld = kTile + kPad<T>;
  T* sx = reinterpret_cast<T*>(smem);  // (64, ld) rows r
  T* sy = sx + kTile * ld;             // (64, ld) rows s
  const int warp = int(threadIdx.x) / 32;
  const int64_t rx = t0 + ti * kTile, ry = t0 + tj * kTile;
  const int vx = int(std::min<int64_t>(kTile, d.T - rx)), vy = int(std::min<int64_t>(kTile, d.T - ry));
  Acc acc[8] = {};
  for (int n0 = 0; n0 < d.N; n0 += kTile) {
    stage_tile(sx, ld, X + (vx > 0 ? d.brow(b, rx, g) : 0) + n0, d.G * d.N, kTile, kTile, vx, int(d.N - n0));
    stage_tile(sy, ld, Y + (vy > 0 ? d.brow(b, ry, g) : 0) + n0, d.G * d.N, kTile, kTile, vy, int(d.N - n0));
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      FragA<T> fa;
      load_a<true>(fa, sx, ld, 16 * warp, 16 * kk);
      mma_x64<true>(acc, fa, sy, ld, 16 * kk);
    }
    __syncthreads();
  }
  T* out = a.cb + d.cb(b, c, g) + int64_t(ti * kTile + 16 * warp) * d.Q + tj * kTile;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
      store2(out + acc_row(2 * hf) * d.Q + 8 * nt + acc_col(0), acc[nt].v[2 * hf], acc[nt].v[2 * hf + 1]);
}

// The state recurrence for one (b, h) and one 64x64 tile (p0, n0) of the (P, N) state; warp w holds
// state rows p0 + 16w.. in fp32 accumulators. Chunks in order (forward) or reversed (kRev):
//   forward: states[c] = S entering c;    S  <- exp(cumL) S  + sum_j dt_j exp(cumL - cum_j) x_j B_j^T
//   reverse: dstates[c] = dS leaving c;   dS <- exp(cumL) dS + sum_i exp(cum_i) dy_i C_i^T,
//            e_part[b,h,c,tile] = exp(cumL) <dS leaving c, S entering c> over the tile.
// The product's A operand is the staged (chunk, 64) x or dy tile read transposed, its columns scaled by
// the step weights. The next chunk's tiles are copied in (cp.async, two stages) during the product.
template <class T, bool kRev>
__global__ void __launch_bounds__(kScanThreads) ssd_scan_kernel(Args<T> a, float* e_part) {
  const Dims& d = a.d;
  const int tile = int(blockIdx.x), p0 = (tile / d.nt) * kTile, n0 = (tile % d.nt) * kTile;
  const int64_t h = blockIdx.y, b = blockIdx.z, g = h / d.hpg();
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int ld = kTile + kPad<T>;
  const int stage_elems = d.Q * ld;
  T* su = reinterpret_cast<T*>(smem);                            // (2, Q, ld): x or dy
  T* sv = su + 2 * stage_elems;                                  // (2, Q, ld): Bm or Cm
  float* s_dt = reinterpret_cast<float*>(sv + 2 * stage_elems);  // (2, Q)
  float* s_cum = s_dt + 2 * d.Q;                                 // (2, Q)
  float* s_w = s_cum + 2 * d.Q;                                  // (Q) step weights
  float* s_red = s_w + d.Q;                                      // (4) e per warp
  [[maybe_unused]] T* sst = reinterpret_cast<T*>(s_red + 4);     // reverse: (2, 64, ld) S entering
  const T* U = kRev ? a.dy : a.x;
  const T* V = kRev ? a.Cm : a.Bm;
  T* out = kRev ? a.dstates : a.states;
  const int warp = int(threadIdx.x) / 32;
  const int steps = d.nC;
  auto chunk_of = [&](int k) -> int64_t { return kRev ? steps - 1 - k : k; };
  // Step k's tiles and scalars into buffer k % 2.
  auto stage = [&](int k) {
    const int64_t c = chunk_of(k), t0 = c * d.Q;
    const int rows = int(std::min<int64_t>(d.Q, d.T - t0)), buf = k & 1;
    stage_scalars(s_dt + buf * d.Q, s_cum + buf * d.Q, a, b, h, c);
    stage_tile(su + buf * stage_elems, ld, U + d.xrow(b, t0, h) + p0, d.H * d.P, d.Q, kTile, rows, int(d.P - p0));
    stage_tile(sv + buf * stage_elems, ld, V + d.brow(b, t0, g) + n0, d.G * d.N, d.Q, kTile, rows, int(d.N - n0));
    if constexpr (kRev)
      stage_tile(sst + buf * kTile * ld, ld, a.states + d.state(b, h, c) + int64_t(p0) * d.SN() + n0, d.SN(), kTile,
                 kTile, kTile, kTile);
  };
  Acc acc[8] = {};
  stage(0);
  cp_async_commit();
  for (int k = 0; k < steps; ++k) {
    const int64_t c = chunk_of(k);
    const int buf = k & 1;
    if (k + 1 < steps) stage(k + 1);
    cp_async_commit();  // one group per step, empty at the end
    cp_async_wait<1>();
    __syncthreads();  // step k's tiles and scalars
    const float* cum = s_cum + buf * d.Q;
    const float cumL = cum[d.Q - 1], alpha = exp2f(cumL);
    for (int j = int(threadIdx.x); j < d.Q; j += kScanThreads)
      s_w[j] = kRev ? exp2f(cum[j]) : s_dt[buf * d.Q + j] * exp2f(cumL - cum[j]);
    T* o = out + d.state(b, h, c) + int64_t(p0 + 16 * warp) * d.SN() + n0;
    float e = 0.0f;
    [[maybe_unused]] const T* st = sst + buf * kTile * ld + 16 * warp * ld;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = acc_row(2 * hf), col = 8 * nt + acc_col(0);
        store2(o + int64_t(r) * d.SN() + col, acc[nt].v[2 * hf], acc[nt].v[2 * hf + 1]);
        if constexpr (kRev) {
          const float2 s = load2(st + r * ld + col);
          e += acc[nt].v[2 * hf] * s.x + acc[nt].v[2 * hf + 1] * s.y;
        }
      }
    if constexpr (kRev) {
      e = warp_sum(e);
      if (lane_id() == 0) s_red[warp] = e;
    }
    __syncthreads();      // s_w
    if (k + 1 < steps) {  // the last step's update is never read
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt].v[i] *= alpha;
      const T* bu = su + buf * stage_elems;
      const T* bv = sv + buf * stage_elems;
#pragma unroll 4
      for (int kk = 0; kk < d.Q / 16; ++kk) {
        FragA<T> fa;
        load_a<false>(fa, bu, ld, 16 * warp, 16 * kk);
        float v[8];
        get_a(fa, v);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] *= s_w[16 * kk + a_col(i)];
        set_a(fa, v);
        mma_x64<false>(acc, fa, bv, ld, 16 * kk);
      }
    }
    if constexpr (kRev) {
      if (threadIdx.x == 0)
        e_part[((b * d.H + h) * d.nC + c) * (d.pt * d.nt) + tile] = alpha * (s_red[0] + s_red[1] + s_red[2] + s_red[3]);
    }
    __syncthreads();  // buffers and s_w free for the next step
  }
}

}  // namespace

int smem_limit() {
  static const int limit = [] {
    int dev = 0, v = 0;
    cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
    cuda_check(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "shared memory limit");
    return v;
  }();
  return limit;
}

Dims make_dims(const Tensor& x, const Tensor& Bm, int64_t chunk_size) {
  Dims d;
  d.B = x.size(0);
  d.T = x.size(1);
  d.H = x.size(2);
  d.P = x.size(3);
  d.G = Bm.size(2);
  d.N = Bm.size(3);
  d.Pk = int((d.P + 15) / 16 * 16);
  d.pt = int((d.P + kTile - 1) / kTile);
  d.nt = int((d.N + kTile - 1) / kTile);
  d.Q = chunk_size >= 256 ? 256 : (chunk_size >= 128 ? 128 : 64);
  const int limit = smem_limit();
  const int64_t e = int64_t(dtype_size(x.dtype()));
  auto fits = [&] {
    return std::max({scan_smem(d, e, true), out_smem(d, e, 1), dx_smem(d, e), bc_smem(d, e, false, true),
                     cb_smem(e)}) <= limit;
  };
  while (d.Q > 64 && !fits()) d.Q /= 2;
  HYTRA_CHECK(fits(), "ssd_chunk_scan on CUDA: head dim P = ", d.P, " needs more shared memory than the device has");
  d.nC = int((d.T + d.Q - 1) / d.Q);
  return d;
}

template <class T>
void launch_dt(Exec& ex, const Args<T>& a) {
  const int64_t warps = a.d.B * a.d.H * a.d.nC;
  ssd_dt_kernel<T><<<unsigned((warps + kDtWarps - 1) / kDtWarps), kDtWarps * 32, 0, stream_of(ex)>>>(a);
  check_launch("ssd_dt_kernel");
}

template <class T>
void launch_cb(Exec& ex, const Args<T>& a, bool transposed) {
  const int64_t smem = cb_smem(sizeof(T)), tq = a.d.Q / kTile;
  allow_smem(&ssd_cb_kernel<T>, smem, "ssd_cb_kernel smem");
  const dim3 grid(unsigned(tq * tq), unsigned(a.d.G), unsigned(a.d.B * a.d.nC));
  ssd_cb_kernel<T><<<grid, kCbThreads, size_t(smem), stream_of(ex)>>>(a, transposed ? a.Bm : a.Cm,
                                                                      transposed ? a.Cm : a.Bm, transposed);
  check_launch("ssd_cb_kernel");
}

template <class T>
void launch_scan(Exec& ex, const Args<T>& a, bool reverse, float* e_part) {
  const int64_t smem = scan_smem(a.d, sizeof(T), reverse);
  const dim3 grid(unsigned(a.d.pt * a.d.nt), unsigned(a.d.H), unsigned(a.d.B));
  auto run = [&](auto kernel) {
    allow_smem(kernel, smem, "ssd_scan_kernel smem");
    kernel<<<grid, kScanThreads, size_t(smem), stream_of(ex)>>>(a, e_part);
  };
  if (reverse)
    run(&ssd_scan_kernel<T, true>);
  else
    run(&ssd_scan_kernel<T, false>);
  check_launch("ssd_scan_kernel");
}

template void launch_dt<float>(Exec&, const Args<float>&);
template void launch_dt<bf16>(Exec&, const Args<bf16>&);
template void launch_cb<float>(Exec&, const Args<float>&, bool);
template void launch_cb<bf16>(Exec&, const Args<bf16>&, bool);
template void launch_scan<float>(Exec&, const Args<float>&, bool, float*);
template void launch_scan<bf16>(Exec&, const Args<bf16>&, bool, float*);

}  // namespace hytra::cuda::ssd
