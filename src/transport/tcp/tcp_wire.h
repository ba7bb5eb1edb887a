#pragma once

// The pure parsing of what a TCP transport peer sends besides messages: the
// greeting (Hello) each connection opens with, and the payload of an abort
// notice. Kept apart from the sockets so that it can be unit-tested and
// fuzzed (tests/fuzz/fuzz_tcp_wire.cc) on arbitrary bytes.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tdist::transport::tcp {

inline constexpr uint32_t kHelloMagic = 0x74647374;  // "tdst"

/// The first bytes on every connection, from the connecting (higher) rank,
/// in host byte order (peers share the architecture).
struct Hello {
  uint32_t magic;
  uint32_t rank;
  uint32_t size;
  uint32_t connection;   // which of the pair's connections this is
  uint32_t connections;  // how many the pair has
};
static_assert(sizeof(Hello) == 20, "the greeting's layout is part of the wire format");

/// Whether a greeting received by `rank` of a group of `size` can be from a
/// peer of this group, judged on the greeting alone: a true answer
/// guarantees rank < hello.rank < size and hello.connection <
/// hello.connections <= kMaxSocketsPerPeer, so both may index the accept
/// table. Whether the slot is free is the caller's to check.
bool hello_plausible(const Hello& hello, int rank, int size);

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
