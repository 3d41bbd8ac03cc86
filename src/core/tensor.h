// Tensor: a reference-counted storage plus dtype, device, shape and strides (outermost first,
// in elements). Most ops require contiguous tensors; `view`, `narrow` on dim 0 and `select` keep
// contiguity so activations can be carved out of larger buffers without copies.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"

namespace hytra {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);
// The element count of a shape about to be allocated, or -1 when a size is negative or the count
// times elem_bytes does not fit in int64 (sizes from flags or files can be anything).
int64_t checked_numel(const Shape& s, int64_t elem_bytes = 1);

// Owned (or borrowed) raw memory on one device.
struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  Device device = Device::CPU;
  Allocator* alloc = nullptr;  // null when borrowed: not freed
  ~Storage();
};

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::CPU);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::CPU);
  // Wraps memory the caller keeps alive; nothing is freed.
  static Tensor borrow(void* ptr, const Shape& shape, DType dtype, Device device = Device::CPU);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::CPU; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return int64_t(shape_.size()); }
  // Negative d counts from the end, as in PyTorch.
  int64_t size(int64_t d) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  // Row-pitched: the last dim contiguous and the other dims one evenly spaced sequence of rows (a
  // contiguous tensor, or a narrow of its last dim). The elements from one row's start to the next;
  // -1 when the layout is not row-pitched.
  int64_t row_pitch() const;

  void* raw() const;  // pointer to the first element
  template <class T>
  T* data() const {
    return static_cast<T*>(raw());
  }

  // Same storage, new shape (contiguous only; one dim may be -1).
  Tensor view(const Shape& shape) const;
  // Elements [start, start+len) along dim d (shares storage).
  Tensor narrow(int64_t d, int64_t start, int64_t len) const;
  // Index i along dim 0, that dim removed.
  Tensor select(int64_t i) const;

  // Deep copies.
  Tensor clone() const;
  Tensor to(Device device) const;
  // Host copy converted to fp64 / fp32 values (any floating or int dtype).
  std::vector<double> to_f64_vector() const;
  std::vector<float> to_f32_vector() const;
  // Fill a CPU tensor from values (converted to its dtype).
  void copy_from(const std::vector<float>& values) const;
  void copy_from_f64(const std::vector<double>& values) const;

  std::string desc() const;  // "fp32[2, 3] cpu"

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::F32;
};

Shape contiguous_strides(const Shape& shape);

// Host<->device and device<->device copies of nbytes (defined in core/cuda_runtime_cuda.cu or
// the CPU-only stub); used by Tensor::to and tests.
void memcpy_any(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes);
void memset_any(void* dst, Device dev, int value, size_t nbytes);
// Host -> device copy queued on a CUDA stream (ordered after the work already queued there). The
// host buffer is staged before the call returns (pageable memory), so it may be reused at once.
void memcpy_to_device_async(void* dst, const void* src, size_t nbytes, void* stream);
// Device -> host in `stream`'s order, returning at once; `dst` must be pinned (cuda_host_alloc) for that.
void memcpy_to_host_async(void* dst, const void* src, size_t nbytes, void* stream);

}  // namespace hytra
