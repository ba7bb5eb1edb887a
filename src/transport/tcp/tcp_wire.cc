#include "transport/tcp/tcp_wire.h"

#include "transport/tcp/tcp_transport.h"

namespace tdist::transport::tcp {

bool hello_plausible(const Hello& hello, int rank, int size) {
  // The casts and their order are those of the accept loop this came from:
  // a rank beyond the group never reaches the table.
  return hello.magic == kHelloMagic && static_cast<int>(hello.size) == size &&
         hello.rank < static_cast<uint32_t>(size) && static_cast<int>(hello.rank) > rank &&
         hello.connections != 0 && hello.connections <= static_cast<uint32_t>(kMaxSocketsPerPeer) &&
         hello.connection < hello.connections;
}

std::string encode_abort_payload(AbortKind kind, std::string_view reason) {
  std::string payload(1, static_cast<char>(kind));
  payload += reason.substr(0, kMaxAbortReason);
  return payload;
}

AbortNotice decode_abort_payload(const uint8_t* data, size_t size) {
  AbortNotice notice;
  if (size == 0) return notice;
  if (data[0] == static_cast<uint8_t>(AbortKind::kTimeout)) notice.kind = AbortKind::kTimeout;
  if (data[0] == static_cast<uint8_t>(AbortKind::kBackend)) notice.kind = AbortKind::kBackend;
  notice.reason.assign(reinterpret_cast<const char*>(data) + 1, size - 1);
  return notice;
}

uint64_t notice_payload_size(uint64_t announced) {
  return announced > kMaxAbortReason + 1 ? 0 : announced;
}

}  // namespace tdist::transport::tcp
