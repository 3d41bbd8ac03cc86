// The chunked gated delta rule on CUDA (ops.def "gated delta rule"): definitions shared by its
// kernels — gdn_prep.cu (per chunk: gates, UT transform), gdn_state.cu (the sequential passes over
// chunks), gdn_bwd_dqk.cu and gdn_bwd_wy.cu (per-chunk gradients) — launched by gdn.cu.
//
// Per (b, value head h, chunk of C steps entered with state S0 (dv, dk)), in the chunk's own frame:
// gam_i = g_0 + .. + g_i (cumulative log decay), beta_i, rq_i = rsqrt(|q_i|^2 + eps), rk_i likewise;
// the products take the raw q, k rows and the norms scale their results (exact bf16 operands).
//   A = strictly-lower(beta_i rk_i rk_j e^(gam_i - gam_j) k_i.k_j),  T = (I + A)^-1
//   W = T diag(beta e^gam rk) K,  U = T diag(beta) V,  P = lower(scale rq_i rk_j e^(gam_i - gam_j) q_i.k_j)
//   Vn = U - W S0^T                                     (the corrections u of ops/cpu/gdn.cpp)
//   o = diag(scale e^gam rq) Q S0^T + P Vn
//   S_next = e^gamL S0 + (diag(e^(gamL - gam) rk) Vn)^T K    (gamL: the chunk's last gam)
// e^(gam_i - gam_j) is only formed for j <= i (never overflows). C is 64 for bf16 (mma.sync tiles),
// 32 for fp32 (the scalar path, in less shared memory); the op's chunk_size does not change the
// result beyond rounding and is not used. Rows past T in the last chunk are zero, with g = beta = 0.
// dk and dv are padded to dkp, dvp (multiples of 32) with zeros in shared memory and workspaces.
//
// Workspaces, per chunk (index bhc = (b Hv + h) nc + c), in the activations' type E unless noted:
// gates (kGates, C) fp32 (below); W (C, dkp); U (C, dvp); P (C, C); and for the backward T (C, C),
// S0 (dvp, dkp), Vn (C, dvp), dS (dvp, dkp) (the gradient of the state leaving the chunk),
// dVn (C, dvp), dW (C, dkp), dgam (C) fp32; per token dqn, dkn (B,T,Hv,dk), dg, dbeta (B,T,Hv) fp32.
#pragma once
#include <cstdint>

#include "ops/cuda/block_mma.cuh"

namespace hytra::cuda::gdn {

template <class E>
inline constexpr int kChunk = sizeof(E) == 2 ? 64 : 32;
constexpr int kVT = 32;     // value rows of the state one block of a sequential pass carries
constexpr int kVS = 32;     // value columns per slice in gdn_bwd_dqk
constexpr int kRowPad = 8;  // E row padding (ld = width + 8)
constexpr float kNormEps = 1e-6f;

// The per-step gate arrays of a chunk (C floats each, in this order): gam; beta; rq, rk (the L2
// norms' reciprocals); ed = e^(gamL - gam); eq = scale e^gam; wk = beta e^gam rk.
enum Gate { kGam, kBeta, kRq, kRk, kEd, kEq, kWk, kGates };

struct Dims {
  int64_t B, T;
  int Hk, Hv, dk, dv;
  int dkp, dvp;  // dk, dv rounded up to a multiple of 32
  int nc;        // chunks per sequence
  float scale;   // dk^-0.5
};

template <class E>
struct Inputs {
  const E* q;            // (B,T,Hk,dk)
  const E* k;            // (B,T,Hk,dk)
  const E* v;            // (B,T,Hv,dv)
  const E* alpha;        // (B,T,Hv)
  const E* beta_raw;     // (B,T,Hv)
  const float* A_log;    // (Hv)
  const float* dt_bias;  // (Hv)
};

template <class E>
struct Work {
  float* gates;  // (BHnc, kGates, C)
  E* w;          // (BHnc, C, dkp)
  E* u;          // (BHnc, C, dvp)
  E* p;          // (BHnc, C, C)
  E* t;          // (BHnc, C, C); null in the forward
  E* s0;         // (BHnc, dvp, dkp)
  E* vn;         // (BHnc, C, dvp)
  E* ds;         // (BHnc, dvp, dkp)
  E* dvn;        // (BHnc, C, dvp)
  E* dw;         // (BHnc, C, dkp)
  float* dgam;   // (BHnc, C)
  float* dqn;    // (B,T,Hv,dk)
  float* dkn;    // (B,T,Hv,dk)
  float* dg;     // (B,T,Hv)
  float* dbeta;  // (B,T,Hv)
};

// Where one chunk of one (b, value head) sits.
template <class E>
struct ChunkPos {
  static constexpr int C = kChunk<E>;
  int64_t bh, b, bhc, t0;
  int h, hk, c, L;  // L: valid steps (C but in a partial last chunk)
  __device__ ChunkPos(const Dims& d, int64_t bh_, int c_) : bh(bh_), b(bh_ / d.Hv), bhc(bh_ * d.nc + c_) {
    h = int(bh % d.Hv);
    hk = h / (d.Hv / d.Hk);
    c = c_;
    t0 = int64_t(c) * C;
    L = int(d.T - t0 < C ? d.T - t0 : C);
  }
  __device__ int64_t qk_off(const Dims& d) const { return ((b * d.T + t0) * d.Hk + hk) * d.dk; }  // q, k row t0
  __device__ int64_t v_off(const Dims& d) const { return ((b * d.T + t0) * d.Hv + h) * d.dv; }    // v, o row t0
  __device__ int64_t gate_off(const Dims& d, int i) const { return (b * d.T + t0 + i) * d.Hv + h; }
  __device__ int64_t head_off(const Dims& d, int i) const { return ((b * d.T + t0 + i) * d.Hv + h) * d.dk; }
};

// Kernel launchers (one per file), explicitly instantiated for float and bf16.
template <class E>
void launch_prep(const Dims& d, const Inputs<E>& in, const Work<E>& ws, cudaStream_t s);
// o non-null: writes o; null: saves S0 and Vn for the backward instead.
template <class E>
void launch_state_fwd(const Dims& d, const Inputs<E>& in, const Work<E>& ws, E* o, cudaStream_t s);
template <class E>
void launch_state_bwd(const Dims& d, const Inputs<E>& in, const E* dout, const Work<E>& ws, cudaStream_t s);
template <class E>
void launch_bwd_dqk(const Dims& d, const Inputs<E>& in, const E* dout, const Work<E>& ws, cudaStream_t s);
template <class E>
void launch_bwd_wy(const Dims& d, const Inputs<E>& in, const Work<E>& ws, E* dv, cudaStream_t s);

// The chunk's gate arrays from the prep kernel's workspace into shared memory (asynchronously:
// stage_tile).
template <class E>
__device__ void load_gates(float* dst, const Work<E>& ws, int64_t bhc) {
  constexpr int n = kGates * kChunk<E>;
  stage_tile(dst, n, ws.gates + bhc * n, n, 1, n, 1, n);
}

}  // namespace hytra::cuda::gdn
