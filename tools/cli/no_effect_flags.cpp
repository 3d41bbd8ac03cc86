#include "cli/no_effect_flags.h"

#include <algorithm>

namespace hytra {

namespace {
using K = FlagSpec::Kind;

struct NoEffect {
  const char* name;
  K kind;
  const char* why;  // completes "FLAG has no effect in hytra: ..."
  std::vector<std::string> choices;
};

// Why each flag changes nothing here. Fusions: hytra's kernels are its own and already fused; its results do not
// depend on these switches.
const std::vector<NoEffect>& table() {
  static const std::vector<NoEffect> rows = {
      {"--use-mcore-models", K::Bool, "hytra's models are Megatron-Core's", {}},
      {"--is-hybrid-model", K::Bool, "the hybrid layer pattern decides the stack", {}},
      {"--spec", K::StringList, "the layer set is the hybrid (Mamba) stack spec with Transformer Engine names", {}},
      {"--transformer-impl",
       K::String,
       "hytra runs its own kernels and names parameters as the Transformer Engine spec (a local-spec checkpoint loads "
       "through its aliases)",
       {"transformer_engine", "local", "inference_optimized"}},
      {"--distributed-backend", K::String, "hytra uses NCCL for GPU tensors and MPI for CPU ones", {"nccl", "gloo"}},
      {"--no-create-attention-mask-in-dataloader", K::Bool, "attention is causal without a mask tensor", {}},
      {"--no-mmap-bin-files", K::Bool, "how the .bin files are read does not change the samples", {}},
      {"--num-workers", K::Int, "batches are cut from the indexed files in the training process", {}},
      {"--deterministic-mode", K::Bool, "hytra is always deterministic (same config and seed, same bits)", {}},
      {"--accumulate-allreduce-grads-in-fp32", K::Bool, "gradients are always accumulated and reduced in fp32", {}},
      {"--attention-softmax-in-fp32", K::Bool, "the attention softmax is always computed in fp32", {}},
      {"--no-masked-softmax-fusion", K::Bool, "kernel fusion switch", {}},
      {"--masked-softmax-fusion", K::Bool, "kernel fusion switch", {}},
      {"--no-bias-gelu-fusion", K::Bool, "kernel fusion switch", {}},
      {"--no-bias-swiglu-fusion", K::Bool, "kernel fusion switch", {}},
      {"--bias-swiglu-fusion", K::Bool, "kernel fusion switch", {}},
      {"--no-bias-dropout-fusion", K::Bool, "kernel fusion switch", {}},
      {"--no-rope-fusion", K::Bool, "kernel fusion switch", {}},
      {"--no-gradient-accumulation-fusion", K::Bool, "kernel fusion switch", {}},
      {"--no-persist-layer-norm", K::Bool, "kernel choice", {}},
      {"--cross-entropy-loss-fusion", K::Bool, "kernel fusion switch (hytra's cross-entropy is fused)", {}},
      {"--cross-entropy-fusion-impl", K::String, "kernel choice", {"native", "te"}},
      {"--moe-grouped-gemm", K::Bool, "the experts always run as grouped GEMMs", {}},
      {"--moe-permute-fusion", K::Bool, "kernel fusion switch", {}},
      {"--moe-router-fusion", K::Bool, "kernel fusion switch", {}},
      {"--moe-token-dispatcher-type",
       K::String,
       "the dispatch gives the same results with any dispatcher; expert parallelism exchanges tokens all-to-all",
       {"allgather", "alltoall", "flex"}},
      {"--moe-enable-deepep", K::Bool, "a communication backend of the flex dispatcher", {}},
      {"--moe-shared-expert-overlap", K::Bool, "a stream placement of the shared experts", {}},
      {"--use-flash-attn", K::Bool, "attention runs hytra's fused kernel (cuDNN on GPUs)", {}},
      {"--attention-backend",
       K::String,
       "attention runs hytra's fused kernel (cuDNN on GPUs)",
       {"flash", "fused", "unfused", "local", "auto"}},
      {"--tp-comm-overlap", K::Bool, "a communication-overlap switch of Transformer Engine", {}},
      {"--overlap-p2p-communication", K::Bool, "pipeline transfers are batched exchanges already", {}},
      {"--no-async-tensor-model-parallel-allreduce", K::Bool, "a communication-overlap switch", {}},
      {"--empty-unused-memory-level", K::Int, "PyTorch's cache emptying", {}},
      {"--manual-gc", K::Bool, "Python's garbage collector", {}},
      {"--manual-gc-interval", K::Int, "Python's garbage collector", {}},
      {"--high-priority-stream-groups", K::StringList, "NCCL stream priorities", {}},
      {"--ckpt-format",
       K::String,
       "checkpoints are hytra's safetensors with Megatron's canonical names",
       {"torch", "torch_dist", "zarr", "fsdp_dtensor"}},
      {"--async-save", K::Bool, "checkpoints are written synchronously, atomically", {}},
      {"--use-persistent-ckpt-worker", K::Bool, "checkpoints are written synchronously, atomically", {}},
      {"--ckpt-fully-parallel-save", K::Bool, "rank 0 writes the checkpoint", {}},
      {"--ckpt-fully-parallel-load", K::Bool, "every rank reads its own part", {}},
      {"--ckpt-assume-constant-structure", K::Bool, "a caching switch of the distributed checkpoint writer", {}},
      {"--no-save-rng", K::Bool, "hytra's random numbers are counter-based: there is no state to save", {}},
      {"--timing-log-level", K::Int, "Megatron's timers", {}},
      {"--log-straggler", K::Bool, "Megatron's straggler detector", {}},
      {"--disable-straggler-on-startup", K::Bool, "Megatron's straggler detector", {}},
      {"--straggler-minmax-count", K::Int, "Megatron's straggler detector", {}},
      {"--enable-ft-package", K::Bool, "NVIDIA's fault-tolerance package", {}},
      {"--wandb-project",
       K::String,
       "hytra does not log to Weights & Biases (use --tensorboard-dir or --log-jsonl)",
       {}},
      {"--wandb-exp-name",
       K::String,
       "hytra does not log to Weights & Biases (use --tensorboard-dir or --log-jsonl)",
       {}},
      {"--tensorboard-queue-size", K::Int, "each TensorBoard event is written and flushed at once", {}},
  };
  return rows;
}
}  // namespace

void add_no_effect_flags(FlagTable& t, TrainConfig& c) {
  for (const NoEffect& row : table()) {
    const std::string name = row.name, note = name + " has no effect in hytra: " + row.why;
    t.add(
        name, row.kind, "", std::string("accepted, no effect: ") + row.why,
        [&c, note](const FlagValues&) {
          if (std::find(c.no_effect.begin(), c.no_effect.end(), note) == c.no_effect.end()) c.no_effect.push_back(note);
        },
        row.choices);
  }
}

}  // namespace hytra
