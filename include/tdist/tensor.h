#pragma once

/// @file tensor.h
/// Tensor: a contiguous, typed buffer with a shape, the unit of data that
/// collectives send, receive and reduce.
///
/// A Tensor either wraps memory it does not own (zero copy: the caller keeps
/// the memory alive for as long as the tensor and its views are used) or owns
/// memory it allocated. Storage is shared like torch's: copying a Tensor
/// object, view(), narrow(), reshape() and flatten() alias the same bytes;
/// clone() copies them. A tensor with no elements may have a null data().
///
///     std::vector<float> grads(1024);
///     Tensor t = Tensor::wrap(grads);           // float32[1024], no copy
///     Tensor half = t.view(512, 512);           // the second half, no copy
///     Tensor m = Tensor::zeros(DType::kInt64, {4, 3});

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tdist/dtype.h"
#include "tdist/shape.h"

namespace tdist {

namespace detail {
/// Raises DistInvalidArgument: `function` was asked for elements of type
/// `requested` from a tensor of dtype `actual`.
[[noreturn]] void throw_dtype_mismatch(const char* function, DType requested, DType actual);
/// Raises DistInvalidArgument unless `numel` equals the element count of
/// `shape` (which must have no negative dimension).
void check_wrap_size(size_t numel, const Shape& shape);
}  // namespace detail

/// A contiguous, typed, shaped buffer; see the file comment.
class Tensor {
 public:
  /// A one-dimensional float32 tensor with no elements and no memory.
  Tensor();

  /// Wraps `data` without copying or taking ownership. `data` must be aligned
  /// for the element type, and may be null only if the shape has no elements.
  /// Raises DistInvalidArgument for a negative dimension, a null or misaligned
  /// pointer, or a size that overflows.
  static Tensor wrap(void* data, DType dtype, Shape shape);
  /// Wraps `data` as wrap() does, keeping `owner` (whatever owns the
  /// memory) alive as long as this tensor or a copy of it lives.
  static Tensor wrap(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner);

  /// Wraps a span as a one-dimensional tensor, without copying.
  template <ElementType T>
  static Tensor wrap(std::span<T> data) {
    return wrap(static_cast<void*>(data.data()), dtype_of<T>(), {static_cast<int64_t>(data.size())});
  }

  /// Wraps a span with the given shape, which must hold data.size() elements.
  template <ElementType T>
  static Tensor wrap(std::span<T> data, Shape shape) {
    detail::check_wrap_size(data.size(), shape);
    return wrap(static_cast<void*>(data.data()), dtype_of<T>(), std::move(shape));
  }

  /// Wraps a vector's elements as a one-dimensional tensor, without copying;
  /// the tensor is invalidated when the vector reallocates or dies.
  template <ElementType T>
  static Tensor wrap(std::vector<T>& data) {
    static_assert(!std::is_same_v<T, bool>, "std::vector<bool> is not contiguous");
    return wrap(std::span<T>(data));
  }

  /// Wraps a vector's elements with the given shape, without copying.
  template <ElementType T>
  static Tensor wrap(std::vector<T>& data, Shape shape) {
    static_assert(!std::is_same_v<T, bool>, "std::vector<bool> is not contiguous");
    return wrap(std::span<T>(data), std::move(shape));
  }

  /// A tensor owning new, uninitialised memory (64-byte aligned).
  static Tensor empty(DType dtype, Shape shape);

  /// A tensor owning new memory filled with zeros.
  static Tensor zeros(DType dtype, Shape shape);

  /// A one-dimensional tensor owning a copy of `values`.
  template <ElementType T>
  static Tensor from_vector(const std::vector<T>& values) {
    return from_vector(values, {static_cast<int64_t>(values.size())});
  }

  /// A tensor of the given shape owning a copy of `values`, which must hold
  /// exactly as many elements as the shape.
  template <ElementType T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
    detail::check_wrap_size(values.size(), shape);
    Tensor tensor = empty(dtype_of<T>(), shape);
    T* out = static_cast<T*>(tensor.data());
    if constexpr (std::is_same_v<T, bool>) {
      for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
    } else if (!values.empty()) {
      std::memcpy(out, values.data(), values.size() * sizeof(T));
    }
    return tensor;
  }

  /// The element type.
  DType dtype() const { return dtype_; }
  /// The size of each dimension; empty for a zero-dimensional (scalar) tensor.
  const Shape& shape() const { return shape_; }
  /// The number of dimensions.
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  /// The number of elements (1 for a scalar, 0 if any dimension is 0).
  int64_t numel() const { return numel_; }
  /// Bytes per element.
  size_t element_size() const { return tdist::element_size(dtype_); }
  /// numel() * element_size().
  size_t nbytes() const { return static_cast<size_t>(numel_) * element_size(); }
  /// The first element; may be null when numel() is 0.
  void* data() const { return data_; }

  /// The first element as a T*; raises DistInvalidArgument unless T is the
  /// C++ type of dtype() (e.g. float for float32, Half for float16).
  template <ElementType T>
  T* data() const {
    if (dtype_of<T>() != dtype_) detail::throw_dtype_mismatch("Tensor::data", dtype_of<T>(), dtype_);
    return static_cast<T*>(data_);
  }

  /// A copy of the elements; raises DistInvalidArgument as data<T>() does.
  template <ElementType T>
  std::vector<T> to_vector() const {
    if (dtype_of<T>() != dtype_) {
      detail::throw_dtype_mismatch("Tensor::to_vector", dtype_of<T>(), dtype_);
    }
    const T* in = static_cast<const T*>(data_);
    return std::vector<T>(in, in + numel_);
  }

  /// True if the memory was allocated by tdist (empty, zeros, from_vector,
  /// clone, or a view of one of those), false for wrapped memory.
  bool owns_memory() const { return storage_ != nullptr; }

  /// A one-dimensional view of elements [offset, offset + count) of the
  /// flattened tensor. Raises DistInvalidArgument (naming offset, count and
  /// numel) unless 0 <= offset, 0 <= count and offset + count <= numel().
  Tensor view(int64_t offset, int64_t count) const;

  /// A view of rows [start, start + length) along the first dimension; the
  /// other dimensions are kept. Raises DistInvalidArgument for a scalar or an
  /// out-of-range row range.
  Tensor narrow(int64_t start, int64_t length) const;

  /// A view with another shape holding the same number of elements; one
  /// dimension may be -1 and is then inferred. Raises DistInvalidArgument
  /// otherwise.
  Tensor reshape(Shape shape) const;

  /// A one-dimensional view of all elements.
  Tensor flatten() const;

  /// A tensor owning a copy of the elements, with the same dtype and shape.
  Tensor clone() const;

  /// Copies the elements of `src` into this tensor's memory (shapes may
  /// differ). Raises DistInvalidArgument unless dtype and numel match.
  void copy_from(const Tensor& src);

  /// True if the byte ranges of the two tensors intersect (never for a tensor
  /// without elements).
  bool overlaps(const Tensor& other) const;

  /// The dtype and shape, e.g. "float32[4, 3]" ("int64[]" for a scalar).
  std::string describe() const;

 private:
  Tensor(std::shared_ptr<void> storage, void* data, DType dtype, Shape shape, int64_t numel);

  std::shared_ptr<void> storage_;  // owned allocation; null for wrapped memory
  void* data_ = nullptr;
  DType dtype_ = DType::kFloat32;
  Shape shape_;  // inline: a copy of the tensor allocates nothing
  int64_t numel_ = 0;
};

}  // namespace tdist
