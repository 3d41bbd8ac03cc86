// Parameters: each is a named view into one flat value buffer and one flat gradient buffer
// (docs/ARCHITECTURE.md "The layer contract"), so the optimizer, the grad norm and later the
// all-reduces and checkpoints work on large contiguous spans. Layers create their Params at
// construction (shape, init, decay flag, canonical Megatron key); ParamStore::finalize() then
// allocates the buffers and points every Param at its slice.
// Mixed precision (--bf16, docs/ARCHITECTURE.md "Precision"): the model computes with bf16 values while the
// optimizer updates an fp32 master copy; `master` then views a separate fp32 buffer and the values
// are refreshed from it (init, load, every optimizer step). In fp32/fp64 runs master IS the value.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/exec.h"

namespace hytra {

// How init_params fills a parameter. Uniform kinds draw u ~ U(0,1) from Philox keyed like Normal.
enum class InitKind {
  Normal,  // N(0, init_std)
  Zeros,
  Ones,
  Uniform,      // U(lo, hi)
  LogUniform,   // ln U(lo, hi): Mamba/GDN A_log (docs/spec/mamba_gdn.md)
  MambaDtBias,  // dt = exp(U(ln lo, ln hi)) clamped >= 1e-4, then softplus^-1(dt) (docs/spec/mamba_gdn.md §1)
};

// Tensor parallelism (nn/tensor_parallel.h): the slice of a whole tensor one tensor-parallel rank holds. The whole
// tensor's dim `dim` is made of consecutive parts (e.g. a GLU's gate and linear halves, Mamba's z, x, B, C, dt);
// each part is cut into `count` equal slices and the rank holds slice `index` of every part, one after the other.
struct ParamShard {
  int dim = -1;                // -1: the whole tensor (the same on every tensor-parallel rank)
  std::vector<int64_t> parts;  // the whole tensor's parts along dim (their sizes)
  int count = 1, index = 0;
  bool experts = false;  // split over the expert-parallel group (a grouped expert tensor), else the tensor-parallel one
  bool split() const { return dim >= 0 && count > 1; }
};

struct Param {
  std::string name;  // canonical Megatron-Core key, e.g. "decoder.layers.0.mlp.linear_fc1.weight"
  Shape shape;
  InitKind init = InitKind::Normal;
  double init_std = 0.02;               // Normal only
  double init_lo = 0.0, init_hi = 1.0;  // the uniform kinds' range
  // Normal init in init_groups equal slices of dim 0, slice g drawn from the stream of name + g: a
  // single grouped expert tensor [E,out,in] ("...weight") then holds exactly the values the per-expert
  // tensors "...weight0".."...weight{E-1}" would (both layouts start identical).
  int64_t init_groups = 1;
  bool no_decay = false;  // norms and biases: no weight decay
  Tensor value;           // view into the flat value buffer (after finalize): what layers compute with
  Tensor master;          // fp32 master weights (bf16 runs); the same tensor as value otherwise
  Tensor grad;            // view into the flat gradient buffer (fp32, fp64 for fp64 values)
  int64_t offset = 0;     // first element of value / master / grad in the flat buffers (after finalize)
  // Placed right after the previous parameter, without padding: one expert of a per-expert weight list, so
  // that the list reads as one (E, ...) tensor.
  bool follows_previous = false;
  // The forward reads `master`, not `value` (small parameters used in fp32: Mamba/GDN decays and biases, the mHC
  // mappings, router biases): the distributed optimizer then gathers the master weights, not only the values.
  bool master_in_forward = false;
  ParamShard shard;  // tensor parallelism: which slice of the canonical tensor `shape` is
  // A parameter held whole on every tensor-parallel rank whose gradient each rank computes from a part of the work
  // (a norm over heads split across the ranks; anything under sequence parallelism): its gradient is summed over the
  // tensor-parallel ranks before the optimizer step.
  bool tp_partial_grad = false;
  // A routed expert's weight under expert parallelism (nn/tensor_parallel.h ExpertParallel): this rank's experts
  // alone. Its gradient sums over the expert-data-parallel group (not the data-parallel one), the gradient norm
  // counts it on every expert-parallel rank, and a save gathers it from them (a grouped tensor's `shard` is then
  // along the experts, over the expert-parallel group).
  bool expert_parallel = false;
  // The canonical (whole) tensor's shape: `shape` with the split dim's parts restored.
  Shape full_shape() const;

  // Set by a layer whose every write of this gradient is a GEMM taking its beta from grad_beta()
  // (Linear): ParamStore::zero_grad(lazy) then skips its memset and the first write overwrites.
  bool grad_by_overwrite = false;
  bool grad_stale = false;  // the buffer holds an old gradient that counts as zero
  // The GEMM beta for the next write of `grad`: 0 for the first write after a lazy zero_grad, else 1.
  float grad_beta() {
    const bool stale = grad_stale;
    grad_stale = false;
    return stale ? 0.0f : 1.0f;
  }
};

class ParamStore {
 public:
  // Registers a parameter; a duplicate name is an error (it would collide in checkpoints).
  Param& create(const std::string& name, const Shape& shape, InitKind init, double init_std, bool no_decay);
  // Allocates the flat buffers in `dtype` on `device`, gradients zeroed (fp32; fp64 for fp64 values). A bf16
  // `dtype` also allocates the fp32 master buffer. Every parameter but those that follow the previous one starts
  // at a multiple of kAlign elements (256 bytes of fp32): GEMM libraries pick their fast kernels only for aligned
  // operands, and a small parameter (an mHC gate of one element) would otherwise shift every one after it. The
  // padding between parameters stays zero in all buffers. `align` (a multiple of kAlign) replaces kAlign: the
  // data-parallel buckets start at parameters and must divide by the number of ranks (train/grad_buckets.h).
  void finalize(DType dtype, Device device, int64_t align = kAlign);
  static constexpr int64_t kAlign = 64;
  bool finalized() const { return values_.defined(); }

  const std::vector<Param*>& all() const { return order_; }  // creation order
  Param* find(const std::string& name) const;
  int64_t num_elements() const { return num_elements_; }  // the parameters' elements, padding excluded
  Tensor& flat_values() { return values_; }
  Tensor& flat_master() { return master_; }
  bool has_separate_master() const { return master_.raw() != values_.raw(); }
  // values = master, rounded to the values' dtype (no-op when they are one buffer).
  void sync_values_from_master();
  Tensor& flat_grads() { return grads_; }
  // Zeroes every gradient. `lazy` (the trainer's step): the grad_by_overwrite parameters are only
  // marked stale (their first GEMM overwrites them: no memset pass over most of the buffer); then
  // finish_grads() must run before anything reads the gradients.
  void zero_grad(bool lazy = false);
  // Zeroes the gradients still stale (parameters no write reached in this step): all, or those of the
  // parameters [first, end) of all() (a data-parallel bucket whose gradients are complete).
  void finish_grads();
  void finish_grads(size_t first, size_t end);

 private:
  std::vector<std::unique_ptr<Param>> owned_;
  std::vector<Param*> order_;
  std::map<std::string, Param*> by_name_;
  int64_t num_elements_ = 0;
  Tensor values_, master_, grads_;  // (total elements)
};

// The slices of `full` (a whole tensor) that make the shard `s`, copied into `local`; and the reverse, `local` placed
// into its slices of `full` (the rest of `full` left as it is). Same dtype and device.
void copy_shard(Exec& ex, Tensor& local, const Tensor& full, const ParamShard& s);
void place_shard(Exec& ex, Tensor& full, const Tensor& local, const ParamShard& s);

// Fills every parameter's master from its init: Normal(0, std) from Philox keyed by (seed, the
// parameter's name, element index), so values do not depend on creation order or device (a tensor-parallel shard
// takes its slices of the whole tensor's values: the same as one process's); Zeros;
// Ones; the uniform kinds from philox_uniform01 with the same key (drawn on the host: they are
// small tensors). Then refreshes the (bf16) values from the masters.
void init_params(ParamStore& store, uint64_t seed);

}  // namespace hytra
