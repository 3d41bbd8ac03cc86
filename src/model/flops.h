// Model FLOPs and parameter counts for throughput and MFU (llm.c's mfu.h idea):
//   FLOPs per token = 6 x (parameters of every matmul, LM head included)
//                   + 6 x (attention layers) x seq_length x (heads x head_dim)   [causal QK^T and PV]
//                   + 6 x (Mamba layers) x 2 x d_inner x N     [SSD: state update and readout]
//                   + 6 x (GDN layers) x 3 x Hv x dv x dk      [delta rule: S k, update, S q]
// An MoE layer's matmul parameters per token: the router, k routed experts and the shared experts.
// i.e. forward 2 FLOPs per multiply-add, backward twice the forward. MTP and non-matmul work
// (norms, activations, softmax) are not counted, as in the usual MFU convention.
#pragma once
#include <cstdint>

#include "model/config.h"

namespace hytra {

struct LayerCounts {
  int64_t attention = 0;  // '*' sub-layers
  int64_t mlp = 0;        // '-' sub-layers
  int64_t mamba = 0;      // 'M' sub-layers
  int64_t gdn = 0;        // 'G' sub-layers
  int64_t moe = 0;        // 'E' sub-layers
};

int64_t matmul_params(const ModelConfig& cfg, const LayerCounts& counts);
double flops_per_token(const ModelConfig& cfg, const LayerCounts& counts);

// Peak dense bf16 tensor throughput of an H100 SXM (TFLOP/s), the MFU denominator.
inline constexpr double kH100PeakTflops = 989.0;

}  // namespace hytra
