#include "model/flops.h"

namespace hytra {

int64_t matmul_params(const ModelConfig& cfg, const LayerCounts& counts) {
  int64_t layers = 0;
  for (const LayerKind& k : layer_kinds())
    if (k.matmul_params) layers += counts.of(k.symbol) * k.matmul_params(cfg);
  const int64_t C = cfg.hidden_size;
  const int64_t head = cfg.padded_vocab_size() * C;  // output layer (tied or not)
  const int64_t mtp = 2 * C * C + head;              // per MTP depth: eh_proj + its logits
  return layers + head + counts.mtp_depths * mtp;
}

double flops_per_token(const ModelConfig& cfg, const LayerCounts& counts) {
  double flops = 6.0 * double(matmul_params(cfg, counts));
  for (const LayerKind& k : layer_kinds())
    if (k.other_flops) flops += double(counts.of(k.symbol)) * k.other_flops(cfg);
  return flops;
}

}  // namespace hytra
