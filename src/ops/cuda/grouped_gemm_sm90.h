// The Hopper grouped GEMM of the MoE experts (ops.def grouped_gemm*), bf16 in, fp32 accumulation: one
// persistent TMA + wgmma kernel over every expert's tiles, the experts' row offsets read on the device.
// grouped_gemm.cu decides when it applies (sm_90, bf16, sizes multiples of 8, aligned buffers) and
// falls back to plain CUDA kernels otherwise.
#pragma once
#include <cstdint>

#include "ops/op_types.h"

namespace hytra::cuda {

enum class GroupedMode {
  Forward,  // y (R,N) = a (R,K) w_e^T, w (E,N,K)
  Dgrad,    // y (R,N) = a (R,K) w_e, w (E,K,N)
  Glu,      // Forward into h (R,2F) and y (R,F) = act(h) * probs
  Wgrad,    // dw_e (N,K) fp32 = beta dw_e + a_e^T b_e over group e's rows; a (R,N), b (R,K)
};

struct GroupedGemmArgs {
  GroupedMode mode;
  const int32_t* offsets;  // (E+1) group row offsets, device
  int E;
  int64_t R;           // rows of a
  int N, K;            // Forward/Dgrad/Glu: y (R,N) [Glu: N = 2F, h's width]; Wgrad: dw_e (N,K)
  const void* a;       // bf16 (R,K); Wgrad (R,N)
  const void* b;       // bf16 weights, Wgrad: (R,K)
  void* y;             // bf16 (R,N) / Glu: (R,F); Wgrad: fp32 (E,N,K)
  void* h;             // Glu: bf16 (R,2F)
  const float* probs;  // Glu: (R)
  ops::ExpertActivation act;
  int I;  // Glu: interleave (F for the plain layout)
  float offset, clamp, beta;
};

// True when the kernel can run these arguments on the current device.
bool grouped_gemm_sm90_fits(const GroupedGemmArgs& g);
void grouped_gemm_sm90(const GroupedGemmArgs& g, void* stream);

}  // namespace hytra::cuda
