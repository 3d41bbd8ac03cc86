#include "data/mt19937.h"

namespace hytra {

uint64_t RandomState::next_u64() {
  const uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

uint64_t RandomState::interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int s = 1; s <= 32; s *= 2) mask |= mask >> s;
  uint64_t v;
  if (max <= 0xffffffffull) {
    do v = next_u32() & mask;
    while (v > max);
  } else {
    do v = next_u64() & mask;
    while (v > max);
  }
  return v;
}

}  // namespace hytra
