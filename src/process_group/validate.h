#pragma once

// Argument checks run before any communication, on the caller's thread.
// Each raises DistInvalidArgument naming the op, the argument and what was
// expected versus what came.

#include <chrono>
#include <string>
#include <vector>

#include "tdist/reduce_op.h"
#include "tdist/tensor.h"

namespace tdist::validate {

[[noreturn]] void throw_rank_not_in_group(const char* op, const char* what, int rank, int size);
inline void rank_in_group(const char* op, const char* what, int rank, int size) {
  if (rank < 0 || rank >= size) throw_rank_not_in_group(op, what, rank, size);
}
void list_length(const char* op, const char* what, size_t got, int size);
void same_dtype(const char* op, const char* what, const Tensor& tensor, DType expected);
void numel_equals(const char* op, const char* what, const Tensor& tensor, int64_t expected);
void reduce_op(const char* op, const Tensor& tensor, const ReduceOp& reduce);
/// `output` must be size x `input`: concatenated along dim 0 or stacked.
void gathered_shape(const char* op, const char* output_name, const Tensor& output, const char* input_name,
                    const Tensor& input, int size);
/// Split sizes along dim 0: `size` entries, non-negative, summing to rows.
void split_sizes(const char* op, const char* what, const std::vector<int64_t>& splits, int size,
                 int64_t rows);
/// Equal split sizes of `rows` among `size` ranks (an uneven call given no
/// split sizes); raises DistInvalidArgument if they do not divide.
std::vector<int64_t> even_splits(const char* op, const char* what, int64_t rows, int size);
/// Bytes of one row (dim-0 slice) of a tensor; raises for a 0-dim tensor.
int64_t row_elements(const char* op, const char* what, const Tensor& tensor);
/// A group's timeout: positive. Zero is not "no timeout" (torch's Gloo fails
/// at once with it), and a negative one has no meaning.
void positive_timeout(const std::string& op, std::chrono::milliseconds timeout);
/// No two tensors may share memory, except `allowed_alias` pairs found by the caller.
void no_overlap(const char* op, const char* a_name, const Tensor& a, const char* b_name, const Tensor& b);

}  // namespace tdist::validate
