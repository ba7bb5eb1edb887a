#include "transport/tcp/tcp_wire.h"

#include <cstring>

#include "transport/tcp/tcp_transport.h"

namespace tdist::transport::tcp {
namespace {

std::string hex_bytes(const uint8_t* data, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < size; ++i) {
    out += kDigits[data[i] >> 4];
    out += kDigits[data[i] & 0xf];
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool hello_plausible(const Hello& hello, int rank, int size) {
  // The casts and their order keep a rank beyond the group (or negative as
  // an int) from ever reaching the table.
  return hello.magic == kHelloMagic && hello.version == kWireVersion &&
         static_cast<int>(hello.size) == size && hello.rank < static_cast<uint32_t>(size) &&
         static_cast<int>(hello.rank) > rank && hello.peer == static_cast<uint32_t>(rank) &&
         hello.connections != 0 && hello.connections <= static_cast<uint32_t>(kMaxSocketsPerPeer) &&
         hello.connection < hello.connections && (hello.flags & ~kHelloAuth) == 0;
}

GreetingCheck check_greeting(const uint8_t* data, size_t size, int rank, int group_size, Hello* out) {
  GreetingCheck check;
  // The magic alone tells a foreign client or an older build, before it
  // has sent (or would ever send) a whole greeting of this version.
  if (size < sizeof(uint32_t)) return check;
  uint32_t magic = 0;
  std::memcpy(&magic, data, sizeof(magic));
  check.status = GreetingStatus::kInvalid;
  if (magic == kHelloMagicV1) {
    check.reason =
        "a tdist peer of an older build (wire version 1, before identities and authentication); "
        "every rank must run the same tdist";
    return check;
  }
  if (magic != kHelloMagic) {
    check.reason = "not a tdist greeting (it begins with bytes " + hex_bytes(data, sizeof(magic)) + ")";
    return check;
  }
  if (size < 2 * sizeof(uint32_t)) {
    check.status = GreetingStatus::kIncomplete;
    return check;
  }
  uint32_t version = 0;
  std::memcpy(&version, data + sizeof(magic), sizeof(version));
  if (version != kWireVersion) {
    check.reason = "a tdist peer speaking wire version " + std::to_string(version) + ", this build speaks " +
                   std::to_string(kWireVersion) + "; every rank must run the same tdist";
    return check;
  }
  if (size < sizeof(Hello)) {
    check.status = GreetingStatus::kIncomplete;
    return check;
  }
  Hello hello{};
  std::memcpy(&hello, data, sizeof(hello));
  if (!hello_plausible(hello, rank, group_size)) {
    check.reason = "a greeting that cannot be from a peer of this group (it says rank " +
                   std::to_string(hello.rank) + " of " + std::to_string(hello.size) + " connecting to rank " +
                   std::to_string(hello.peer) + ", connection " + std::to_string(hello.connection) + " of " +
                   std::to_string(hello.connections) + ", flags " + std::to_string(hello.flags) +
                   "; this is rank " + std::to_string(rank) + " of " + std::to_string(group_size) +
                   ", and only higher ranks connect to it)";
    return check;
  }
  check.status = GreetingStatus::kValid;
  *out = hello;
  return check;
}

std::optional<std::string> check_reply_header(const ReplyHeader& header) {
  if (header.magic != kReplyMagic) {
    return "not a tdist reply (it begins with bytes " +
           hex_bytes(reinterpret_cast<const uint8_t*>(&header.magic), sizeof(header.magic)) + ")";
  }
  const auto kind = static_cast<ReplyKind>(header.kind);
  const bool fits =
      (kind == ReplyKind::kAccept && (header.length == 0 || header.length == auth::kProofBytes)) ||
      (kind == ReplyKind::kChallenge && header.length == auth::kNonceBytes) ||
      (kind == ReplyKind::kRefuse && header.length <= kMaxRefusal);
  if (!fits || header.reserved != 0) {
    return "a malformed tdist reply (kind " + std::to_string(header.kind) + ", " +
           std::to_string(header.length) + " bytes)";
  }
  return std::nullopt;
}

std::string encode_reply(ReplyKind kind, std::string_view body) {
  if (kind == ReplyKind::kRefuse) body = body.substr(0, kMaxRefusal);
  const ReplyHeader header{kReplyMagic, static_cast<uint32_t>(kind), static_cast<uint32_t>(body.size()), 0};
  std::string out(reinterpret_cast<const char*>(&header), sizeof(header));
  out += body;
  return out;
}

std::string handshake_context(const Hello& hello) {
  return "transport/" + std::to_string(hello.size) + "/" + std::to_string(hello.peer) + "/" +
         identity_hex(hello.to) + "/" + std::to_string(hello.rank) + "/" + identity_hex(hello.from) + "/" +
         std::to_string(hello.connection) + "/" + std::to_string(hello.connections) + "/" +
         std::to_string(hello.flags);
}

std::string identity_hex(const Identity& id) {
  return hex_bytes(id.data(), id.size());
}

std::optional<Identity> parse_identity(std::string_view hex) {
  Identity id{};
  if (hex.size() != 2 * id.size()) return std::nullopt;
  for (size_t i = 0; i < id.size(); ++i) {
    const int high = hex_digit(hex[2 * i]);
    const int low = hex_digit(hex[2 * i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    id[i] = static_cast<uint8_t>(high * 16 + low);
  }
  return id;
}

std::string encode_advertisement(const Identity& id, std::string_view addresses) {
  return identity_hex(id) + " " + std::string(addresses);
}

std::optional<Advertisement> parse_advertisement(std::string_view text) {
  const size_t space = text.find(' ');
  if (space == std::string_view::npos || space + 1 == text.size()) return std::nullopt;
  auto id = parse_identity(text.substr(0, space));
  if (!id) return std::nullopt;
  return Advertisement{*id, std::string(text.substr(space + 1))};
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
