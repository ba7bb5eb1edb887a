#pragma once

/// @file shape.h
/// Shape: the sizes of a tensor's dimensions.
///
/// Up to Shape::kInlineDims sizes live inside the object, so copying a
/// Tensor (every work, tensor list and view does) allocates nothing for its
/// shape; a shape with more dimensions keeps them on the heap. A Shape is
/// made from a braced list or a std::vector<int64_t>, reads like a vector
/// of fixed length (size, [], begin/end, ==) and converts back to one:
///
///     Tensor m = Tensor::zeros(DType::kFloat32, {4, 3});
///     int64_t rows = m.shape()[0];                    // 4
///     std::vector<int64_t> sizes = m.shape();         // {4, 3}
///     bool same = m.shape() == std::vector<int64_t>{4, 3};

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <utility>
#include <vector>

namespace tdist {

class Shape {
 public:
  /// Dimensions stored without an allocation (torch's tensors rarely have
  /// more: NCHW images are 4, video and 3-D convolutions 5).
  static constexpr size_t kInlineDims = 6;

  using value_type = int64_t;
  using size_type = size_t;
  using iterator = const int64_t*;
  using const_iterator = const int64_t*;

  /// No dimensions: a scalar's shape.
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}
  // Implicit: the API has always taken shapes as vectors, and still does.
  Shape(const std::vector<int64_t>& dims)  // NOLINT(google-explicit-constructor)
      : Shape(std::span<const int64_t>(dims)) {}
  explicit Shape(std::span<const int64_t> dims) : size_(dims.size()) {
    if (size_ <= kInlineDims) {
      std::copy(dims.begin(), dims.end(), inline_.begin());
    } else {
      heap_.assign(dims.begin(), dims.end());
    }
  }

  Shape(const Shape&) = default;
  Shape& operator=(const Shape&) = default;
  // A moved-from shape is a scalar's, as a moved-from vector is empty: its
  // heap part moved out, its count must not outlive it.
  Shape(Shape&& other) noexcept : inline_(other.inline_), size_(other.size_), heap_(std::move(other.heap_)) {
    other.size_ = 0;
  }
  Shape& operator=(Shape&& other) noexcept {
    if (this != &other) {
      inline_ = other.inline_;
      size_ = other.size_;
      heap_ = std::move(other.heap_);
      other.size_ = 0;
    }
    return *this;
  }
  ~Shape() = default;

  /// The number of dimensions.
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const int64_t* data() const { return size_ <= kInlineDims ? inline_.data() : heap_.data(); }
  int64_t* data() { return size_ <= kInlineDims ? inline_.data() : heap_.data(); }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }
  /// The size of dimension `dim` (unchecked, as a vector's []).
  int64_t operator[](size_t dim) const { return data()[dim]; }
  int64_t& operator[](size_t dim) { return data()[dim]; }

  std::vector<int64_t> to_vector() const { return {begin(), end()}; }
  // Implicit, so that code written for the vector that shape() used to
  // return keeps compiling (it allocates, as that copy did).
  operator std::vector<int64_t>() const { return to_vector(); }  // NOLINT(google-explicit-constructor)

  friend bool operator==(const Shape& a, const Shape& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const Shape& a, const std::vector<int64_t>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  std::array<int64_t, kInlineDims> inline_{};
  size_t size_ = 0;
  std::vector<int64_t> heap_;  // only beyond kInlineDims: empty (no allocation) otherwise
};

}  // namespace tdist
