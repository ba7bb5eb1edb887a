// Fuzzes the decoding of what object collectives receive from peers
// (src/process_group/object_codec.h). The input is cut into:
//    1 byte   N, how many objects (mod 17),
//   8N bytes  their sizes as a peer sent them (int64, host order),
//   the rest  the objects' bytes as they came.
// Asserts: sizes outside [0, 2^40] are refused by object_bytes with
// DistBackendError and no allocation; split_objects accepts exactly when
// the sizes are valid and add up to the bytes that came, and then returns
// N objects whose concatenation is those bytes; anything else is a
// DistBackendError, never a crash or a read out of bounds.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "process_group/object_codec.h"
#include "tdist/errors.h"

#define FUZZ_CHECK(cond)  \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

namespace detail = tdist::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t count = data[0] % 17;
  data += 1;
  size -= 1;
  if (size < 8 * count) return 0;
  std::vector<int64_t> sizes(count);
  if (count > 0) std::memcpy(sizes.data(), data, 8 * count);
  const std::vector<uint8_t> bytes(data + 8 * count, data + size);

  bool valid = true;
  unsigned __int128 total = 0;
  for (int64_t s : sizes) {
    if (s < 0 || s > detail::kMaxObjectBytes) valid = false;
    total += static_cast<unsigned __int128>(s < 0 ? 0 : s);
  }
  try {
    const size_t announced = detail::object_bytes(sizes, "fuzz");
    FUZZ_CHECK(valid);
    FUZZ_CHECK(announced == total);
  } catch (const tdist::DistBackendError&) {
    FUZZ_CHECK(!valid);
  }
  try {
    const std::vector<tdist::Bytes> objects = detail::split_objects(sizes, bytes, "fuzz");
    FUZZ_CHECK(valid && total == bytes.size());
    FUZZ_CHECK(objects.size() == count);
    size_t at = 0;
    for (size_t i = 0; i < count; ++i) {
      FUZZ_CHECK(objects[i].size() == static_cast<size_t>(sizes[i]));
      FUZZ_CHECK(objects[i].empty() ||
                 std::memcmp(objects[i].data(), bytes.data() + at, objects[i].size()) == 0);
      at += objects[i].size();
    }
    FUZZ_CHECK(at == bytes.size());
  } catch (const tdist::DistBackendError&) {
    FUZZ_CHECK(!valid || total != bytes.size());
  }
  return 0;
}
