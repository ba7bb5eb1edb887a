#include "transport/shm/shm_single_copy.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>

#include "common/env.h"
#include "common/error_text.h"
#include "tdist/errors.h"

namespace tdist::transport::shm {

void read_peer_memory(pid_t pid, int peer, void* local, const void* remote, size_t n) {
  auto* to = static_cast<uint8_t*>(local);
  auto* from = static_cast<uint8_t*>(const_cast<void*>(remote));
  size_t done = 0;
  // The kernel may copy less than asked (it stops at the first page it
  // cannot pin): go on from there; no progress at all is an error.
  while (done < n) {
    iovec mine{to + done, n - done};
    iovec theirs{from + done, n - done};
    ssize_t got = process_vm_readv(pid, &mine, 1, &theirs, 1, 0);
    if (got <= 0) {
      int error = got < 0 ? errno : EFAULT;
      if (error == ESRCH) {
        throw DistNetworkError("shared memory: rank " + std::to_string(peer) + " (pid " +
                               std::to_string(pid) +
                               ") died: its memory is gone (process_vm_readv: no such process)");
      }
      throw DistBackendError("shared memory: reading " + std::to_string(n) + " bytes from rank " +
                             std::to_string(peer) + " (pid " + std::to_string(pid) +
                             ") with process_vm_readv failed: " + errno_text(error));
    }
    done += static_cast<size_t>(got);
  }
}

bool can_read_peer_memory(pid_t pid, const void* remote, uint64_t expected) {
  uint64_t value = 0;
  iovec mine{&value, sizeof(value)};
  iovec theirs{const_cast<void*>(remote), sizeof(value)};
  return process_vm_readv(pid, &mine, 1, &theirs, 1, 0) == static_cast<ssize_t>(sizeof(value)) &&
         value == expected;
}

bool single_copy_allowed() {
  auto v = env_int("TDIST_SHM_SINGLE_COPY", 0, 1);
  return !v || *v == 1;
}

namespace {

using Window = SingleCopyWindow;
constexpr Window kNever{SIZE_MAX, 0};

// Block sizes that copy directly, measured against the shared buffers
// (2026-11-25, 2 vCPUs, tdist-bench, 200 iterations; docs/performance.md).
// Ranks with a core each: 2-rank broadcast 16 KiB 4.2 -> 1.1 us, 256 KiB
// 13 -> 8.6 us, but 4 MiB 309 -> 390 us; all_gather and all_to_all faster
// from 8 KiB blocks to 8 MiB ones (16 MiB: 1.8 -> 1.35 ms). Oversubscribed
// (4 ranks on 2 cores), the readers' "copied" handshake costs a wake-up
// each: broadcast and all_gather were slower at every size; all_to_all
// faster from 64 KiB blocks (256 KiB: 41 -> 25 us) to 4 MiB ones.
Window default_window(SingleCopyShape shape, bool oversubscribed) {
  constexpr size_t KiB = 1024;
  constexpr size_t MiB = 1024 * KiB;
  switch (shape) {
    case SingleCopyShape::kOneSource:
      return oversubscribed ? kNever : Window{16 * KiB, 1 * MiB};
    case SingleCopyShape::kGather:
      return oversubscribed ? kNever : Window{8 * KiB, 8 * MiB};
    case SingleCopyShape::kAllToAll:
      return oversubscribed ? Window{64 * KiB, 4 * MiB} : Window{8 * KiB, 8 * MiB};
  }
  return kNever;
}

}  // namespace

SingleCopyWindow SingleCopySettings::window(SingleCopyShape shape) const {
  if (!enabled) return kNever;
  if (min_bytes || max_bytes) return Window{min_bytes.value_or(0), max_bytes.value_or(SIZE_MAX)};
  return default_window(shape, oversubscribed);
}

void SingleCopySettings::read_window_overrides() {
  auto bytes = [](const char* name) -> std::optional<size_t> {
    auto v = env_int(name, 0, int64_t{1} << 50);
    return v ? std::optional<size_t>(static_cast<size_t>(*v)) : std::nullopt;
  };
  min_bytes = bytes("TDIST_SHM_SINGLE_COPY_MIN_BYTES");
  max_bytes = bytes("TDIST_SHM_SINGLE_COPY_MAX_BYTES");
}

}  // namespace tdist::transport::shm
