#include "tdist/reduce_op.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "tdist/errors.h"

namespace tdist {

namespace {

// True if the factor, truncated toward zero, is a value of integer type T.
// Checked up front because converting an out-of-range double to an integer
// is undefined behaviour.
template <typename T>
bool factor_fits(double factor) {
  if (!std::isfinite(factor)) return false;
  const double truncated = std::trunc(factor);
  // max() + 1 is a power of two, exact in double even for int64.
  return truncated >= static_cast<double>(std::numeric_limits<T>::min()) &&
         truncated < static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
}

bool integer_factor_fits(DType dtype, double factor) {
  switch (dtype) {
    case DType::kUInt8:
      return factor_fits<uint8_t>(factor);
    case DType::kInt8:
      return factor_fits<int8_t>(factor);
    case DType::kInt16:
      return factor_fits<int16_t>(factor);
    case DType::kInt32:
      return factor_fits<int32_t>(factor);
    case DType::kInt64:
      return factor_fits<int64_t>(factor);
    default:
      return true;
  }
}

// Why `op` is not defined for `dtype`, or null if it is.
const char* unsupported_reason(DType dtype, const ReduceOp& op) {
  switch (op.kind) {
    case ReduceOp::SUM:
      return nullptr;
    case ReduceOp::BAND:
    case ReduceOp::BOR:
    case ReduceOp::BXOR:
      return is_integral(dtype, /*include_bool=*/true) ? nullptr
                                                       : "bitwise ops need an integer or bool tensor";
    case ReduceOp::MIN:
    case ReduceOp::MAX:
      return is_complex(dtype) ? "complex numbers are not ordered" : nullptr;
    case ReduceOp::PRODUCT:
      return is_complex(dtype) ? "PRODUCT is not supported for complex tensors" : nullptr;
    case ReduceOp::AVG:
      return dtype == DType::kBool ? "a bool tensor cannot hold an average" : nullptr;
    case ReduceOp::PREMUL_SUM:
      if (dtype == DType::kBool) return "a bool tensor cannot be scaled";
      if (!integer_factor_fits(dtype, op.premul_factor)) {
        return "the factor, truncated toward zero, must be a value of the integer dtype";
      }
      return nullptr;
  }
  return "unknown reduce op";
}

}  // namespace

const char* reduce_op_name(ReduceOp::Kind kind) {
  switch (kind) {
    case ReduceOp::SUM:
      return "SUM";
    case ReduceOp::PRODUCT:
      return "PRODUCT";
    case ReduceOp::MIN:
      return "MIN";
    case ReduceOp::MAX:
      return "MAX";
    case ReduceOp::BAND:
      return "BAND";
    case ReduceOp::BOR:
      return "BOR";
    case ReduceOp::BXOR:
      return "BXOR";
    case ReduceOp::AVG:
      return "AVG";
    case ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
  }
  return "UNKNOWN";
}

const char* reduce_op_name(const ReduceOp& op) {
  return reduce_op_name(op.kind);
}

bool is_reduce_supported(DType dtype, const ReduceOp& op) {
  return unsupported_reason(dtype, op) == nullptr;
}

void check_reduce_supported(DType dtype, const ReduceOp& op, std::string_view op_name) {
  const char* reason = unsupported_reason(dtype, op);
  if (reason == nullptr) return;
  std::ostringstream message;
  message << op_name << ": reduce op " << reduce_op_name(op);
  if (op.kind == ReduceOp::PREMUL_SUM && dtype != DType::kBool) {
    message << " with factor " << op.premul_factor;
  }
  message << " is not defined for dtype " << dtype_name(dtype) << " (" << reason << ")";
  throw DistInvalidArgument(message.str());
}

}  // namespace tdist
