#include "common/peer_memory.h"

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

namespace tdist::detail {
namespace {

std::optional<PeerMemoryFailure> move(bool write, pid_t pid, void* local, void* remote, size_t n,
                                      size_t max_piece) {
  auto* mine = static_cast<uint8_t*>(local);
  auto* theirs = static_cast<uint8_t*>(remote);
  size_t done = 0;
  while (done < n) {
    const size_t piece = std::min(n - done, std::max<size_t>(max_piece, 1));
    iovec here{mine + done, piece};
    iovec there{theirs + done, piece};
    const ssize_t moved = write ? process_vm_writev(pid, &here, 1, &there, 1, 0)
                                : process_vm_readv(pid, &here, 1, &there, 1, 0);
    if (moved <= 0) return PeerMemoryFailure{moved < 0 ? errno : EFAULT, done};
    done += static_cast<size_t>(moved);
  }
  return std::nullopt;
}

}  // namespace

std::optional<PeerMemoryFailure> read_peer(pid_t pid, void* local, const void* remote, size_t n,
                                           size_t max_piece) {
  // process_vm_readv takes the remote side as a non-const iovec; nothing
  // is written there.
  return move(false, pid, local, const_cast<void*>(remote), n, max_piece);
}

std::optional<PeerMemoryFailure> write_peer(pid_t pid, void* remote, const void* local, size_t n,
                                            size_t max_piece) {
  return move(true, pid, const_cast<void*>(local), remote, n, max_piece);
}

}  // namespace tdist::detail
