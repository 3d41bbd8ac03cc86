// slice_copy / slice_scatter on CUDA: the tensors are viewed as (outer, len, inner) around `dim`;
// one kernel moves every outer row's contiguous block, in the widest word (16, 4 or 1 bytes) that
// divides the rows, offsets and block. (cudaMemcpy2DAsync does the same job far below bandwidth when
// the blocks are narrow, e.g. attention's q/k/v heads of a grouped projection.)
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;

// Row r's block: `words` words of W from src + r * src_row to dst + r * dst_row (both in bytes).
template <class W>
__global__ void move_blocks_kernel(char* dst, int64_t dst_row, const char* src, int64_t src_row, int64_t words,
                                   int64_t outer) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < outer * words;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / words, w = e % words;
    reinterpret_cast<W*>(dst + r * dst_row)[w] = reinterpret_cast<const W*>(src + r * src_row)[w];
  }
}

template <class W>
void launch_moves(const Exec& ex, char* dst, int64_t dst_row, const char* src, int64_t src_row, int64_t block,
                  int64_t outer) {
  const int64_t words = block / int64_t(sizeof(W));
  move_blocks_kernel<W><<<grid_for(outer * words, kThreads), kThreads, 0, stream_of(ex)>>>(dst, dst_row, src, src_row,
                                                                                           words, outer);
  check_launch("move_blocks_kernel");
}

void move_blocks(const Exec& ex, void* dst, int64_t dst_row, int64_t dst_off, const void* src, int64_t src_row,
                 int64_t src_off, int64_t block, int64_t outer) {
  if (block == 0 || outer == 0) return;
  char* d = static_cast<char*>(dst) + dst_off;
  const char* s = static_cast<const char*>(src) + src_off;
  const auto divides = [&](int64_t w) {
    return (reinterpret_cast<uintptr_t>(d) | reinterpret_cast<uintptr_t>(s)) % uintptr_t(w) == 0 &&
           (dst_row | src_row | block) % w == 0;
  };
  if (divides(16))
    launch_moves<uint4>(ex, d, dst_row, s, src_row, block, outer);
  else if (divides(4))
    launch_moves<uint32_t>(ex, d, dst_row, s, src_row, block, outer);
  else
    launch_moves<unsigned char>(ex, d, dst_row, s, src_row, block, outer);
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
