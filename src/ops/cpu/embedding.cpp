// CPU token embedding (ops.h "embedding"): y[n,:] = table[ids[n],:] and dtable[ids[n],:] += dy[n,:]; an id of -1
// (another rank's vocabulary shard) reads a zero row and adds nothing.
// The backward pass is deterministic: rows of dtable are bucketed by token (a stable counting sort
// keeps n order), one parallel_for task owns each touched row, accumulates its dy rows in n order
// in fp32 (fp64 if dtable or dy is fp64) starting from the current dtable row, and rounds once.
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"

namespace hytra::cpu {
namespace {

inline float widen(float x) { return x; }
inline float widen(bf16 x) { return bf16_to_float(x); }
inline double widen(double x) { return x; }
inline void narrow(float& d, float v) { d = v; }
inline void narrow(bf16& d, float v) { d = float_to_bf16(v); }
inline void narrow(float& d, double v) { d = float(v); }
inline void narrow(bf16& d, double v) { d = float_to_bf16(float(v)); }
inline void narrow(double& d, double v) { d = v; }

template <class F>
void visit_float(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::BF16: return f(bf16{});
    case DType::F64: return f(double{});
    default: HYTRA_ASSERT(false, "embedding: non-floating ", dtype_name(t));
  }
}

void check_ids(const char* op, const int32_t* ids, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n)
    HYTRA_CHECK(ids[n] >= -1 && ids[n] < V, op, ": token id ", ids[n], " at position ", n, " is out of range [0, V=", V,
                ")");
}

// dtable (V,C) += dy (N,C) scattered by ids (N), grouped as described in the file header.
template <class TT, class TY>
void scatter_add(TT* dtable, const TY* dy, const int32_t* ids, int64_t N, int64_t V, int64_t C) {
  using Acc = std::conditional_t<std::is_same_v<TT, double> || std::is_same_v<TY, double>, double, float>;
  std::vector<int64_t> start(size_t(V) + 1, 0), order(static_cast<size_t>(N)), rows;  // order: n grouped by id
  for (int64_t n = 0; n < N; ++n)
    if (ids[n] >= 0) ++start[size_t(ids[n]) + 1];
  for (int64_t v = 0; v < V; ++v) {
    if (start[size_t(v) + 1] > 0) rows.push_back(v);
    start[size_t(v) + 1] += start[size_t(v)];
  }
  std::vector<int64_t> next(start.begin(), start.end() - 1);
  for (int64_t n = 0; n < N; ++n)
    if (ids[n] >= 0) order[size_t(next[size_t(ids[n])]++)] = n;

  parallel_for(int64_t(rows.size()), 1, [&](int64_t r0, int64_t r1) {
    std::vector<Acc> acc(static_cast<size_t>(C));  // (C)
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t v = rows[size_t(r)];
      TT* drow = dtable + v * C;
      for (int64_t c = 0; c < C; ++c) acc[size_t(c)] = Acc(widen(drow[c]));
      for (int64_t s = start[size_t(v)]; s < start[size_t(v) + 1]; ++s) {
        const TY* g = dy + order[size_t(s)] * C;
        for (int64_t c = 0; c < C; ++c) acc[size_t(c)] += Acc(widen(g[c]));
      }
      for (int64_t c = 0; c < C; ++c) narrow(drow[c], acc[size_t(c)]);
    }
  });
}

}  // namespace

void embedding_fwd(Exec& ex, Tensor& y, const Tensor& ids, const Tensor& table) {
  const int64_t N = ids.numel(), V = table.size(0);
  const size_t row_bytes = size_t(table.size(1)) * dtype_size(table.dtype());
  const int32_t* id = ids.data<int32_t>();
  check_ids("embedding_fwd", id, N, V);
  const char* src = static_cast<const char*>(table.raw());
  char* dst = static_cast<char*>(y.raw());
  parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      if (id[n] < 0)
        std::memset(dst + size_t(n) * row_bytes, 0, row_bytes);
      else
        std::memcpy(dst + size_t(n) * row_bytes, src + size_t(id[n]) * row_bytes, row_bytes);
    }
  });
}

void embedding_bwd(Exec& ex, Tensor& dtable, const Tensor& dy, const Tensor& ids) {
  const int64_t N = ids.numel(), V = dtable.size(0), C = dtable.size(1);
  check_ids("embedding_bwd", ids.data<int32_t>(), N, V);
  visit_float(dtable.dtype(), [&](auto tt) {
    visit_float(dy.dtype(), [&](auto ty) {
      scatter_add(dtable.data<decltype(tt)>(), dy.data<decltype(ty)>(), ids.data<int32_t>(), N, V, C);
    });
  });
}

}  // namespace hytra::cpu
