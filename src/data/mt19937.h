// numpy's legacy RandomState(seed) for an integer seed, reduced to what Megatron's GPTDataset uses
// (docs/spec/gpt_dataset.md §9). The generator is MT19937 seeded by init_genrand, exactly
// std::mt19937(seed); the rest is numpy's own and written here, because std::uniform_int_distribution
// and std::shuffle use unspecified algorithms: RandomState.shuffle of a 1-D array goes
// for i = n-1 down to 1, j uniform in [0, i] by masked rejection (mask = smallest 2^k-1 >= i; 64-bit
// draws, high word first, when i > 2^32-1), then swaps a[i], a[j].
#pragma once
#include <cstdint>
#include <random>
#include <utility>

namespace hytra {

class RandomState {
 public:
  explicit RandomState(uint32_t seed) : gen_(seed) {}
  uint32_t next_u32() { return uint32_t(gen_()); }
  uint64_t next_u64();  // (high word, then low word), as numpy's 64-bit bounded draws
  // Uniform integer in [0, max] (numpy's random_interval).
  uint64_t interval(uint64_t max);

  template <class T>
  void shuffle(T* a, int64_t n) {
    for (int64_t i = n - 1; i >= 1; --i) std::swap(a[i], a[interval(uint64_t(i))]);
  }

 private:
  std::mt19937 gen_;
};

}  // namespace hytra
