#pragma once

// The pure parsing of what a TCP transport peer sends besides messages: the
// greeting (Hello) each connection opens with, the acceptor's replies to it,
// the address a rank publishes in the store, and the payload of an abort
// notice. Kept apart from the sockets so that it can be unit-tested and
// fuzzed (tests/fuzz/fuzz_tcp_wire.cc) on arbitrary bytes.
//
// Setting up one connection (tcp_handshake.h runs it):
//   connector -> acceptor : Hello (names both ranks and both identities)
//   acceptor  -> connector : Refuse{reason} | Accept{} | Challenge{server nonce}
// and, after a Challenge (the job has a token, common/auth.h):
//   connector -> acceptor : client nonce, client proof
//   acceptor  -> connector : Refuse{reason} | Accept{server proof}

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/auth.h"

namespace tdist::transport::tcp {

/// The magic of the greeting of builds before identities and authentication
/// (a 20-byte greeting, wire version 1): recognised only to be refused by name.
inline constexpr uint32_t kHelloMagicV1 = 0x74647374;  // "tdst"
inline constexpr uint32_t kHelloMagic = 0x74647332;    // "tds2"
/// 3: a pair whose accepting rank listens on several interfaces stripes
/// messages from 64 KiB on (tcp_transport.h), where version 2 striped from
/// 1 MiB: the two would frame such messages differently. 4: a rank that
/// waits long in a call says so to its peers (a header of its own tag,
/// TcpTransport::announce_waiting), which version 3 would take for a
/// message no receive ever takes.
inline constexpr uint32_t kWireVersion = 4;

/// A rank's identity for one connect: fresh random bytes it publishes with
/// its address, so that a connection names the generation of the group it
/// belongs to (a rebuilt group publishes new ones).
using Identity = std::array<uint8_t, 32>;

/// Hello::flags: the connector holds the job's token and will authenticate
/// (and demands that the acceptor does).
inline constexpr uint32_t kHelloAuth = 1;

/// The first bytes on every connection, from the connecting (higher) rank,
/// in host byte order (peers share the architecture).
struct Hello {
  uint32_t magic;
  uint32_t version;
  uint32_t rank;         // the connector's
  uint32_t size;         // the group's
  uint32_t peer;         // the rank it means to reach
  uint32_t connection;   // which of the pair's connections this is
  uint32_t connections;  // how many the pair has
  uint32_t flags;        // kHelloAuth
  Identity from;         // the connector's identity
  Identity to;           // the acceptor's identity, as the connector read it from the store
};
static_assert(sizeof(Hello) == 96, "the greeting's layout is part of the wire format");

/// Whether a greeting received by `rank` of a group of `size` can be from a
/// peer of this group, judged on the greeting alone: a true answer
/// guarantees rank < hello.rank < size and hello.connection <
/// hello.connections <= kMaxSocketsPerPeer, so both may index the accept
/// table. Whether the slot is free is the caller's to check.
bool hello_plausible(const Hello& hello, int rank, int size);

enum class GreetingStatus { kIncomplete, kValid, kInvalid };
struct GreetingCheck {
  GreetingStatus status = GreetingStatus::kIncomplete;
  std::string reason;  // kInvalid: why, for the warning and the refusal
};

/// Judges the first `size` bytes a connection sent to `rank` of a group of
/// `group_size`: kIncomplete while nothing is wrong yet but the greeting is
/// not all there; kInvalid as soon as the bytes cannot be a greeting of this
/// build for this rank (not tdist, an older or newer wire version, another
/// group size, a rank that does not connect to this one, bad counts);
/// kValid with *out filled once the whole greeting is there and plausible.
/// Identities are the caller's to check.
GreetingCheck check_greeting(const uint8_t* data, size_t size, int rank, int group_size, Hello* out);

/// What an acceptor sends back: a 16-byte header and `length` bytes.
inline constexpr uint32_t kReplyMagic = 0x74647352;  // "tdsR"
enum class ReplyKind : uint32_t { kAccept = 1, kChallenge = 2, kRefuse = 3 };
struct ReplyHeader {
  uint32_t magic;
  uint32_t kind;
  uint32_t length;
  uint32_t reserved;
};
static_assert(sizeof(ReplyHeader) == 16, "the reply's layout is part of the wire format");
/// Longest reason a refusal carries.
inline constexpr size_t kMaxRefusal = 1024;

/// nullopt if the header is one an acceptor of this build sends (an Accept
/// of 0 or auth::kProofBytes bytes, a Challenge of auth::kNonceBytes, a
/// Refuse of at most kMaxRefusal), else why not.
std::optional<std::string> check_reply_header(const ReplyHeader& header);
/// A reply's bytes: header and body (a refusal's reason cut to kMaxRefusal).
std::string encode_reply(ReplyKind kind, std::string_view body);

/// The context a connection's proofs are bound to (auth::client_proof): both
/// ranks, both identities, the group size and the connection, so a proof
/// fits one connection of one generation of one group and nothing else.
std::string handshake_context(const Hello& hello);

/// Lower-case hex of an identity, and back (nullopt unless 64 hex digits).
std::string identity_hex(const Identity& id);
std::optional<Identity> parse_identity(std::string_view hex);

/// What a rank publishes under "tcp/addr/<rank>": "<identity hex> <host:port,...>".
std::string encode_advertisement(const Identity& id, std::string_view addresses);
struct Advertisement {
  Identity id;
  std::string addresses;  // "host:port,host:port"
};
/// nullopt unless the text is an identity, one space and a non-empty rest.
std::optional<Advertisement> parse_advertisement(std::string_view text);

/// Longest reason an abort notice carries; a notice's payload is one kind
/// byte and the reason.
inline constexpr size_t kMaxAbortReason = 4096;

/// What an abort notice says the sender's error was; peers raise the same kind.
enum class AbortKind : uint8_t { kNetwork = 0, kTimeout = 1, kBackend = 2 };

struct AbortNotice {
  AbortKind kind = AbortKind::kNetwork;
  std::string reason;
};

/// The payload of an abort notice: the kind byte and the reason, cut to
/// kMaxAbortReason bytes.
std::string encode_abort_payload(AbortKind kind, std::string_view reason);
/// Reads a notice's payload: an empty payload or an unknown kind byte means a
/// network failure (what a peer's disconnect would say).
AbortNotice decode_abort_payload(const uint8_t* data, size_t size);
/// How many payload bytes of a notice (abort or refusal) to read, given the
/// size its header announces: a size beyond any notice's is not ours to
/// trust, and the notice is read as empty.
uint64_t notice_payload_size(uint64_t announced);

}  // namespace tdist::transport::tcp
