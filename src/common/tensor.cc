#include "tdist/tensor.h"

#include <cstdint>
#include <limits>
#include <new>
#include <string>

#include "tdist/errors.h"

namespace tdist {

namespace {

// Owned buffers start on a cache line so reduction kernels and copies get
// aligned vector loads and two tensors never share a line.
constexpr std::align_val_t kAlignment{64};

std::string shape_string(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

// The element count of `shape`, refusing negative dimensions and any size
// whose byte count would not fit in int64 (so later arithmetic cannot wrap).
int64_t checked_numel(const char* function, DType dtype, const Shape& shape) {
  for (int64_t size : shape) {
    if (size < 0) {
      throw DistInvalidArgument(std::string(function) + ": negative dimension in shape " +
                                shape_string(shape));
    }
  }
  // A zero dimension makes the tensor empty however large the others are.
  for (int64_t size : shape) {
    if (size == 0) return 0;
  }
  const int64_t limit = std::numeric_limits<int64_t>::max() / static_cast<int64_t>(element_size(dtype));
  int64_t numel = 1;
  for (int64_t size : shape) {
    if (numel > limit / size) {
      throw DistInvalidArgument(std::string(function) + ": shape " + shape_string(shape) + " of " +
                                dtype_name(dtype) + " is too large");
    }
    numel *= size;
  }
  return numel;
}

size_t alignment_of(DType dtype) {
  return dispatch_dtype(dtype, [](auto tag) { return alignof(typename decltype(tag)::type); });
}

}  // namespace

namespace detail {

void throw_dtype_mismatch(const char* function, DType requested, DType actual) {
  throw DistInvalidArgument(std::string(function) + ": requested elements of type " + dtype_name(requested) +
                            " from a tensor of dtype " + dtype_name(actual));
}

void check_wrap_size(size_t numel, const Shape& shape) {
  int64_t expected = checked_numel("Tensor::wrap", DType::kUInt8, shape);
  if (static_cast<uint64_t>(expected) != numel) {
    throw DistInvalidArgument("Tensor: shape " + shape_string(shape) + " holds " + std::to_string(expected) +
                              " elements but the data has " + std::to_string(numel));
  }
}

}  // namespace detail

Tensor::Tensor() : shape_{0} {}

Tensor::Tensor(std::shared_ptr<void> storage, void* data, DType dtype, Shape shape, int64_t numel)
    : storage_(std::move(storage)), data_(data), dtype_(dtype), shape_(std::move(shape)), numel_(numel) {}

Tensor Tensor::wrap(void* data, DType dtype, Shape shape) {
  const int64_t numel = checked_numel("Tensor::wrap", dtype, shape);
  if (data == nullptr && numel > 0) {
    throw DistInvalidArgument("Tensor::wrap: null data for a tensor of " + std::to_string(numel) +
                              " elements");
  }
  const size_t alignment = alignment_of(dtype);
  if (reinterpret_cast<uintptr_t>(data) % alignment != 0) {
    throw DistInvalidArgument("Tensor::wrap: data is not aligned to " + std::to_string(alignment) +
                              " bytes, as " + dtype_name(dtype) + " elements need");
  }
  return Tensor(nullptr, data, dtype, std::move(shape), numel);
}

Tensor Tensor::wrap(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner) {
  Tensor t = wrap(data, dtype, std::move(shape));
  t.storage_ = std::move(owner);
  return t;
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  const int64_t numel = checked_numel("Tensor::empty", dtype, shape);
  const size_t nbytes = static_cast<size_t>(numel) * tdist::element_size(dtype);
  if (nbytes == 0) return Tensor(nullptr, nullptr, dtype, std::move(shape), numel);
  void* memory = ::operator new(nbytes, kAlignment);
  std::shared_ptr<void> storage(memory, [](void* p) { ::operator delete(p, kAlignment); });
  return Tensor(std::move(storage), memory, dtype, std::move(shape), numel);
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor tensor = empty(dtype, std::move(shape));
  // All-zero bytes are zero (or false) for every dtype, half and complex too.
  if (tensor.nbytes() > 0) std::memset(tensor.data(), 0, tensor.nbytes());
  return tensor;
}

Tensor Tensor::view(int64_t offset, int64_t count) const {
  if (offset < 0 || count < 0 || offset > numel_ || count > numel_ - offset) {
    throw DistInvalidArgument("Tensor::view: offset " + std::to_string(offset) + " and count " +
                              std::to_string(count) + " do not fit in numel " + std::to_string(numel_) +
                              " of " + describe());
  }
  void* start = data_ == nullptr ? nullptr : static_cast<char*>(data_) + offset * element_size();
  return Tensor(storage_, start, dtype_, {count}, count);
}

Tensor Tensor::narrow(int64_t start, int64_t length) const {
  if (shape_.empty()) {
    throw DistInvalidArgument("Tensor::narrow: needs at least one dimension, got " + describe());
  }
  const int64_t rows = shape_[0];
  if (start < 0 || length < 0 || start > rows || length > rows - start) {
    throw DistInvalidArgument("Tensor::narrow: start " + std::to_string(start) + " and length " +
                              std::to_string(length) + " do not fit in dimension 0 of size " +
                              std::to_string(rows) + " of " + describe());
  }
  int64_t row_numel = 1;
  for (size_t i = 1; i < shape_.size(); ++i) row_numel *= shape_[i];
  Shape shape = shape_;
  shape[0] = length;
  void* first = data_ == nullptr
                    ? nullptr
                    : static_cast<char*>(data_) + start * row_numel * static_cast<int64_t>(element_size());
  return Tensor(storage_, first, dtype_, std::move(shape), length * row_numel);
}

Tensor Tensor::reshape(Shape shape) const {
  int64_t inferred = -1;
  bool has_zero = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1 && inferred < 0) {
      inferred = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      throw DistInvalidArgument("Tensor::reshape: invalid shape " + shape_string(shape) +
                                " (one -1 at most, no other negative size)");
    }
    has_zero = has_zero || shape[i] == 0;
  }
  // The product of the given sizes; `fits` turns false once it exceeds any
  // possible numel, so the multiplication never overflows.
  int64_t known = 1;
  bool fits = true;
  for (size_t i = 0; i < shape.size() && !has_zero; ++i) {
    if (static_cast<int64_t>(i) == inferred) continue;
    if (known > std::numeric_limits<int64_t>::max() / shape[i]) {
      fits = false;
      break;
    }
    known *= shape[i];
  }
  if (has_zero) known = 0;
  if (inferred >= 0) {
    if (known == 0) {
      throw DistInvalidArgument("Tensor::reshape: cannot infer the -1 in " + shape_string(shape) + " for " +
                                describe() + " (the other sizes multiply to 0)");
    }
    if (fits && numel_ % known == 0) {
      shape[static_cast<size_t>(inferred)] = numel_ / known;
      known = numel_;
    } else {
      fits = false;
    }
  }
  if (!fits || known != numel_) {
    throw DistInvalidArgument("Tensor::reshape: shape " + shape_string(shape) + " does not hold " +
                              std::to_string(numel_) + " elements of " + describe());
  }
  return Tensor(storage_, data_, dtype_, std::move(shape), numel_);
}

Tensor Tensor::flatten() const {
  return Tensor(storage_, data_, dtype_, {numel_}, numel_);
}

Tensor Tensor::clone() const {
  Tensor copy = empty(dtype_, shape_);
  if (nbytes() > 0) std::memcpy(copy.data(), data_, nbytes());
  return copy;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.dtype_ != dtype_ || src.numel_ != numel_) {
    throw DistInvalidArgument("Tensor::copy_from: cannot copy " + src.describe() + " into " + describe() +
                              " (dtype and numel must match)");
  }
  // memmove: the caller may copy between overlapping views of one buffer.
  if (nbytes() > 0 && src.data_ != data_) std::memmove(data_, src.data_, nbytes());
}

bool Tensor::overlaps(const Tensor& other) const {
  if (nbytes() == 0 || other.nbytes() == 0) return false;
  // Compared as integers: relational operators on pointers into different
  // allocations are unspecified.
  const uintptr_t a = reinterpret_cast<uintptr_t>(data_);
  const uintptr_t b = reinterpret_cast<uintptr_t>(other.data_);
  return a < b + other.nbytes() && b < a + nbytes();
}

std::string Tensor::describe() const {
  return dtype_name(dtype_) + shape_string(shape_);
}

}  // namespace tdist
