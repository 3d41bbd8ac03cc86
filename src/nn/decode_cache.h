// DecodeCache: what one-token decoding (hytra generate) keeps between tokens. With StepContext::decode set, the
// model's forward takes one token per sequence, ids (B,1) at position(), and each layer with state across
// positions reads and updates its entry here instead of saving tensors for a backward: self-attention its
// rotated keys and values (capacity() positions), the Mamba-2 mixer and the gated delta net their conv inputs and
// recurrent state (constant size). Entries are keyed by the layer's address and created on first use.
#pragma once
#include <any>
#include <cstdint>
#include <unordered_map>

#include "core/error.h"

namespace hytra {

class DecodeCache {
 public:
  explicit DecodeCache(int64_t capacity) : capacity_(capacity) {}

  int64_t capacity() const { return capacity_; }  // the most positions a sequence may reach
  int64_t position() const { return position_; }  // the next token's position
  void advance() { ++position_; }

  template <class S>
  S& state(const void* owner) {
    std::any& slot = slots_[owner];
    if (!slot.has_value()) slot = S{};
    S* s = std::any_cast<S>(&slot);
    HYTRA_ASSERT(s != nullptr, "decode cache slot used with two different types");
    return *s;
  }

 private:
  int64_t capacity_;
  int64_t position_ = 0;
  std::unordered_map<const void*, std::any> slots_;
};

}  // namespace hytra
