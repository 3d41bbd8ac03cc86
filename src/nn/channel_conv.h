// The causal depthwise conv1d + SiLU of Mamba-2 (x, B, C) and the gated delta net (q, k, v) over
// consecutive channel ranges of the in_proj output. The conv is channel-wise, so each range is its
// own op call that reads its columns in place (row-pitched) and writes its own tensor: nothing is
// split or gathered around it (docs/spec/mamba_gdn.md §1 step 2, §2 step 2).
#pragma once
#include <vector>

#include "core/tensor.h"
#include "ops/exec.h"

namespace hytra {

// parts[i] (B,T,...) = silu(conv(in[:, :, range i])); the ranges follow one another from column 0 of
// in (B,T,C), each as wide as its part. w (C,K), bias (C).
void channel_conv_fwd(Exec& ex, const std::vector<Tensor*>& parts, const Tensor& in, const Tensor& w,
                      const Tensor& bias);
// din[:, :, range i] = the input gradient from dparts[i]; dw (C,K) and dbias (C) += per range.
void channel_conv_bwd(Exec& ex, const Tensor& din, Tensor& dw, Tensor& dbias, const std::vector<const Tensor*>& dparts,
                      const Tensor& in, const Tensor& w, const Tensor& bias);
// One-token decoding (nn/decode_cache.h): the same for one token per sequence, in (B,1,W) holding the conv input at
// columns [start, start + C) and parts[i] (B,...); state (B,K-1,C) holds the previous K-1 inputs and takes this one's.
void channel_conv_step(Exec& ex, const std::vector<Tensor*>& parts, Tensor& state, const Tensor& in, int64_t start,
                       const Tensor& w, const Tensor& bias);

}  // namespace hytra
