// Model FLOPs and parameter counts for throughput and MFU (llm.c's mfu.h idea), summed over the layer
// kinds' rows (model/layer_kinds.cpp holds each kind's terms):
//   FLOPs per token = 6 x (parameters of every matmul, LM head included)
//                   + 6 x (attention layers) x seq_length x (heads x head_dim)   [causal QK^T and PV]
//                   + 3 x (Mamba layers) x 7 x d_inner x N           [SSD scan, Megatron's hybrid_flops]
//                   + 3 x (GDN layers) x (8 Hv dv dk + 2 K (2 qk + v))  [delta rule and conv, the same]
// i.e. forward 2 FLOPs per multiply-add, backward twice the forward. An MoE layer's matmul parameters
// per token: the router, k routed experts and the shared experts. MTP depths count as Megatron
// counts them: their inner layers among the layer counts, and per depth eh_proj (2C x C) and one
// more LM head. Non-matmul work (norms, activations, softmax) is not counted (the MFU convention).
#pragma once
#include <cstdint>

#include "model/config.h"
#include "model/layer_kinds.h"

namespace hytra {


int64_t matmul_params(const ModelConfig& cfg, const LayerCounts& counts);
double flops_per_token(const ModelConfig& cfg, const LayerCounts& counts);

// Peak dense bf16 tensor throughput of an H100 SXM (TFLOP/s), the MFU denominator.
inline constexpr double kH100PeakTflops = 989.0;

}  // namespace hytra
