#pragma once

// Direct reads between RPC workers of one host (docs/rpc.md, "Protocol"):
// a tensor of at least direct_min_bytes() bytes goes to a worker that can read
// this process's memory (Linux cross-memory attach, probed at start) as a
// description of where it lies; the receiver copies it with one
// process_vm_readv into the buffer it allocated, where TCP would copy it
// through two socket buffers.
//
// The sender keeps the tensor until the receiver says it has read it (or
// dies, or the agent closes). So that a receiver can never take memory the
// sender has let go of for the tensor's bytes, every offered tensor has a
// hold word in this process that holds a token unique to the offer while
// the tensor is kept and 0 from the moment the sender lets go: the receiver
// reads the bytes, then the word, and uses the bytes only if the word still
// holds the token (the sender clears the word before it frees the tensor).

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "common/peer_memory.h"

namespace tdist::rpc::detail {

/// An offer's hold word and token.
struct Hold {
  uint64_t* word = nullptr;
  uint64_t token = 0;
};

/// A hold word for a new offer: nullopt when every word of the process is
/// taken (the tensor then goes over TCP). Thread-safe.
std::optional<Hold> acquire_hold();
/// Clears the word (from now on a reader refuses what it read) and returns
/// it for reuse. Call it before the tensor may be freed.
void release_hold(const Hold& hold);

/// Hold words in use in this process (for tests).
size_t holds_in_use();

/// The smallest tensor an agent offers for direct reads: `configured`
/// (AgentOptions::direct_read_min_bytes), unless TDIST_RPC_DIRECT_MIN_BYTES
/// says otherwise; 0 (none) when either is 0 or TDIST_SHM_SINGLE_COPY=0.
size_t direct_min_bytes(size_t configured);

/// What a worker publishes so that the others can probe it: its host,
/// process and a word they try to read ("host\npid\naddress\nvalue").
std::string direct_probe_card();
/// True if `card` (another worker's direct_probe_card) is on this host and
/// this process can read that worker's memory.
bool can_read_directly(const std::string& card);
/// The process id in a card.
pid_t card_pid(const std::string& card);

/// Copies `n` bytes at `address` of process `pid` (worker `peer`) into
/// `local`, in pieces of at most `max_piece`, then checks that `hold_word`
/// there still holds `token`. Raises DistNetworkError if the process is
/// gone, DistBackendError if the read fails or the sender let go of the
/// tensor meanwhile.
void read_offer(pid_t pid, const std::string& peer, void* local, size_t n, uint64_t address,
                uint64_t hold_word, uint64_t token, size_t max_piece = tdist::detail::kPeerMemoryPiece);

}  // namespace tdist::rpc::detail
