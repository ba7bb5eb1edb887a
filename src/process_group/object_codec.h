#pragma once

// The decoding of what object collectives (broadcast_object_list,
// all_gather_object, gather_object, scatter_object_list) receive from peers:
// each object's size, then the objects' bytes back to back. Kept apart from
// the collectives so that it can be fuzzed (tests/fuzz/fuzz_object_codec.cc)
// on arbitrary sizes and bytes: a corrupt or foreign peer must produce an
// error naming the object, never a wrong buffer size or a read out of bounds.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tdist/store.h"  // Bytes

namespace tdist::detail {

/// Largest object a peer may announce (1 TiB, beyond any object a rank can
/// hold): a size beyond it is corrupt, not a request to allocate it.
inline constexpr int64_t kMaxObjectBytes = int64_t{1} << 40;

/// The total of object sizes that came from peers, each checked to lie in
/// [0, kMaxObjectBytes]; raises DistBackendError naming `op` and the object
/// otherwise (a negative size would wrap the total and size buffers wrongly).
size_t object_bytes(const std::vector<int64_t>& sizes, const char* op);

/// Cuts `data`, the objects back to back, into objects of `sizes`. The sizes
/// are checked as object_bytes does and must add up to data.size() exactly;
/// raises DistBackendError naming `op` otherwise.
std::vector<Bytes> split_objects(const std::vector<int64_t>& sizes, const std::vector<uint8_t>& data,
                                 const char* op);

}  // namespace tdist::detail
