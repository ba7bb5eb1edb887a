// Fuzzes what the TCP transport reads from a peer besides messages
// (src/transport/tcp/tcp_wire.h). The input is cut into:
//    2 bytes  the receiving rank and the group size,
//    8 bytes  the payload size an abort notice's header announces,
//    1 byte   L, how many of the next bytes a connection sent (mod 97),
//   L bytes   the start of a greeting as it comes off the socket,
//   16 bytes  an acceptor's reply header (if there are that many),
//   the rest  an abort notice's payload, and the text of an advertisement.
// Asserts: a greeting is judged valid only whole and plausible (so it
// indexes the accept table safely: rank < its rank < size, connection <
// connections <= the maximum), incomplete only while its magic and version
// are still this build's, and a verdict on a prefix never changes from
// invalid; a reply header passes only with the size of its kind; an
// advertisement that parses re-encodes to one that parses the same; the
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

namespace {

void greeting(const uint8_t* data, size_t size, int rank, int group) {
  tcp::Hello hello{};
  const tcp::GreetingCheck check = tcp::check_greeting(data, size, rank, group, &hello);
  uint32_t magic = 0;
  uint32_t version = 0;
  if (size >= 4) std::memcpy(&magic, data, 4);
  if (size >= 8) std::memcpy(&version, data + 4, 4);
  switch (check.status) {
    case tcp::GreetingStatus::kValid:
      FUZZ_CHECK(size >= sizeof(tcp::Hello));
      FUZZ_CHECK(std::memcmp(&hello, data, sizeof(hello)) == 0);
      FUZZ_CHECK(static_cast<int>(hello.rank) > rank && static_cast<int>(hello.rank) < group);
      FUZZ_CHECK(hello.peer == static_cast<uint32_t>(rank));
      FUZZ_CHECK(hello.connection < hello.connections &&
                 hello.connections <= static_cast<uint32_t>(tdist::transport::kMaxSocketsPerPeer));
      break;
    case tcp::GreetingStatus::kIncomplete:
      FUZZ_CHECK(size < sizeof(tcp::Hello));
      FUZZ_CHECK(size < 4 || magic == tcp::kHelloMagic);
      FUZZ_CHECK(size < 8 || version == tcp::kWireVersion);
      break;
    case tcp::GreetingStatus::kInvalid:
      FUZZ_CHECK(!check.reason.empty());
      break;
  }
  // More bytes never turn a refusal into anything else.
  for (size_t prefix : {size_t{4}, size_t{8}}) {
    if (prefix >= size) continue;
    if (tcp::check_greeting(data, prefix, rank, group, &hello).status == tcp::GreetingStatus::kInvalid)
      FUZZ_CHECK(check.status == tcp::GreetingStatus::kInvalid);
  }
}

void reply(const uint8_t* data) {
  tcp::ReplyHeader header{};
  std::memcpy(&header, data, sizeof(header));
  if (tcp::check_reply_header(header)) return;
  const auto kind = static_cast<tcp::ReplyKind>(header.kind);
  FUZZ_CHECK(header.magic == tcp::kReplyMagic);
  FUZZ_CHECK((kind == tcp::ReplyKind::kAccept &&
              (header.length == 0 || header.length == tdist::auth::kProofBytes)) ||
             (kind == tcp::ReplyKind::kChallenge && header.length == tdist::auth::kNonceBytes) ||
             (kind == tcp::ReplyKind::kRefuse && header.length <= tcp::kMaxRefusal));
}

void advertisement(std::string_view text) {
  const auto ad = tcp::parse_advertisement(text);
  if (!ad) return;
  FUZZ_CHECK(!ad->addresses.empty());
  const auto again = tcp::parse_advertisement(tcp::encode_advertisement(ad->id, ad->addresses));
  FUZZ_CHECK(again && again->id == ad->id && again->addresses == ad->addresses);
}

void abort_notice(const uint8_t* data, size_t size, uint64_t announced) {
  const uint64_t trusted = tcp::notice_payload_size(announced);
  FUZZ_CHECK(trusted == announced || trusted == 0);
  FUZZ_CHECK(trusted <= tcp::kMaxAbortReason + 1);
  const tcp::AbortNotice notice = tcp::decode_abort_payload(data, size);
  FUZZ_CHECK(notice.reason.size() == (size == 0 ? 0 : size - 1));
  if (size > 0 && data[0] <= 2 && size <= tcp::kMaxAbortReason + 1) {
    FUZZ_CHECK(tcp::encode_abort_payload(notice.kind, notice.reason) ==
               std::string_view(reinterpret_cast<const char*>(data), size));
  }
  const std::string encoded = tcp::encode_abort_payload(notice.kind, notice.reason);
  FUZZ_CHECK(encoded.size() == 1 + std::min(notice.reason.size(), tcp::kMaxAbortReason));
  const tcp::AbortNotice again =
      tcp::decode_abort_payload(reinterpret_cast<const uint8_t*>(encoded.data()), encoded.size());
  FUZZ_CHECK(again.kind == notice.kind);
  FUZZ_CHECK(again.reason == notice.reason.substr(0, tcp::kMaxAbortReason));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 11) return 0;
  const int group = 1 + data[0] % 64;
  const int rank = data[1] % group;
  uint64_t announced = 0;
  std::memcpy(&announced, data + 2, 8);
  const size_t length = std::min<size_t>(data[10] % (sizeof(tcp::Hello) + 1), size - 11);
  // A copy of exactly the greeting's bytes, so that reading past them is
  // caught by the sanitizer.
  std::string bytes(reinterpret_cast<const char*>(data) + 11, length);
  greeting(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), rank, group);
  size_t at = 11 + length;
  if (size - at >= sizeof(tcp::ReplyHeader)) {
    reply(data + at);
    at += sizeof(tcp::ReplyHeader);
  }
  abort_notice(data + at, size - at, announced);
  advertisement(std::string_view(reinterpret_cast<const char*>(data) + at, size - at));
  return 0;
}
