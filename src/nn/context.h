// StepContext: the state of one micro-batch in flight — the executor, each layer's saved tensors
// (a slot per layer, keyed by the layer's address, holding that layer's `Saved` struct), and the
// queue of delayed weight-gradient tasks (--delay-wgrad-compute, docs/spec/moe.md §7): under delay_wgrad,
// Linear::backward pushes its dW/db GEMMs here tagged with the Linear as owner; a layer's
// backward_dw() runs only its own Linears' tasks (EP-overlap schedules run them per layer), and
// run_wgrad() drains everything still queued, in push order.
#pragma once
#include <any>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/exec.h"

namespace hytra {

class DecodeCache;  // nn/decode_cache.h

// What the data-parallel optimizer learns from a micro-batch (train/distributed_optimizer.h, its overlap of
// communication with computation): parameters are named by their place in ParamStore::all().
class ParamHooks {
 public:
  virtual ~ParamHooks() = default;
  // The forward is about to read the values of the parameters before `end`.
  virtual void params_needed(size_t end) = 0;
  // The backward has completed the gradients of the parameters [first, end) (again: no-op).
  virtual void grads_ready(size_t first, size_t end) = 0;
};

// The EP-overlap schedule's hand-over points (train/combined_schedule.h, docs/spec/ep_overlap.md): where one
// micro-batch's forward or backward pauses so that the other micro-batch's pass runs (MoE layers mark them).
enum class Handover : uint8_t {
  BeforeDispatch,             // forward: the pre-dispatch work is queued (mixers, norm, router, permutation)
  BeforeExperts,              // forward: the dispatch all-to-all is started
  AfterCombine,               // forward: the experts ran and the combine all-to-all is started
  BeforeCombineBackward,      // backward: an MoE layer is reached
  BeforeExpertsBackward,      // backward: the combine's backward all-to-all is started
  BeforeDispatchBackward,     // backward: the experts' backward is queued (their delayed wgrad next)
  BeforePreDispatchBackward,  // backward: the dispatch's backward all-to-all is started
};
inline const char* handover_name(Handover h) {
  switch (h) {
    case Handover::BeforeDispatch: return "before the dispatch";
    case Handover::BeforeExperts: return "before the experts";
    case Handover::AfterCombine: return "after the combine";
    case Handover::BeforeCombineBackward: return "before the combine's backward";
    case Handover::BeforeExpertsBackward: return "before the experts' backward";
    case Handover::BeforeDispatchBackward: return "before the dispatch's backward";
    case Handover::BeforePreDispatchBackward: return "before the pre-dispatch backward";
  }
  return "?";
}

class HandoverHook {
 public:
  virtual ~HandoverHook() = default;
  virtual void reached(Handover h) = 0;
};

class StepContext {
 public:
  explicit StepContext(Exec& ex) : ex_(&ex) {}

  Exec& ex() const { return *ex_; }

  // The saved-state slot of `owner`, created empty on first use.
  template <class S>
  S& saved(const void* owner) {
    if (!recording_.empty()) recording_.back().insert(owner);
    std::any& slot = slots_[owner];
    if (!slot.has_value()) slot = S{};
    S* s = std::any_cast<S>(&slot);
    HYTRA_ASSERT(s != nullptr, "saved-state slot used with two different types");
    return *s;
  }
  // Drops every saved tensor (the start of a new micro-batch's forward).
  void clear() { slots_.clear(); }

  // Activation recompute (docs/ARCHITECTURE.md "The layer contract"): between begin_record() and end_record() every
  // slot used is noted, so a block's saved state can be dropped after its forward (drop) and rebuilt
  // by running the same forward again in backward, with `recomputing` set (layers then skip their
  // once-per-micro-batch bookkeeping, e.g. MoE token counts).
  void begin_record() { recording_.emplace_back(); }
  std::unordered_set<const void*> end_record() {
    std::unordered_set<const void*> owners = std::move(recording_.back());
    recording_.pop_back();
    if (!recording_.empty()) recording_.back().insert(owners.begin(), owners.end());
    return owners;
  }
  void drop(const std::unordered_set<const void*>& owners) {
    for (const void* o : owners) slots_.erase(o);
  }
  bool recomputing = false;

  // Set by the trainer per micro-batch: whether backward follows (training; auxiliary MoE losses
  // and expert-load counters only then) and the scale of auxiliary-loss gradients (the main loss's
  // 1/micro-batches, as Megatron's MoEAuxLossAutoScaler).
  bool grad_enabled = true;
  double aux_loss_scale = 1.0;
  // The gradient of the per-token LM losses (B,T) that backward will receive, when the trainer knows
  // it before the forward (it depends only on the labels): the LM head then computes its gradients in
  // the forward from the logits it has anyway. Undefined: the head recomputes them in backward.
  Tensor loss_grad;

  ParamHooks* param_hooks = nullptr;  // set by a data-parallel run (the trainer)
  void params_needed(size_t end) {
    if (param_hooks != nullptr) param_hooks->params_needed(end);
  }
  void grads_ready(size_t first, size_t end) {
    if (param_hooks != nullptr) param_hooks->grads_ready(first, end);
  }

  // The EP-overlap schedule (null: the plain one). A pass reaching a hand-over point pauses there (not while
  // recomputing: a rerun belongs to the slot that asked for it).
  HandoverHook* handover_hook = nullptr;
  void handover(Handover h) {
    if (handover_hook != nullptr && !recomputing) handover_hook->reached(h);
  }
  // A part of the pass that runs whole within one turn (e.g. the MTP depths, model/hybrid_model.cpp): hand-over
  // points inside it are passed over.
  class NoHandover {
   public:
    explicit NoHandover(StepContext& c) : c_(c), hook_(c.handover_hook) { c.handover_hook = nullptr; }
    ~NoHandover() { c_.handover_hook = hook_; }
    NoHandover(const NoHandover&) = delete;
    NoHandover& operator=(const NoHandover&) = delete;

   private:
    StepContext& c_;
    HandoverHook* hook_;
  };
  // Under the EP-overlap schedule, each layer's delayed weight gradients run in its own slot of the backward
  // (the routed experts' after their backward, every other layer's after its backward), not all at the end.
  bool wgrad_in_slots = false;

  // The diagnosis of a non-finite step (train/trainer.cpp): set, the model checks each sub-layer's forward output
  // and input gradient and names the first that is not finite here ("" while none is).
  bool check_finite = false;
  std::string first_non_finite;

  // One-token decoding (nn/decode_cache.h; null: a training or evaluation pass over whole sequences).
  DecodeCache* decode = nullptr;

  bool delay_wgrad = false;
  void push_wgrad(const void* owner, std::function<void()> task) { wgrad_.push_back({owner, std::move(task)}); }
  // Runs and removes the queued tasks of `owner`, in push order.
  void run_wgrad(const void* owner) {
    std::vector<Task> rest;
    for (Task& t : wgrad_) {
      if (t.owner == owner)
        t.run();
      else
        rest.push_back(std::move(t));
    }
    wgrad_ = std::move(rest);
  }
  // Runs and removes every queued task, in push order.
  void run_wgrad() {
    for (Task& t : wgrad_) t.run();
    wgrad_.clear();
  }
  size_t pending_wgrad() const { return wgrad_.size(); }

 private:
  Exec* ex_;
  std::unordered_map<const void*, std::any> slots_;
  std::vector<std::unordered_set<const void*>> recording_;
  struct Task {
    const void* owner;
    std::function<void()> run;
  };
  std::vector<Task> wgrad_;
};

}  // namespace hytra
