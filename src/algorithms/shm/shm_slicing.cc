#include "algorithms/shm/shm_slicing.h"

namespace tdist::algorithms::shm::detail {

size_t section_bytes(const ShmGroup& group, int parts, size_t element_bytes) {
  size_t unit = 64 * element_bytes / std::__gcd(size_t{64}, element_bytes);
  size_t bytes = group.buffer_bytes() / static_cast<size_t>(parts) / unit * unit;
  if (bytes == 0) {
    throw DistBackendError("shared memory: a buffer of " + std::to_string(group.buffer_bytes()) +
                           " bytes cannot hold " + std::to_string(parts) +
                           " sections; raise TDIST_SHM_BUFFER_BYTES");
  }
  return bytes;
}
}  // namespace tdist::algorithms::shm::detail
