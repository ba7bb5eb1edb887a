#pragma once

/// @file reduce_op.h
/// The reduction operators of the reducing collectives (torch.distributed.
/// ReduceOp) and which dtypes each one is defined for.
///
/// Semantics, as in torch.distributed:
/// - SUM, PRODUCT, MIN, MAX: elementwise. Integer SUM and PRODUCT wrap around
///   (two's complement). MIN and MAX of floating types propagate NaN, like
///   torch.minimum / torch.maximum. MIN, MAX and PRODUCT are not defined for
///   complex tensors.
/// - BAND, BOR, BXOR: bitwise; integer and bool tensors only.
/// - AVG: the sum divided by the world size (integers: truncated toward
///   zero); not for bool.
/// - PREMUL_SUM: each input is multiplied by `premul_factor` before the sum;
///   not for bool. For integer tensors the factor is truncated toward zero to
///   the tensor's type (like NCCL's scalar of the tensor's type) and must fit.
/// - bool tensors hold 0 or 1 (any nonzero byte reads as true): SUM and MAX
///   are a logical OR, PRODUCT and MIN a logical AND, BAND/BOR/BXOR act on the
///   0/1 values; the result is always 0 or 1.

#include <string_view>

#include "tdist/dtype.h"

namespace tdist {

/// A reduction operator: a kind, plus the factor of PREMUL_SUM.
struct ReduceOp {
  /// The operator kinds, named as in torch.distributed.ReduceOp. The fixed
  /// underlying type makes any int a valid (if unknown) value, so one that
  /// arrives from bindings can be rejected instead of being undefined.
  enum Kind : int { SUM, PRODUCT, MIN, MAX, BAND, BOR, BXOR, AVG, PREMUL_SUM };

  Kind kind = SUM;
  /// The factor of PREMUL_SUM; ignored by the other kinds.
  double premul_factor = 1.0;

  constexpr ReduceOp() = default;
  /// Implicit, so that `ReduceOp op = ReduceOp::MAX;` works.
  constexpr ReduceOp(Kind k) : kind(k) {}  // NOLINT(google-explicit-constructor)

  /// PREMUL_SUM with the given factor (torch's _make_nccl_premul_sum).
  static constexpr ReduceOp premul_sum(double factor) {
    ReduceOp op(PREMUL_SUM);
    op.premul_factor = factor;
    return op;
  }

  friend constexpr bool operator==(const ReduceOp&, const ReduceOp&) = default;
};

/// "SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "AVG",
/// "PREMUL_SUM"; "UNKNOWN" for a value outside the enum.
const char* reduce_op_name(ReduceOp::Kind kind);
const char* reduce_op_name(const ReduceOp& op);

/// True if `op` is defined for tensors of `dtype` (see the file comment).
bool is_reduce_supported(DType dtype, const ReduceOp& op);

/// Raises DistInvalidArgument unless `op` is defined for `dtype`, with a
/// message naming the collective `op_name`, the operator, the dtype and why:
/// "all_reduce: reduce op BAND is not defined for dtype float32 (bitwise ops
/// need an integer or bool tensor)".
void check_reduce_supported(DType dtype, const ReduceOp& op, std::string_view op_name);

}  // namespace tdist
