// `hytra eval-step`: one forward/backward of a model from a checkpoint on a given token batch,
// writing the per-token losses and every parameter's gradient under its canonical key, so hytra can
// be compared with another implementation of the same model.
// Batch file (safetensors): `tokens` [B, T+1] (inputs = first T, labels = last T, as GPTDataset
// samples), or `input_ids` [B, T] with `labels` [B, T] (label -1 = not a target); int32 or int64.
// Output (safetensors): `losses` F32 [B, T], `loss` F32 [] (mean over targets), `logits` F32 [B, T, vocab size] (the
// padding rows left out; models without learned position embeddings), and one F32 gradient per parameter of
// d(loss)/d(parameter).
#pragma once
#include <string>

#include "model/config.h"
#include "train/train_config.h"

namespace hytra {

void eval_step(const ModelConfig& mc, const TrainConfig& tc, const std::string& batch_path, const std::string& out_path);

}  // namespace hytra
