// StepContext: the state of one micro-batch in flight — the executor, each layer's saved tensors
// (a slot per layer, keyed by the layer's address, holding that layer's `Saved` struct), and the
// queue of delayed weight-gradient tasks (--delay-wgrad-compute: Linear::backward pushes its dW
// GEMM here and backward_dw() / run_wgrad() drains it in order).
#pragma once
#include <any>
#include <functional>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "ops/exec.h"

namespace hytra {

class StepContext {
 public:
  explicit StepContext(Exec& ex) : ex_(&ex) {}

  Exec& ex() const { return *ex_; }

  // The saved-state slot of `owner`, created empty on first use.
  template <class S>
  S& saved(const void* owner) {
    std::any& slot = slots_[owner];
    if (!slot.has_value()) slot = S{};
    S* s = std::any_cast<S>(&slot);
    HYTRA_ASSERT(s != nullptr, "saved-state slot used with two different types");
    return *s;
  }
  // Drops every saved tensor (the start of a new micro-batch's forward).
  void clear() { slots_.clear(); }

  bool delay_wgrad = false;
  void push_wgrad(std::function<void()> task) { wgrad_.push_back(std::move(task)); }
  void run_wgrad() {
    for (auto& t : wgrad_) t();
    wgrad_.clear();
  }
  size_t pending_wgrad() const { return wgrad_.size(); }

 private:
  Exec* ex_;
  std::unordered_map<const void*, std::any> slots_;
  std::vector<std::function<void()>> wgrad_;
};

}  // namespace hytra
