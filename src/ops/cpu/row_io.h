// Element I/O shared by the CPU reference ops: any floating tensor (fp32, fp64, bf16) is read into
// and written from buffers of the op's compute type T (double for fp64 data, float otherwise), so
// each op is written once over T. Offsets count elements from the tensor's first element (row r of a
// row-pitched tensor starts at r * row_pitch()); bf16 stores round to nearest even.
#pragma once
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace hytra::cpu {

template <class T>
void load(const Tensor& t, int64_t off, int64_t n, T* dst) {
  switch (t.dtype()) {
    case DType::F32: {
      const float* p = t.data<float>() + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = T(p[i]);
      return;
    }
    case DType::F64: {
      const double* p = t.data<double>() + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = T(p[i]);
      return;
    }
    case DType::BF16: {
      const bf16* p = t.data<bf16>() + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = T(bf16_to_float(p[i]));
      return;
    }
    default: HYTRA_ASSERT(false, "load from ", t.desc());
  }
}

template <class T>
void store(const Tensor& t, int64_t off, int64_t n, const T* src) {
  switch (t.dtype()) {
    case DType::F32: {
      float* p = t.data<float>() + off;
      for (int64_t i = 0; i < n; ++i) p[i] = float(src[i]);
      return;
    }
    case DType::F64: {
      double* p = t.data<double>() + off;
      for (int64_t i = 0; i < n; ++i) p[i] = double(src[i]);
      return;
    }
    case DType::BF16: {
      bf16* p = t.data<bf16>() + off;
      for (int64_t i = 0; i < n; ++i) p[i] = float_to_bf16(float(src[i]));
      return;
    }
    default: HYTRA_ASSERT(false, "store to ", t.desc());
  }
}

// Elements [off, off+n) of t as T: a pointer into t when its dtype is T, else converted into scratch.
template <class T>
const T* load_view(const Tensor& t, int64_t off, int64_t n, std::vector<T>& scratch) {
  if constexpr (std::is_same_v<T, float>) {
    if (t.dtype() == DType::F32) return t.data<float>() + off;
  } else {
    if (t.dtype() == DType::F64) return t.data<double>() + off;
  }
  scratch.resize(size_t(n));
  load(t, off, n, scratch.data());
  return scratch.data();
}

// Calls f(T{}) with the compute type for data of dtype d: double for fp64, float otherwise.
template <class F>
void with_compute_type(DType d, F&& f) {
  if (d == DType::F64)
    f(double{});
  else
    f(float{});
}

}  // namespace hytra::cpu
