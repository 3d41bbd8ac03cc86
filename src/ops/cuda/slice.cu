// slice_copy / slice_scatter on CUDA: the tensors are viewed as (outer, len, inner) around `dim`;
// one pitched 2-D copy (cudaMemcpy2DAsync) moves every outer row's contiguous block.
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

void move_blocks(const Exec& ex, void* dst, int64_t dst_row, int64_t dst_off, const void* src, int64_t src_row,
                 int64_t src_off, int64_t block, int64_t outer) {
  if (block == 0 || outer == 0) return;
  cuda_check(cudaMemcpy2DAsync(static_cast<char*>(dst) + dst_off, size_t(dst_row),
                               static_cast<const char*>(src) + src_off, size_t(src_row), size_t(block), size_t(outer),
                               cudaMemcpyDeviceToDevice, stream_of(ex)),
             "slice (cudaMemcpy2DAsync)");
}

void outer_inner(const Tensor& t, int64_t dim, int64_t& outer, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= t.size(d);
  for (int64_t d = dim + 1; d < t.dim(); ++d) inner *= t.size(d);
}

}  // namespace

void slice_copy(Exec& ex, Tensor& y, const Tensor& x, int64_t dim, int64_t start) {
  int64_t outer, inner;
  outer_inner(x, dim, outer, inner);
  const int64_t es = int64_t(dtype_size(x.dtype()));
  const int64_t xrow = x.size(dim) * inner * es, yrow = y.size(dim) * inner * es;
  move_blocks(ex, y.raw(), yrow, 0, x.raw(), xrow, start * inner * es, yrow, outer);
}

void slice_scatter(Exec& ex, Tensor& y, const Tensor& x, int64_t dim, int64_t start) {
  int64_t outer, inner;
  outer_inner(y, dim, outer, inner);
  const int64_t es = int64_t(dtype_size(y.dtype()));
  const int64_t yrow = y.size(dim) * inner * es, xrow = x.size(dim) * inner * es;
  move_blocks(ex, y.raw(), yrow, start * inner * es, x.raw(), xrow, 0, xrow, outer);
}

}  // namespace hytra::cuda
