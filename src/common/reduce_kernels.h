#pragma once

// Internal: the elementwise reduction kernels the collective algorithms run
// on raw buffers. Include as "common/reduce_kernels.h".
//
// A reduction of n inputs with operator `op` runs as:
//   premultiply (or premultiply_into) on each input    -- PREMUL_SUM only
//   reduce_into, pairwise, n - 1 times                 -- AVG/PREMUL_SUM sum
//   finalize_reduce once on the result                 -- AVG only
// (float32 sums of several sources may instead run in one pass:
// sum_float32_sources.) Float16 and bfloat16 are computed in float32 and
// rounded back (to nearest even) at every call. Each function but
// sum_float32_sources first calls check_reduce_supported, so an invalid
// (dtype, op) pair raises DistInvalidArgument before any memory is touched.
// Buffers must be aligned for their element type; a count of 0 does nothing
// and accepts null pointers.

#include <cstddef>

#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist {

/// dst[i] = a[i] op b[i] for i < count. `dst` may be the same pointer as `a`,
/// `b` or both; other overlaps are not allowed. The operand order is kept
/// whatever aliases, so MIN/MAX return the same bits in every aliasing
/// (which signed zero or NaN payload wins); the NaN payload a SUM or PRODUCT
/// produces is unspecified (the compiler may commute them). AVG and
/// PREMUL_SUM sum here.
void reduce_into(void* dst, const void* a, const void* b, size_t count, DType dtype, const ReduceOp& op);

/// dst[i] = ((srcs[0][i] + srcs[1][i]) + srcs[2][i]) + ... over n float32
/// sources, in one pass (the pairwise order of reduce_into, so the same
/// bits). `dst` must not overlap any source. Returns false, doing nothing,
/// for n outside 2..8.
bool sum_float32_sources(float* dst, const float* const* srcs, int n, size_t count);

/// For PREMUL_SUM, multiplies data[i] by op.premul_factor (integers: by the
/// factor truncated toward zero, wrapping on overflow); no-op for other ops.
void premultiply(void* data, size_t count, DType dtype, const ReduceOp& op);

/// dst[i] = src[i] * factor for PREMUL_SUM, a plain copy for the other ops.
/// `dst` may equal `src`; other overlaps are not allowed.
void premultiply_into(void* dst, const void* src, size_t count, DType dtype, const ReduceOp& op);

/// For AVG, divides data[i] by world_size (integers: truncating toward zero);
/// no-op for other ops. Raises DistInvalidArgument if world_size < 1.
void finalize_reduce(void* data, size_t count, DType dtype, const ReduceOp& op, int world_size);

}  // namespace tdist
