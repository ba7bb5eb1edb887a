#pragma once

// Copies between this process and another on the same host with
// process_vm_readv / process_vm_writev (Linux cross-memory attach), under
// one rule for short transfers, for every user (shared-memory single copy,
// RPC's direct reads): the kernel may move less than asked (it stops at the
// first page it cannot pin, and at about 2 GiB per call), so a transfer
// goes on from where the last call stopped, in pieces of at most
// kPeerMemoryPiece; a call that moves nothing ends it with the error.

#include <sys/types.h>

#include <cstddef>
#include <optional>

namespace tdist::detail {

/// Bytes one call moves at most (the kernel's own limit is just under 2 GiB).
inline constexpr size_t kPeerMemoryPiece = size_t{1} << 30;

/// Why a transfer stopped: errno of the call that moved nothing (EFAULT if
/// it returned 0), and the bytes moved before it.
struct PeerMemoryFailure {
  int error = 0;
  size_t done = 0;
};

/// Copies `n` bytes at `remote` in process `pid` to `local`, whole, or
/// says where and why it stopped.
std::optional<PeerMemoryFailure> read_peer(pid_t pid, void* local, const void* remote, size_t n,
                                           size_t max_piece = kPeerMemoryPiece);
/// Copies `n` bytes at `local` to `remote` in process `pid`, likewise.
std::optional<PeerMemoryFailure> write_peer(pid_t pid, void* remote, const void* local, size_t n,
                                            size_t max_piece = kPeerMemoryPiece);

}  // namespace tdist::detail
