#pragma once

// Conversions at the boundary between torch's c10d types and tdist's: tensors
// (zero copy), dtypes, reduce ops and exceptions. Every check here names the
// torch.distributed function, the argument, what was expected and what came.

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <exception>
#include <string>
#include <vector>

#include "tdist/dtype.h"
#include "tdist/reduce_op.h"
#include "tdist/tensor.h"

namespace tdist::torch_plugin {

/// The tdist dtype of a torch scalar type; raises c10::Error naming `op` for
/// types tdist has no equivalent of (quantized types, ...).
DType to_tdist_dtype(at::ScalarType type, const char* op);
/// The torch scalar type of a tdist dtype.
at::ScalarType to_torch_dtype(DType dtype);

/// Wraps a torch tensor's memory as a tdist tensor, without copying. The torch
/// tensor must stay alive while the tdist one is used. Raises c10::Error for a
/// tensor that is undefined, not on the CPU, not strided or not contiguous.
Tensor to_tdist(const at::Tensor& tensor, const char* op, const char* what);
std::vector<Tensor> to_tdist(const std::vector<at::Tensor>& tensors, const char* op, const char* what);

/// The one tensor of a c10d tensor list (torch passes lists for the old
/// multi-GPU APIs); raises unless the list holds exactly one.
const at::Tensor& single_tensor(const std::vector<at::Tensor>& tensors, const char* op, const char* what);

/// The tdist reduce op of a c10d one, PREMUL_SUM's factor included.
ReduceOp to_tdist_op(const c10d::ReduceOp& op, const char* op_name);

/// The exception torch should see for `error`: tdist and standard exceptions
/// become c10::Error (Python: RuntimeError) with the same message; c10::Error
/// passes through; null stays null.
std::exception_ptr to_torch_error(std::exception_ptr error);

/// Runs `body`, rethrowing any exception as to_torch_error() describes.
template <typename F>
decltype(auto) translate_errors(F&& body) {
  try {
    return body();
  } catch (...) {
    std::rethrow_exception(to_torch_error(std::current_exception()));
  }
}

/// Raises c10::Error with `message` (no backtrace: the message says it all).
[[noreturn]] void fail(const std::string& message);

}  // namespace tdist::torch_plugin
