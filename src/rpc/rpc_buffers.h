#pragma once

// Buffers for the tensors a worker receives. A large buffer fresh from the
// system costs a page fault per 4 KiB page when first written: 64 MiB took
// 27 ms of faults on the 2-core VM of docs/rpc.md, more than the copy into
// it. So buffers of at least kCachedMinBytes go back to a process-wide cache
// when their tensor dies, and the next tensor of about their size reuses
// them (up to TDIST_RPC_BUFFER_CACHE_BYTES cached, default 512 MiB; 0 keeps
// none).

#include <cstddef>
#include <vector>

#include "tdist/tensor.h"

namespace tdist::rpc::detail {

inline constexpr size_t kCachedMinBytes = size_t{1} << 20;

/// An uninitialised tensor, from the cache when one fits.
Tensor receive_buffer(DType dtype, const Shape& shape, size_t nbytes);

/// Bytes the cache holds now (for tests).
size_t cached_buffer_bytes();

}  // namespace tdist::rpc::detail
