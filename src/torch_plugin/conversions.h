#pragma once

// Conversions at the boundary between torch's c10d types and tdist's: tensors
// (zero copy), dtypes, reduce ops and exceptions. Every check here names the
// torch.distributed function, the argument, what was expected and what came.
//
// Header-only: torch's headers make each translation unit cost ~10 s to
// compile, so the plugin keeps to four (module.cc, process_group_tdist.cc,
// p2p.cc, issue_and_check.cc) and these small functions are compiled where
// they are used.

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <c10/util/Exception.h>

#include <exception>
#include <span>
#include <string>
#include <vector>

#include "tdist/dtype.h"
#include "tdist/errors.h"
#include "tdist/reduce_op.h"
#include "tdist/tensor.h"

namespace tdist::torch_plugin {

/// The tdist dtype of a torch scalar type; raises c10::Error naming `op` for
/// types tdist has no equivalent of (quantized types, ...).
inline DType to_tdist_dtype(at::ScalarType type, const char* op);
/// The torch scalar type of a tdist dtype.
inline at::ScalarType to_torch_dtype(DType dtype);
/// The name tdist's messages give a torch dtype ("float32"); torch's own
/// name for dtypes tdist lacks.
inline std::string dtype_label(at::ScalarType type);

/// Wraps a torch tensor's memory as a tdist tensor, without copying. The torch
/// tensor must stay alive while the tdist one is used. Raises c10::Error for a
/// tensor that is undefined, not on the CPU, not strided or not contiguous.
inline Tensor to_tdist(const at::Tensor& tensor, const char* op, const char* what);
inline std::vector<Tensor> to_tdist(const std::vector<at::Tensor>& tensors, const char* op, const char* what);

/// The one entry of a c10d list (torch passes lists of tensors, or lists of
/// tensor lists, for the old multi-GPU APIs); raises unless there is one.
template <typename List>
auto& single_entry(List& list, const char* op, const char* what);

/// Raises unless 0 <= rank < size, naming `what` ("src", "dst").
inline void check_group_rank(int64_t rank, int size, const char* op, const char* what);

/// The tdist reduce op of a c10d one, PREMUL_SUM's factor included.
inline ReduceOp to_tdist_op(const c10d::ReduceOp& op, const char* op_name);

/// The exception torch should see for `error`: tdist and standard exceptions
/// become c10::Error (Python: RuntimeError) with the same message; c10::Error
/// passes through; null stays null.
inline std::exception_ptr to_torch_error(std::exception_ptr error);

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
[[noreturn]] inline void fail(const std::string& message);

// ---- Definitions (inline: see the file comment) ----

inline void fail(const std::string& message) {
  throw c10::Error(message);
}

inline DType to_tdist_dtype(at::ScalarType type, const char* op) {
  switch (type) {
    case at::kBool:
      return DType::kBool;
    case at::kByte:
      return DType::kUInt8;
    case at::kChar:
      return DType::kInt8;
    case at::kShort:
      return DType::kInt16;
    case at::kInt:
      return DType::kInt32;
    case at::kLong:
      return DType::kInt64;
    case at::kHalf:
      return DType::kFloat16;
    case at::kBFloat16:
      return DType::kBFloat16;
    case at::kFloat:
      return DType::kFloat32;
    case at::kDouble:
      return DType::kFloat64;
    case at::kComplexFloat:
      return DType::kComplex64;
    case at::kComplexDouble:
      return DType::kComplex128;
    default:
      fail(std::string(op) + ": the tdist backend does not support tensors of dtype " + c10::toString(type) +
           " (supported: bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, "
           "complex64, complex128)");
  }
}

inline std::string dtype_label(at::ScalarType type) {
  try {
    return std::string(dtype_name(to_tdist_dtype(type, "")));
  } catch (const c10::Error&) {
    return c10::toString(type);
  }
}

inline at::ScalarType to_torch_dtype(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return at::kBool;
    case DType::kUInt8:
      return at::kByte;
    case DType::kInt8:
      return at::kChar;
    case DType::kInt16:
      return at::kShort;
    case DType::kInt32:
      return at::kInt;
    case DType::kInt64:
      return at::kLong;
    case DType::kFloat16:
      return at::kHalf;
    case DType::kBFloat16:
      return at::kBFloat16;
    case DType::kFloat32:
      return at::kFloat;
    case DType::kFloat64:
      return at::kDouble;
    case DType::kComplex64:
      return at::kComplexFloat;
    case DType::kComplex128:
      return at::kComplexDouble;
  }
  fail("tdist: unknown dtype code " + std::to_string(static_cast<int>(dtype)));
}

inline Tensor to_tdist(const at::Tensor& tensor, const char* op, const char* what) {
  if (!tensor.defined()) fail(std::string(op) + ": " + what + " is an undefined tensor");
  if (!tensor.device().is_cpu()) {
    fail(std::string(op) + ": " + what + " is on device " + tensor.device().str() +
         "; the tdist backend handles CPU tensors only (use gloo or nccl for other devices)");
  }
  if (tensor.layout() != at::kStrided) {
    fail(std::string(op) + ": " + what + " has layout " + c10::str(tensor.layout()) +
         "; the tdist backend handles dense (strided) tensors only");
  }
  if (!tensor.is_contiguous()) {
    fail(std::string(op) + ": " + what + " is not contiguous (sizes " + c10::str(tensor.sizes()) +
         ", strides " + c10::str(tensor.strides()) +
         "); the tdist backend reads and writes tensors in place: pass tensor.contiguous()");
  }
  DType dtype = to_tdist_dtype(tensor.scalar_type(), op);
  // Straight into the tensor's inline shape: no vector on every call.
  const Shape shape(std::span<const int64_t>(tensor.sizes().data(), tensor.sizes().size()));
  void* data = tensor.numel() == 0 ? nullptr : tensor.data_ptr();
  return translate_errors([&] { return Tensor::wrap(data, dtype, shape); });
}

inline std::vector<Tensor> to_tdist(const std::vector<at::Tensor>& tensors, const char* op,
                                    const char* what) {
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(to_tdist(t, op, what));
  return out;
}

template <typename List>
auto& single_entry(List& list, const char* op, const char* what) {
  if (list.size() != 1) {
    fail(std::string(op) + ": the tdist backend takes exactly one " + what + " per process, got " +
         std::to_string(list.size()) + " (the *_multigpu APIs need one per GPU; tdist is CPU only)");
  }
  return list[0];
}

inline void check_group_rank(int64_t rank, int size, const char* op, const char* what) {
  if (rank < 0 || rank >= size) {
    fail(std::string(op) + ": " + what + " " + std::to_string(rank) +
         " is not a rank of the group (ranks 0.." + std::to_string(size - 1) + ")");
  }
}

inline ReduceOp to_tdist_op(const c10d::ReduceOp& op, const char* op_name) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return ReduceOp::SUM;
    case c10d::ReduceOp::AVG:
      return ReduceOp::AVG;
    case c10d::ReduceOp::PRODUCT:
      return ReduceOp::PRODUCT;
    case c10d::ReduceOp::MIN:
      return ReduceOp::MIN;
    case c10d::ReduceOp::MAX:
      return ReduceOp::MAX;
    case c10d::ReduceOp::BAND:
      return ReduceOp::BAND;
    case c10d::ReduceOp::BOR:
      return ReduceOp::BOR;
    case c10d::ReduceOp::BXOR:
      return ReduceOp::BXOR;
    case c10d::ReduceOp::PREMUL_SUM: {
      // torch keeps the factor in a type-erased supplement (a double, or a
      // scalar tensor).
      auto* premul = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      if (premul == nullptr) {
        fail(std::string(op_name) +
             ": ReduceOp.PREMUL_SUM came without its factor; create it with "
             "torch.distributed._make_nccl_premul_sum(factor)");
      }
      if (!premul->tensor_factor.defined()) return ReduceOp::premul_sum(premul->double_factor);
      return ReduceOp::premul_sum(premul->tensor_factor.item<double>());
    }
    default:
      fail(std::string(op_name) + ": unknown reduce op " + std::to_string(static_cast<int>(op.op_)));
  }
}

inline std::exception_ptr to_torch_error(std::exception_ptr error) {
  if (!error) return error;
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error&) {
    return error;
  } catch (const tdist::DistStoreError& e) {
    // torch's own classes, which reach Python as torch.distributed's
    // DistStoreError, DistNetworkError, DistBackendError and DistError (all
    // RuntimeErrors); tdist's messages already name the op, the ranks and
    // the sizes.
    return std::make_exception_ptr(c10::DistStoreError(e.what()));
  } catch (const tdist::DistNetworkError& e) {
    return std::make_exception_ptr(c10::DistNetworkError(e.what()));
  } catch (const tdist::DistInvalidArgument& e) {
    return std::make_exception_ptr(c10::Error(e.what()));  // RuntimeError, as torch's own checks
  } catch (const tdist::DistBackendError& e) {
    return std::make_exception_ptr(c10::DistBackendError(e.what()));
  } catch (const tdist::DistTimeoutError& e) {
    return std::make_exception_ptr(c10::DistBackendError(e.what()));  // as gloo's timeouts
  } catch (const tdist::DistError& e) {
    return std::make_exception_ptr(c10::DistError(e.what()));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(c10::Error(e.what()));
  } catch (...) {
    return std::make_exception_ptr(c10::Error("tdist: an operation failed with an unknown exception"));
  }
}

}  // namespace tdist::torch_plugin
