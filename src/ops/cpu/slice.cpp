// slice_copy / slice_scatter on the CPU: the tensors are viewed as (outer, len, inner) around `dim`,
// and each outer row moves one contiguous block of len*inner elements.
#include <cstring>

#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"

namespace hytra::cpu {
namespace {

// dst[o, dst_off + i] = src[o, src_off + i] for i < block, rows of dst_row / src_row bytes.
void move_blocks(char* dst, int64_t dst_row, int64_t dst_off, const char* src, int64_t src_row, int64_t src_off,
                 int64_t block, int64_t outer) {
  parallel_for(outer, 64, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) std::memcpy(dst + o * dst_row + dst_off, src + o * src_row + src_off, size_t(block));
  });
}

struct SliceGeometry {
  int64_t outer = 1, inner = 1;
};

SliceGeometry geometry(const Tensor& t, int64_t dim) {
  SliceGeometry g;
  for (int64_t d = 0; d < dim; ++d) g.outer *= t.size(d);
  for (int64_t d = dim + 1; d < t.dim(); ++d) g.inner *= t.size(d);
  return g;
}

}  // namespace

void slice_copy(Exec&, Tensor& y, const Tensor& x, int64_t dim, int64_t start) {
  SliceGeometry g = geometry(x, dim);
  const int64_t es = int64_t(dtype_size(x.dtype()));
  const int64_t xrow = x.size(dim) * g.inner * es, yrow = y.size(dim) * g.inner * es;
  move_blocks(static_cast<char*>(y.raw()), yrow, 0, static_cast<const char*>(x.raw()), xrow, start * g.inner * es,
              yrow, g.outer);
}

void slice_scatter(Exec&, Tensor& y, const Tensor& x, int64_t dim, int64_t start) {
  SliceGeometry g = geometry(y, dim);
  const int64_t es = int64_t(dtype_size(y.dtype()));
  const int64_t yrow = y.size(dim) * g.inner * es, xrow = x.size(dim) * g.inner * es;
  move_blocks(static_cast<char*>(y.raw()), yrow, start * g.inner * es, static_cast<const char*>(x.raw()), xrow, 0,
              xrow, g.outer);
}

}  // namespace hytra::cpu
