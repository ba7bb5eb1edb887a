#include "process_group/object_codec.h"

#include <string>

#include "tdist/errors.h"

namespace tdist::detail {

size_t object_bytes(const std::vector<int64_t>& sizes, const char* op) {
  size_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || sizes[i] > kMaxObjectBytes) {
      throw DistBackendError(std::string(op) + ": object " + std::to_string(i) + " has a size of " +
                             std::to_string(sizes[i]) +
                             " bytes (expected 0 to 2^40): a peer sent a corrupt size");
    }
    // At most 2^40 per object: the total cannot wrap for fewer than 2^24
    // objects, and a list that long cannot have been received.
    total += static_cast<size_t>(sizes[i]);
  }
  return total;
}

std::vector<Bytes> split_objects(const std::vector<int64_t>& sizes, const std::vector<uint8_t>& data,
                                 const char* op) {
  const size_t total = object_bytes(sizes, op);
  if (total != data.size()) {
    throw DistBackendError(std::string(op) + ": the objects' sizes add up to " + std::to_string(total) +
                           " bytes but " + std::to_string(data.size()) + " bytes came");
  }
  std::vector<Bytes> out;
  out.reserve(sizes.size());
  auto at = data.begin();
  for (int64_t size : sizes) {
    out.emplace_back(at, at + static_cast<std::ptrdiff_t>(size));
    at += static_cast<std::ptrdiff_t>(size);
  }
  return out;
}

}  // namespace tdist::detail
