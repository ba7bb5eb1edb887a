#include "validate.h"

#include "tdist/errors.h"

namespace tdist::validate {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

void throw_rank_not_in_group(const char* op, const char* what, int rank, int size) {
  throw DistInvalidArgument(std::string(op) + ": " + what + " " + std::to_string(rank) +
                            " is not a rank of the group (size " + std::to_string(size) + ")");
}

void list_length(const char* op, const char* what, size_t got, int size) {
  if (got != static_cast<size_t>(size)) {
    throw DistInvalidArgument(std::string(op) + ": " + what + " has " + std::to_string(got) +
                              " tensors but the group has " + std::to_string(size) + " ranks");
  }
}

void same_dtype(const char* op, const char* what, const Tensor& tensor, DType expected) {
  if (tensor.dtype() != expected) {
    throw DistInvalidArgument(std::string(op) + ": " + what + " is " + dtype_name(tensor.dtype()) + " but " +
                              dtype_name(expected) + " was expected (all tensors of one call share a dtype)");
  }
}

void numel_equals(const char* op, const char* what, const Tensor& tensor, int64_t expected) {
  if (tensor.numel() != expected) {
    throw DistInvalidArgument(std::string(op) + ": " + what + " has " + std::to_string(tensor.numel()) +
                              " elements but " + std::to_string(expected) + " were expected");
  }
}

void reduce_op(const char* op, const Tensor& tensor, const ReduceOp& reduce) {
  check_reduce_supported(tensor.dtype(), reduce, op);
}

void gathered_shape(const char* op, const char* output_name, const Tensor& output, const char* input_name,
                    const Tensor& input, int size) {
  same_dtype(op, output_name, output, input.dtype());
  const auto& in = input.shape();
  const auto& out = output.shape();
  bool stacked =
      out.size() == in.size() + 1 && out[0] == size && std::equal(in.begin(), in.end(), out.begin() + 1);
  bool concatenated = !in.empty() && out.size() == in.size() && out[0] == in[0] * size &&
                      std::equal(in.begin() + 1, in.end(), out.begin() + 1);
  if (in.empty() && out.size() == 1 && out[0] == size) stacked = true;
  if (!stacked && !concatenated) {
    throw DistInvalidArgument(std::string(op) + ": " + output_name + " has shape " + shape_text(out) +
                              " but " + input_name + " has shape " + shape_text(in) + "; expected " +
                              output_name + " to be " + std::to_string(size) + " " + input_name +
                              "s concatenated along dim 0 or stacked in a new dim 0");
  }
}

void split_sizes(const char* op, const char* what, const std::vector<int64_t>& splits, int size,
                 int64_t rows) {
  if (splits.size() != static_cast<size_t>(size)) {
    throw DistInvalidArgument(std::string(op) + ": " + what + " has " + std::to_string(splits.size()) +
                              " entries but the group has " + std::to_string(size) + " ranks");
  }
  int64_t total = 0;
  for (size_t r = 0; r < splits.size(); ++r) {
    if (splits[r] < 0) {
      throw DistInvalidArgument(std::string(op) + ": " + what + "[" + std::to_string(r) + "] is negative (" +
                                std::to_string(splits[r]) + ")");
    }
    total += splits[r];
  }
  if (total != rows) {
    throw DistInvalidArgument(std::string(op) + ": " + what + " sum to " + std::to_string(total) +
                              " but the tensor has " + std::to_string(rows) + " rows (dim 0)");
  }
}

std::vector<int64_t> even_splits(const char* op, const char* what, int64_t rows, int size) {
  if (rows % size != 0) {
    throw DistInvalidArgument(std::string(op) + ": no split sizes given, so " + what + "'s " +
                              std::to_string(rows) +
                              " rows (dim 0) are split evenly, but they do not divide "
                              "among " +
                              std::to_string(size) + " ranks");
  }
  return std::vector<int64_t>(static_cast<size_t>(size), rows / size);
}

int64_t row_elements(const char* op, const char* what, const Tensor& tensor) {
  if (tensor.dim() == 0) {
    throw DistInvalidArgument(std::string(op) + ": " + what + " is a 0-dim tensor; split sizes need a dim 0");
  }
  int64_t rows = tensor.shape()[0];
  return rows == 0 ? 0 : tensor.numel() / rows;
}

void no_overlap(const char* op, const char* a_name, const Tensor& a, const char* b_name, const Tensor& b) {
  if (a.overlaps(b)) {
    throw DistInvalidArgument(std::string(op) + ": " + a_name + " and " + b_name +
                              " share memory; pass separate buffers");
  }
}

void positive_timeout(const std::string& op, std::chrono::milliseconds timeout) {
  if (timeout.count() > 0) return;
  throw DistInvalidArgument(op + ": timeout must be positive, got " + std::to_string(timeout.count()) +
                            " ms (zero does not mean \"no timeout\"; pass a long one instead)");
}

}  // namespace tdist::validate
