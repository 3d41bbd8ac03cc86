// Rotary position embedding on (B, T, H, D), CPU reference (ops.h "rotary position embedding";
// docs/spec/README.md decision 7). Frequencies follow Megatron in fp32: inv_freq[i] = 1 / base^(2i/R) and
// angle = float(t) * inv_freq[i]; cos/sin of that angle are then taken in the compute type.
// Pair i of the R = rotary_dim rotated channels is (i, i + R/2) (rotate-half) or (2i, 2i+1)
// (interleaved); with (a, b) a pair:
//   forward   a' = a*cos - b*sin,  b' = b*cos + a*sin
//   backward  the inverse rotation (sin negated).
// Channels >= R pass through. Each (b, t, h) row is read whole before it is written, so out may alias in.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/rope_math.h"
#include "ops/cpu/row_io.h"

namespace hytra::cpu {
namespace {

// Rows (b, t, h) of `in` rotated pair by pair: pair i at position t by the angle float(t) * inv_freq[i] (fp32), cos
// and sin in the compute type; sin_sign -1 is the inverse rotation.
template <class T>
void rope_impl(Tensor& out, const Tensor& in, const std::vector<float>& inv_freq, bool interleaved, T sin_sign) {
  const int64_t B = in.size(0), T_len = in.size(1), H = in.size(2), D = in.size(3);
  const int64_t half = int64_t(inv_freq.size()), R = 2 * half;
  std::vector<T> cos_t(T_len * half), sin_t(T_len * half);  // (T, R/2) each
  for (int64_t t = 0; t < T_len; ++t)
    rope_angles(t, inv_freq, T(1), sin_sign, cos_t.data() + t * half, sin_t.data() + t * half);
  const int64_t rows = B * T_len * H;
  parallel_for(rows, std::max<int64_t>(1, 8192 / D), [&](int64_t r0, int64_t r1) {
    std::vector<T> row(D);  // (D)
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = (r / H) % T_len;
      load(in, r * D, D, row.data());
      rope_rotate(row.data(), R, cos_t.data() + t * half, sin_t.data() + t * half, interleaved);
      store(out, r * D, D, row.data());
    }
  });
}

}  // namespace

void rope_fwd(Exec&, Tensor& y, const Tensor& x, int64_t rotary_dim, double base, bool interleaved) {
  with_compute_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    rope_impl<T>(y, x, rope_frequencies(rotary_dim, base), interleaved, T(1));
  });
}

void rope_bwd(Exec&, Tensor& dx, const Tensor& dy, int64_t rotary_dim, double base, bool interleaved) {
  with_compute_type(dy.dtype(), [&](auto t) {
    using T = decltype(t);
    rope_impl<T>(dx, dy, rope_frequencies(rotary_dim, base), interleaved, T(-1));
  });
}

}  // namespace hytra::cpu
