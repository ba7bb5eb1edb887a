// Fuzzes what the TCP transport reads from a peer besides messages
// (src/transport/tcp/tcp_wire.h). The input is cut into:
//   20 bytes  a greeting (Hello) as it comes off the socket,
//    2 bytes  the receiving rank and the group size,
//    8 bytes  the payload size an abort notice's header announces,
//   the rest  an abort notice's payload.
// Asserts: a greeting judged plausible indexes the accept table safely
// (rank < its rank < size, connection < connections <= the maximum); the
// announced notice size is trusted only up to a reason's bound; a payload
// with a known kind byte re-encodes to itself, and any kind and reason
// survive encode -> decode (the reason cut to its bound).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_wire.h"

namespace tcp = tdist::transport::tcp;

#define FUZZ_CHECK(cond)  \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < sizeof(tcp::Hello) + 2 + 8) return 0;
  tcp::Hello hello{};
  std::memcpy(&hello, data, sizeof(hello));  // as recv_all fills it
  const int group = 1 + data[20] % 64;
  const int rank = data[21] % group;
  if (tcp::hello_plausible(hello, rank, group)) {
    FUZZ_CHECK(static_cast<int>(hello.rank) > rank && static_cast<int>(hello.rank) < group);
    FUZZ_CHECK(hello.connection < hello.connections &&
               hello.connections <= static_cast<uint32_t>(tdist::transport::kMaxSocketsPerPeer));
  }

  uint64_t announced = 0;
  std::memcpy(&announced, data + 22, 8);
  const uint64_t trusted = tcp::notice_payload_size(announced);
  FUZZ_CHECK(trusted == announced || trusted == 0);
  FUZZ_CHECK(trusted <= tcp::kMaxAbortReason + 1);

  const uint8_t* payload = data + 30;
  const size_t n = size - 30;
  const tcp::AbortNotice notice = tcp::decode_abort_payload(payload, n);
  FUZZ_CHECK(notice.reason.size() == (n == 0 ? 0 : n - 1));
  if (n > 0 && payload[0] <= 2 && n <= tcp::kMaxAbortReason + 1) {
    FUZZ_CHECK(tcp::encode_abort_payload(notice.kind, notice.reason) ==
               std::string_view(reinterpret_cast<const char*>(payload), n));
  }
  const std::string encoded = tcp::encode_abort_payload(notice.kind, notice.reason);
  FUZZ_CHECK(encoded.size() == 1 + std::min(notice.reason.size(), tcp::kMaxAbortReason));
  const tcp::AbortNotice again =
      tcp::decode_abort_payload(reinterpret_cast<const uint8_t*>(encoded.data()), encoded.size());
  FUZZ_CHECK(again.kind == notice.kind);
  FUZZ_CHECK(again.reason == notice.reason.substr(0, tcp::kMaxAbortReason));
  return 0;
}
