// `hytra generate`: a trained model continues a prompt one token at a time. Each token runs the model's forward on
// that token alone with StepContext::decode set (nn/decode_cache.h): attention reads and extends its cache of rotated
// keys and values, the Mamba-2 mixers and gated delta nets carry their conv inputs and recurrent state (constant
// memory per token); MTP depths are not used. The prompt is fed the same way (one token a step), then the sampler
// (cli/sampling.h) picks each new token from the last position's logits.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cli/sampling.h"
#include "model/config.h"
#include "model/hybrid_model.h"
#include "nn/decode_cache.h"
#include "ops/exec.h"
#include "train/train_config.h"

namespace hytra {

// A model fed one token per step through its decode caches (one sequence).
class Decoder {
 public:
  // `vocab`: the unpadded vocabulary; `capacity`: the most tokens the sequence may reach.
  Decoder(HybridModel& model, Exec& ex, int64_t vocab, int64_t capacity);
  // Feeds `id` at the next position; returns the logits (vocab) for the token after it.
  std::vector<double> step(int32_t id);
  int64_t position() const { return cache_.position(); }

 private:
  HybridModel& model_;
  Exec& ex_;
  int64_t vocab_;
  DecodeCache cache_;
};

struct GenerateOptions {
  SamplingOptions sampling;
  int64_t max_new_tokens = 64;  // --max-new-tokens
  int32_t stop_id = -1;         // generation ends after this token (-1: none)
  bool stop_at_eod = true;      // run_generate: stop_id = the tokenizer's end of document (--ignore-eod: false)
  uint64_t seed = 1234;         // --seed
};

struct Generation {
  std::vector<int32_t> tokens;  // the new tokens (the stop token included when reached)
  double prompt_seconds = 0, new_seconds = 0;
};

// Continues `prompt` (at least one id in [0, vocab)).
Generation generate_tokens(HybridModel& model, Exec& ex, int64_t vocab, const std::vector<int32_t>& prompt,
                           const GenerateOptions& opt);

// The command: the model of `mc` loaded from tc.load on tc's device (--bf16: bf16 weights and activations), the
// prompt as text (encoded by tc's tokenizer) or as ids; prints the prompt and its continuation to stdout and the
// rates to stderr.
struct PromptInput {
  std::string text;          // --prompt / --prompt-file
  std::vector<int32_t> ids;  // --prompt-ids (used when text is empty)
};
void run_generate(const ModelConfig& mc, const TrainConfig& tc, const PromptInput& prompt, GenerateOptions opt);

}  // namespace hytra
