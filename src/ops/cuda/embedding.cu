// Embedding lookup and its gradient (ops.h "embedding").
// Forward: y[n,:] = table[ids[n],:], one thread per output element, or per 8 with 16-byte vectors
// when C % 8 == 0 (an id of -1 gives a zero row, any other outside [0,V) NaN).
// Backward, deterministic without atomics: a stable CUB radix sort of (id, position) groups the
// rows of each id in position order; warp (k, channel tile) with k the first sorted slot of an id
// owns dtable[id, tile] (256 channels, 8 per lane) and adds that id's dy rows in position order in
// fp32 starting from the current dtable value, then stores once:
// dtable[v,c] += dy[n0,c]; += dy[n1,c]; ... exactly as the sequential loop does. Ids outside
// [0, V) are skipped. dy rows move as 16-byte vectors when C % 8 == 0 and dy is aligned.
#include <cub/device/device_radix_sort.cuh>
#include <initializer_list>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hytra::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void embedding_fwd_kernel(void* y, const int32_t* ids, const void* table, DType t, int64_t N,
                                     int64_t C, int64_t V) {
  const int64_t total = N * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    const int64_t id = ids[n];
    store_f(y, t, i, (id >= 0 && id < V) ? load_f(table, t, id * C + c) : id == -1 ? 0.0f : __int_as_float(0x7fc00000));
  }
}

// keys[i] = ids[i], or V for an id outside [0, V) (sorted last, skipped); pos[i] = i.
__global__ void sort_input_kernel(int32_t* keys, int32_t* pos, const int32_t* ids, int64_t n, int64_t V) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int32_t id = ids[i];
    keys[i] = id >= 0 && id < V ? id : int32_t(V);
    pos[i] = int32_t(i);
  }
}

template <class D>
__global__ void embedding_fwd_vec_kernel(D* y, const int32_t* ids, const D* table, int64_t N, int64_t C, int64_t V) {
  const int64_t c8 = C / 8, total = N * c8;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / c8, c = (i % c8) * 8;
    const int64_t id = ids[n];
    float v[8];
    if (id >= 0 && id < V) {
      load_n<8>(table + id * C + c, v);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = id == -1 ? 0.0f : __int_as_float(0x7fc00000);
    }
    store_n<8>(y + n * C + c, v);
  }
}

// grid (ceil(N / kWarps), channel tiles of 256); warp w of block b handles sorted slot
// k = b * kWarps + w when it starts a run of equal ids.
template <class D, bool VEC>
__global__ void __launch_bounds__(kThreads) embedding_bwd_sorted_kernel(void* dtable, DType dtt, const D* dy,
                                                                        const int32_t* keys, const int32_t* pos,
                                                                        int64_t N, int64_t C, int64_t V) {
  const int lane = threadIdx.x % 32;
  const int64_t k = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (k >= N) return;
  const int32_t id = keys[k];
  if ((k > 0 && keys[k - 1] == id) || id < 0 || id >= V) return;
  const int64_t c0 = int64_t(blockIdx.y) * 256 + lane * 8;
  if (c0 >= C) return;
  float acc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = c0 + e < C ? load_f(dtable, dtt, int64_t(id) * C + c0 + e) : 0.0f;
  for (int64_t j = k; j < N && keys[j] == id; ++j) {
    const D* row = dy + int64_t(pos[j]) * C + c0;
    float v[8];
    if constexpr (VEC) {
      load_n<8>(row, v);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = c0 + e < C ? float(row[e]) : 0.0f;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] += v[e];
  }
#pragma unroll
  for (int e = 0; e < 8; ++e)
    if (c0 + e < C) store_f(dtable, dtt, int64_t(id) * C + c0 + e, acc[e]);
}

}  // namespace

void embedding_fwd(Exec& ex, Tensor& y, const Tensor& ids, const Tensor& table) {
  HYTRA_CHECK(table.dtype() == DType::F32 || table.dtype() == DType::BF16, "embedding_fwd on CUDA: unsupported dtype ",
              table.desc());
  const int64_t N = ids.numel(), C = table.size(1), V = table.size(0);
  if (N * C == 0) return;
  if (C % 8 == 0 && aligned16(y.raw()) && aligned16(table.raw())) {
    const unsigned grid = grid_for(N * C / 8, kThreads);
    if (table.dtype() == DType::BF16)
      embedding_fwd_vec_kernel<<<grid, kThreads, 0, stream_of(ex)>>>(static_cast<__nv_bfloat16*>(y.raw()),
                                                                      ids.data<int32_t>(),
                                                                      static_cast<const __nv_bfloat16*>(table.raw()),
                                                                      N, C, V);
    else
      embedding_fwd_vec_kernel<<<grid, kThreads, 0, stream_of(ex)>>>(y.data<float>(), ids.data<int32_t>(),
                                                                      table.data<float>(), N, C, V);
    check_launch("embedding_fwd_vec_kernel");
    return;
  }
  embedding_fwd_kernel<<<grid_for(N * C, kThreads), kThreads, 0, stream_of(ex)>>>(
      y.raw(), ids.data<int32_t>(), table.raw(), table.dtype(), N, C, V);
  check_launch("embedding_fwd_kernel");
}

void embedding_bwd(Exec& ex, Tensor& dtable, const Tensor& dy, const Tensor& ids) {
  for (const Tensor* t : std::initializer_list<const Tensor*>{&dtable, &dy})
    HYTRA_CHECK(t->dtype() == DType::F32 || t->dtype() == DType::BF16, "embedding_bwd on CUDA: unsupported dtype ",
                t->desc());
  const int64_t N = ids.numel(), C = dtable.size(1), V = dtable.size(0);
  if (N == 0 || C == 0 || V == 0) return;
  HYTRA_CHECK(N < (int64_t(1) << 31) && V < (int64_t(1) << 31), "embedding_bwd on CUDA: too many ids or rows ",
              dtable.desc());
  cudaStream_t s = stream_of(ex);
  // Sort (id, position) pairs by id; radix sort is stable, so each id's positions stay in order.
  Tensor keys_in = Tensor::empty({N}, DType::I32, Device::CUDA);   // (N)
  Tensor pos_in = Tensor::empty({N}, DType::I32, Device::CUDA);    // (N)
  Tensor keys = Tensor::empty({N}, DType::I32, Device::CUDA);      // (N) sorted ids
  Tensor pos = Tensor::empty({N}, DType::I32, Device::CUDA);       // (N) their positions
  sort_input_kernel<<<grid_for(N, kThreads), kThreads, 0, s>>>(keys_in.data<int32_t>(), pos_in.data<int32_t>(),
                                                               ids.data<int32_t>(), N, V);
  check_launch("sort_input_kernel");
  int end_bit = 1;  // keys lie in [0, V]
  while (end_bit < 31 && (int64_t(1) << end_bit) <= V) ++end_bit;
  size_t temp_bytes = 0;
  HYTRA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in.data<int32_t>(), keys.data<int32_t>(),
                                                   pos_in.data<int32_t>(), pos.data<int32_t>(), int(N), 0, end_bit, s));
  Tensor temp = Tensor::empty({int64_t(temp_bytes / 4 + 1)}, DType::I32, Device::CUDA);  // CUB scratch
  HYTRA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw(), temp_bytes, keys_in.data<int32_t>(), keys.data<int32_t>(),
                                                   pos_in.data<int32_t>(), pos.data<int32_t>(), int(N), 0, end_bit, s));
  const int64_t tiles = (C + 255) / 256;
  HYTRA_CHECK(tiles <= 65535, "embedding_bwd on CUDA: table too wide ", dtable.desc());
  const dim3 grid{unsigned((N + kWarps - 1) / kWarps), unsigned(tiles)};
  const bool vec = C % 8 == 0 && aligned16(dy.raw());
  auto launch = [&](auto d) {
    using D = decltype(d);
    const D* dyp = static_cast<const D*>(dy.raw());
    if (vec)
      embedding_bwd_sorted_kernel<D, true><<<grid, kThreads, 0, s>>>(dtable.raw(), dtable.dtype(), dyp,
                                                                     keys.data<int32_t>(), pos.data<int32_t>(), N, C, V);
    else
      embedding_bwd_sorted_kernel<D, false><<<grid, kThreads, 0, s>>>(dtable.raw(), dtable.dtype(), dyp,
                                                                      keys.data<int32_t>(), pos.data<int32_t>(), N, C, V);
  };
  if (dy.dtype() == DType::BF16)
    launch(__nv_bfloat16{});
  else
    launch(float{});
  check_launch("embedding_bwd_sorted_kernel");
}

}  // namespace hytra::cuda
