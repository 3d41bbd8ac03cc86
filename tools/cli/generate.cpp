#include "cli/generate.h"

#include <chrono>
#include <cstdio>
#include <iostream>

#include "core/device.h"
#include "core/error.h"
#include "data/preprocess.h"
#include "model/architecture.h"
#include "train/adamw.h"
#include "train/checkpointing.h"

namespace hytra {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string rate(int64_t tokens, double seconds) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%lld tokens in %.3f s (%.1f tokens/s)", static_cast<long long>(tokens), seconds,
                seconds > 0 ? double(tokens) / seconds : 0.0);
  return buf;
}

}  // namespace

Decoder::Decoder(HybridModel& model, Exec& ex, int64_t vocab, int64_t capacity)
    : model_(model), ex_(ex), vocab_(vocab), cache_(capacity) {}

std::vector<double> Decoder::step(int32_t id) {
  HYTRA_CHECK(cache_.position() < cache_.capacity(), "generate: the sequence is full (", cache_.capacity(), " tokens)");
  HYTRA_CHECK(id >= 0 && id < vocab_, "generate: token id ", id, " is outside the vocabulary [0, ", vocab_, ")");
  Tensor ids = Tensor::empty({1, 1}, DType::I32);
  ids.data<int32_t>()[0] = id;
  StepContext ctx(ex_);
  ctx.grad_enabled = false;
  ctx.decode = &cache_;
  std::vector<double> logits = model_.logits(ctx, ids.to(ex_.device())).to_f64_vector();  // (1, 1, padded)
  cache_.advance();
  logits.resize(size_t(vocab_));
  return logits;
}

Generation generate_tokens(HybridModel& model, Exec& ex, int64_t vocab, const std::vector<int32_t>& prompt,
                           const GenerateOptions& opt) {
  HYTRA_CHECK(!prompt.empty(), "generate: the prompt is empty (it needs at least one token)");
  HYTRA_CHECK(opt.max_new_tokens >= 1, "--max-new-tokens: expected at least 1, got ", opt.max_new_tokens);
  Decoder decoder(model, ex, vocab, int64_t(prompt.size()) + opt.max_new_tokens);
  TokenSampler sampler(opt.sampling, opt.seed);
  Generation out;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<double> logits;
  for (int32_t id : prompt) logits = decoder.step(id);
  ex.synchronize();
  out.prompt_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  while (true) {
    const int32_t next = sampler.next(logits);
    out.tokens.push_back(next);
    if (next == opt.stop_id || int64_t(out.tokens.size()) == opt.max_new_tokens) break;
    logits = decoder.step(next);
  }
  ex.synchronize();
  out.new_seconds = seconds_since(t0);
  return out;
}

void run_generate(const ModelConfig& mc, const TrainConfig& tc, const PromptInput& prompt, GenerateOptions opt) {
  HYTRA_CHECK(!tc.load.empty(), "--load: required (the checkpoint to generate with)");
  HYTRA_CHECK(
      tc.tensor_model_parallel_size == 1 && tc.pipeline_model_parallel_size == 1 && tc.expert_model_parallel_size == 1,
      "generate runs the whole model in one process: --tensor-, --pipeline- and "
      "--expert-model-parallel-size must be 1 (a checkpoint saved at any layout loads)");
  TokenSampler::validate(opt.sampling);
  std::unique_ptr<Tokenizer> tok;
  if (!tc.tokenizer.type.empty()) tok = load_tokenizer(tc.tokenizer);
  std::vector<int32_t> ids = prompt.ids;
  if (!prompt.text.empty()) {
    HYTRA_CHECK(tok != nullptr,
                "--prompt: a text prompt needs a tokenizer (--tokenizer-type and its files, or a "
                "checkpoint whose run_config.yaml names them); --prompt-ids takes token ids");
    ids = tok->encode(prompt.text);
  }
  HYTRA_CHECK(!ids.empty(), "generate: the prompt has no tokens (--prompt, --prompt-file or --prompt-ids)");
  for (int32_t id : ids)
    HYTRA_CHECK(id >= 0 && id < mc.vocab_size, "--prompt-ids: token id ", id, " is outside the vocabulary [0, ",
                mc.vocab_size, ")");
  if (tok != nullptr && opt.stop_at_eod) opt.stop_id = tok->eod();
  HYTRA_CHECK(mc.position_embedding_type != PositionEmbedding::LearnedAbsolute ||
                  int64_t(ids.size()) + opt.max_new_tokens <= mc.max_positions(),
              "generate: ", ids.size(), " prompt tokens + --max-new-tokens ", opt.max_new_tokens,
              " exceed the model's ", mc.max_positions(), " learned positions (--max-position-embeddings)");

  const Device dev = tc.device == DeviceChoice::CUDA || (tc.device == DeviceChoice::Auto && cuda_available())
                         ? Device::CUDA
                         : Device::CPU;
  Exec& ex = Exec::for_device(dev);
  HybridModel model(mc, plan_for(mc));
  model.params().finalize(tc.bf16 ? DType::BF16 : DType::F32, dev);
  init_params(model.params(), tc.seed);
  OptimizerState unused;  // parameters only
  TrainConfig weights_only = tc;
  weights_only.finetune = true;
  load_training_state(weights_only, model.params(), unused, architecture_record(mc, model.plan()));

  const Generation g = generate_tokens(model, ex, mc.vocab_size, ids, opt);
  if (tok != nullptr) {
    std::vector<int32_t> all = ids;
    all.insert(all.end(), g.tokens.begin(), g.tokens.end());
    std::cout << tok->decode(all) << "\n";
  } else {
    for (size_t i = 0; i < ids.size() + g.tokens.size(); ++i)
      std::cout << (i ? " " : "") << (i < ids.size() ? ids[i] : g.tokens[i - ids.size()]);
    std::cout << "\n";
  }
  std::cerr << "hytra generate: prompt " << rate(int64_t(ids.size()), g.prompt_seconds) << "; new "
            << rate(int64_t(g.tokens.size()), g.new_seconds) << " on " << (dev == Device::CUDA ? "the GPU" : "the CPU")
            << "\n";
}

}  // namespace hytra
