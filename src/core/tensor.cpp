#include "core/tensor.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/error.h"

namespace hytra {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

int64_t checked_numel(const Shape& s, int64_t elem_bytes) {
  int64_t n = elem_bytes;
  for (int64_t d : s)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n / elem_bytes;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = acc;
    acc *= shape[i];
  }
  return st;
}

Storage::~Storage() {
  if (alloc && ptr) alloc->deallocate(ptr, bytes);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) HYTRA_CHECK(d >= 0, "tensor shape ", shape_str(shape), " has a negative size");
  HYTRA_CHECK(checked_numel(shape, int64_t(dtype_size(dtype))) >= 0, "tensor shape ", shape_str(shape), " of ",
              dtype_name(dtype), " holds more bytes than a 64-bit size can count");
  Tensor t;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  t.storage_->device = device;
  t.storage_->alloc = &allocator_for(device);
  t.storage_->ptr = t.storage_->alloc->allocate(t.storage_->bytes);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  memset_any(t.raw(), device, 0, t.nbytes());
  return t;
}

Tensor Tensor::borrow(void* ptr, const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->ptr = ptr;
  t.storage_->bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  t.storage_->device = device;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  if (d < 0) d += n;
  HYTRA_ASSERT(d >= 0 && d < n, "dim ", d, " of ", desc());
  return shape_[size_t(d)];
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

int64_t Tensor::row_pitch() const {
  const int64_t n = dim();
  if (n == 0) return 1;
  const int64_t width = shape_[size_t(n - 1)];
  if (width > 1 && strides_[size_t(n - 1)] != 1) return -1;
  if (numel() / std::max<int64_t>(width, 1) <= 1) return width;  // at most one row
  int64_t pitch = -1, expect = 0;                                // size-1 dims carry no stride information
  for (int64_t d = n - 2; d >= 0; --d) {
    if (shape_[size_t(d)] == 1) continue;
    if (pitch < 0) pitch = expect = strides_[size_t(d)];
    if (strides_[size_t(d)] != expect) return -1;
    expect *= shape_[size_t(d)];
  }
  return pitch >= width ? pitch : -1;
}

void* Tensor::raw() const {
  HYTRA_ASSERT(storage_ != nullptr, "use of an undefined tensor");
  return static_cast<char*>(storage_->ptr) + offset_ * int64_t(dtype_size(dtype_));
}

Tensor Tensor::view(const Shape& shape) const {
  HYTRA_ASSERT(is_contiguous(), "view of a non-contiguous tensor ", desc());
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      HYTRA_ASSERT(infer < 0, "two -1 dims in view ", shape_str(shape));
      infer = int64_t(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) s[size_t(infer)] = known == 0 ? 0 : numel() / known;
  HYTRA_ASSERT(shape_numel(s) == numel(), "view ", shape_str(shape), " of ", desc());
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t len) const {
  if (d < 0) d += dim();
  HYTRA_ASSERT(d >= 0 && d < dim() && start >= 0 && len >= 0 && start + len <= shape_[size_t(d)], "narrow(", d, ", ",
               start, ", ", len, ") of ", desc());
  Tensor t = *this;
  t.offset_ += start * strides_[size_t(d)];
  t.shape_[size_t(d)] = len;
  return t;
}

Tensor Tensor::select(int64_t i) const {
  HYTRA_ASSERT(dim() >= 1 && i >= 0 && i < shape_[0], "select(", i, ") of ", desc());
  Tensor t = *this;
  t.offset_ += i * strides_[0];
  t.shape_.erase(t.shape_.begin());
  t.strides_.erase(t.strides_.begin());
  return t;
}

Tensor Tensor::clone() const { return to(device()); }

Tensor Tensor::to(Device device) const {
  HYTRA_ASSERT(is_contiguous(), "copy of a non-contiguous tensor ", desc());
  Tensor t = empty(shape_, dtype_, device);
  memcpy_any(t.raw(), device, raw(), this->device(), nbytes());
  return t;
}

namespace {
template <class Out>
std::vector<Out> host_values(const Tensor& src) {
  Tensor h = src.device() == Device::CPU ? src : src.to(Device::CPU);
  HYTRA_ASSERT(h.is_contiguous(), "host read of a non-contiguous tensor ", src.desc());
  std::vector<Out> out(size_t(h.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (h.dtype()) {
      case DType::F32: out[i] = Out(h.data<float>()[i]); break;
      case DType::F64: out[i] = Out(h.data<double>()[i]); break;
      case DType::BF16: out[i] = Out(bf16_to_float(h.data<bf16>()[i])); break;
      case DType::I32: out[i] = Out(h.data<int32_t>()[i]); break;
      case DType::I64: out[i] = Out(h.data<int64_t>()[i]); break;
    }
  }
  return out;
}

template <class In>
void host_fill(const Tensor& dst, const std::vector<In>& values) {
  HYTRA_ASSERT(int64_t(values.size()) == dst.numel() && dst.is_contiguous(), "copy_from size ", values.size(), " into ",
               dst.desc());
  Tensor h = dst.device() == Device::CPU ? dst : Tensor::empty(dst.shape(), dst.dtype());
  for (size_t i = 0; i < values.size(); ++i) {
    switch (h.dtype()) {
      case DType::F32: h.data<float>()[i] = float(values[i]); break;
      case DType::F64: h.data<double>()[i] = double(values[i]); break;
      case DType::BF16: h.data<bf16>()[i] = float_to_bf16(float(values[i])); break;
      case DType::I32: h.data<int32_t>()[i] = int32_t(values[i]); break;
      case DType::I64: h.data<int64_t>()[i] = int64_t(values[i]); break;
    }
  }
  if (dst.device() != Device::CPU) memcpy_any(dst.raw(), dst.device(), h.raw(), Device::CPU, h.nbytes());
}
}  // namespace

std::vector<double> Tensor::to_f64_vector() const { return host_values<double>(*this); }
std::vector<float> Tensor::to_f32_vector() const { return host_values<float>(*this); }
void Tensor::copy_from(const std::vector<float>& values) const { host_fill(*this, values); }
void Tensor::copy_from_f64(const std::vector<double>& values) const { host_fill(*this, values); }

std::string Tensor::desc() const { return str(dtype_name(dtype_), shape_str(shape_), " ", device_name(device())); }

}  // namespace hytra
