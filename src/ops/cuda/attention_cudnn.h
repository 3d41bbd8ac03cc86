// Causal GQA attention through cuDNN's fused flash-attention (SDPA) engines, driven through the
// C backend API (attention_cudnn.cpp is the only file that includes cuDNN). ops.h "attention"
// semantics: q, out (B,T,H,D); k, v (B,T,Hkv,D); lse (B,H,T) fp32, natural log. cuda::attention_fwd
// and cuda::attention_bwd (attention.cu) call these when cudnn_attention_supported() says yes.
#pragma once
#include "core/tensor.h"
#include "ops/exec.h"

namespace hytra::cuda {

// bf16 q, k, v, out (and every gradient), fp32 lse, head dim 64 or 128, H % Hkv == 0, all on the
// GPU, contiguous in the (B,T,H,D) / (B,T,Hkv,D) / (B,H,T) layouts, with 16-byte aligned data.
bool cudnn_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v);
bool cudnn_attention_fwd_supported(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                   const Tensor& v);
bool cudnn_attention_bwd_supported(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                   const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                   const Tensor& lse);

void cudnn_attention_fwd(Exec& ex, Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         double softmax_scale);

// Deterministic: the graph writes dQ straight from its matmul (cuDNN's dP-workspace backward, no
// atomically accumulated fp32 dQ), so two runs give bitwise-identical gradients. The price is
// workspace of about B*H*T*T*2 bytes (2.2 GB at B=2, T=4096, H=32), taken from the caching
// allocator for the duration of the call.
void cudnn_attention_bwd(Exec& ex, Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                         const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                         double softmax_scale);

}  // namespace hytra::cuda
