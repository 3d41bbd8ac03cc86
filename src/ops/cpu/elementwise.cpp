// CPU elementwise ops (ops.h "elementwise"): fill, copy, add, axpy, scale.
// Any dtype pair converts (fp32, bf16, fp64, int32, int64): bf16 goes through fp32 with
// round-to-nearest-even; floating -> integer truncates toward zero (values must fit).
// add/axpy/scale compute in fp64 when any operand is fp64, else in fp32 (bf16 operands widened,
// the result rounded once). Tensors are processed in fixed blocks of kBlock elements, converted to
// the compute type in scratch buffers; each block belongs to one parallel_for task.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "ops/cpu/cpu_ops.h"

namespace hytra::cpu {
namespace {

constexpr int64_t kBlock = 2048;
constexpr int64_t kGrainBlocks = 16;  // blocks per task at least: small tensors stay on one thread

// Calls f(T{}) with T the storage type of dtype t.
template <class F>
void visit(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::BF16: return f(bf16{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    case DType::F64: return f(double{});
  }
}

template <class S>
auto widen(S x) {
  if constexpr (std::is_same_v<S, bf16>)
    return bf16_to_float(x);
  else
    return x;
}

template <class D, class S>
D convert(S x) {
  if constexpr (std::is_same_v<D, bf16>)
    return float_to_bf16(float(widen(x)));
  else
    return static_cast<D>(widen(x));
}

// dst[0:n] (dtype dt) <- src[0:n] (dtype st), converted.
void convert_n(void* dst, DType dt, const void* src, DType st, int64_t n) {
  visit(dt, [&](auto d) {
    visit(st, [&](auto s) {
      using D = decltype(d);
      using S = decltype(s);
      D* out = static_cast<D*>(dst);
      const S* in = static_cast<const S*>(src);
      for (int64_t i = 0; i < n; ++i) out[i] = convert<D>(in[i]);
    });
  });
}

char* elem(const Tensor& t, int64_t i) { return static_cast<char*>(t.raw()) + i * int64_t(dtype_size(t.dtype())); }

template <class Fn>
void for_blocks(int64_t n, Fn&& fn) {  // fn(i0, len) for each block of [0, n)
  parallel_for((n + kBlock - 1) / kBlock, kGrainBlocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) fn(b * kBlock, std::min(kBlock, n - b * kBlock));
  });
}

// fn(i0, len, u, w) per block with two kBlock scratch buffers of the compute type Tc.
template <class Tc, class Fn>
void for_blocks_scratch(int64_t n, Fn&& fn) {
  parallel_for((n + kBlock - 1) / kBlock, kGrainBlocks, [&](int64_t b0, int64_t b1) {
    std::vector<Tc> u(kBlock), w(kBlock);
    for (int64_t b = b0; b < b1; ++b) fn(b * kBlock, std::min(kBlock, n - b * kBlock), u.data(), w.data());
  });
}

bool any_f64(std::initializer_list<const Tensor*> ts) {
  return std::any_of(ts.begin(), ts.end(), [](const Tensor* t) { return t->dtype() == DType::F64; });
}

template <class Tc>
void add_impl(Tensor& y, const Tensor& a, const Tensor& b) {
  constexpr DType dc = std::is_same_v<Tc, double> ? DType::F64 : DType::F32;
  for_blocks_scratch<Tc>(y.numel(), [&](int64_t i0, int64_t n, Tc* u, Tc* w) {
    convert_n(u, dc, elem(a, i0), a.dtype(), n);
    convert_n(w, dc, elem(b, i0), b.dtype(), n);
    for (int64_t i = 0; i < n; ++i) u[i] += w[i];
    convert_n(elem(y, i0), y.dtype(), u, dc, n);
  });
}

template <class Tc>
void axpy_impl(Tensor& y, const Tensor& x, double alpha) {
  constexpr DType dc = std::is_same_v<Tc, double> ? DType::F64 : DType::F32;
  const Tc s = Tc(alpha);
  for_blocks_scratch<Tc>(y.numel(), [&](int64_t i0, int64_t n, Tc* u, Tc* w) {
    convert_n(u, dc, elem(y, i0), y.dtype(), n);
    convert_n(w, dc, elem(x, i0), x.dtype(), n);
    for (int64_t i = 0; i < n; ++i) u[i] += s * w[i];
    convert_n(elem(y, i0), y.dtype(), u, dc, n);
  });
}

template <class Tc>
void scale_impl(Tensor& y, double alpha) {
  constexpr DType dc = std::is_same_v<Tc, double> ? DType::F64 : DType::F32;
  const Tc s = Tc(alpha);
  for_blocks_scratch<Tc>(y.numel(), [&](int64_t i0, int64_t n, Tc* u, Tc*) {
    convert_n(u, dc, elem(y, i0), y.dtype(), n);
    for (int64_t i = 0; i < n; ++i) u[i] *= s;
    convert_n(elem(y, i0), y.dtype(), u, dc, n);
  });
}

}  // namespace

void fill(Exec& ex, Tensor& y, double value) {
  visit(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = convert<T>(value);
    T* out = y.data<T>();
    for_blocks(y.numel(), [&](int64_t i0, int64_t n) { std::fill(out + i0, out + i0 + n, v); });
  });
}

void copy(Exec& ex, Tensor& y, const Tensor& x) {
  const size_t esize = dtype_size(y.dtype());
  for_blocks(y.numel(), [&](int64_t i0, int64_t n) {
    if (y.dtype() == x.dtype())
      std::memcpy(elem(y, i0), elem(x, i0), size_t(n) * esize);
    else
      convert_n(elem(y, i0), y.dtype(), elem(x, i0), x.dtype(), n);
  });
}

void add(Exec& ex, Tensor& y, const Tensor& a, const Tensor& b) {
  if (any_f64({&y, &a, &b}))
    add_impl<double>(y, a, b);
  else
    add_impl<float>(y, a, b);
}

void axpy(Exec& ex, Tensor& y, const Tensor& x, double alpha) {
  if (any_f64({&y, &x}))
    axpy_impl<double>(y, x, alpha);
  else
    axpy_impl<float>(y, x, alpha);
}

void scale(Exec& ex, Tensor& y, double alpha) {
  if (y.dtype() == DType::F64)
    scale_impl<double>(y, alpha);
  else
    scale_impl<float>(y, alpha);
}

}  // namespace hytra::cpu
