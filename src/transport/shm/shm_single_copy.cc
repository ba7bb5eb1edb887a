#include "transport/shm/shm_single_copy.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/error_text.h"
#include "common/peer_memory.h"
#include "tdist/errors.h"
#include "tdist/logging.h"
#include "transport/shm/shm_group.h"

namespace tdist::transport::shm {

namespace {

// A transfer that stopped (common/peer_memory.h), as the error a group's
// call raises.
[[noreturn]] void raise_peer_failure(bool write, pid_t pid, int peer, size_t n,
                                     const tdist::detail::PeerMemoryFailure& failure) {
  const char* call = write ? "process_vm_writev" : "process_vm_readv";
  if (failure.error == ESRCH) {
    throw DistNetworkError("shared memory: rank " + std::to_string(peer) + " (pid " + std::to_string(pid) +
                           ") died: its memory is gone (" + call + ": no such process)");
  }
  throw DistBackendError(
      "shared memory: " + std::string(write ? "writing " : "reading ") + std::to_string(n) + " bytes " +
      (write ? "to" : "from") + " rank " + std::to_string(peer) + " (pid " + std::to_string(pid) + ") with " +
      call + " failed after " + std::to_string(failure.done) + " bytes: " + errno_text(failure.error));
}

bool measure_kernel_copy_is_slow() {
  // Blocks of 256 KiB, as the windows' mid sizes; the best of a few runs of
  // each, so that a preemption does not decide. 2026-11-26, AMD EPYC (Zen
  // 4) VM: 0.20-0.28 (process_vm_readv 8-14 GB/s, memcpy 31-56 GB/s, blocks
  // of 64 KiB to 4 MiB), and single copy lost there (below). On the Xeon VM
  // of 2026-11-25, where it won, the 2-rank 1 MiB all_reduce moved 1 MiB
  // per rank through the kernel in about 50 us, over 20 GB/s.
  constexpr size_t kBytes = size_t{256} << 10;
  constexpr int kRuns = 5;
  std::vector<uint8_t> from(kBytes, 1), to(kBytes, 2);
  using Clock = std::chrono::steady_clock;
  auto kernel = Clock::duration::max();
  auto user = Clock::duration::max();
  // The two alternate, so that a clock that speeds up favours neither.
  for (int i = 0; i < kRuns; ++i) {
    iovec here{to.data(), kBytes};
    iovec there{from.data(), kBytes};
    auto start = Clock::now();
    if (process_vm_readv(getpid(), &here, 1, &there, 1, 0) != static_cast<ssize_t>(kBytes)) return false;
    kernel = std::min(kernel, Clock::now() - start);
    start = Clock::now();
    std::memcpy(to.data(), from.data(), kBytes);
    asm volatile("" : : "r"(to.data()) : "memory");  // the copy is not dead
    user = std::min(user, Clock::now() - start);
  }
  const bool slow = kernel.count() * 2 > user.count() * 5;  // under 40% of memcpy's rate
  TDIST_LOG(DEBUG) << "shared memory: the kernel's copy of 256 KiB took "
                   << std::chrono::duration<double, std::micro>(kernel).count() << " us, memcpy "
                   << std::chrono::duration<double, std::micro>(user).count()
                   << " us: " << (slow ? "slow" : "not slow") << " (single copy's windows narrow when slow)";
  return slow;
}

}  // namespace

void read_peer_memory(pid_t pid, int peer, void* local, const void* remote, size_t n) {
  if (auto failure = tdist::detail::read_peer(pid, local, remote, n))
    raise_peer_failure(false, pid, peer, n, *failure);
}

void write_peer_memory(pid_t pid, int peer, void* remote, const void* local, size_t n) {
  if (auto failure = tdist::detail::write_peer(pid, remote, local, n))
    raise_peer_failure(true, pid, peer, n, *failure);
}

bool can_access_peer_memory(pid_t pid, void* remote, uint64_t expected) {
  uint64_t value = 0;
  iovec mine{&value, sizeof(value)};
  iovec theirs{remote, sizeof(value)};
  if (process_vm_readv(pid, &mine, 1, &theirs, 1, 0) != static_cast<ssize_t>(sizeof(value)) ||
      value != expected)
    return false;
  // Writing needs the same permission, but a seccomp filter may allow one
  // system call and not the other: write the same value back.
  return process_vm_writev(pid, &mine, 1, &theirs, 1, 0) == static_cast<ssize_t>(sizeof(value));
}

bool kernel_copy_is_slow() {
  if (auto v = env_int("TDIST_SHM_KERNEL_COPY_SLOW", 0, 1)) return *v == 1;
  static const bool measured = measure_kernel_copy_is_slow();
  return measured;
}

bool single_copy_allowed() {
  auto v = env_int("TDIST_SHM_SINGLE_COPY", 0, 1);
  return !v || *v == 1;
}

namespace {

using Window = SingleCopyWindow;
constexpr Window kNever{SIZE_MAX, 0};

// Block sizes that copy directly, measured against the shared buffers
// (2026-11-25, 2 vCPUs, tdist-bench, 200 iterations).
// Ranks with a core each: 2-rank broadcast 16 KiB 4.2 -> 1.1 us, 256 KiB
// 13 -> 8.6 us, but 4 MiB 309 -> 390 us; all_gather and all_to_all faster
// from 8 KiB blocks to 8 MiB ones (16 MiB: 1.8 -> 1.35 ms). Oversubscribed
// (4 ranks on 2 cores), the readers' "copied" handshake costs a wake-up
// each: broadcast and all_gather were slower at every size; all_to_all
// faster from 64 KiB blocks (256 KiB: 41 -> 25 us) to 4 MiB ones.
// Broadcast with the root writing part of every copy (kShared), 2 ranks,
// against the buffers: 64 KiB 3.3 -> 2.8 us, 1 MiB 47-74 -> 17 us, 64 MiB
// 5.2 -> 3.5 ms; oversubscribed it lost from 1 MiB (4 ranks, 64 MiB: 10 ->
// 17 ms). all_reduce read, reduced and written back by each piece's owner
// (kReduce), 2 ranks: 64 KiB 8.5 -> 7.8 us, 1 MiB 105 -> 59 us, 32 MiB 4.3
// -> 3.3 ms, but 64 MiB 9.5 -> 10.0 ms; oversubscribed slower from 256 KiB
// (4 ranks, 64 MiB: 23 -> 28 ms). gather with every rank writing its block
// into the root's output, within kGather's window (measured for reading),
// 2 ranks: 64 KiB 2.5 -> 2.2 us, 1 MiB 42-53 -> 17 us, 16 MiB 1.43 -> 0.88
// ms. (2026-11-25.)
Window default_window(SingleCopyShape shape, bool oversubscribed) {
  constexpr size_t KiB = 1024;
  constexpr size_t MiB = 1024 * KiB;
  switch (shape) {
    case SingleCopyShape::kOneSource:
      return oversubscribed ? kNever : Window{16 * KiB, 1 * MiB};
    case SingleCopyShape::kShared:
      return oversubscribed ? kNever : Window{16 * KiB, SIZE_MAX};
    case SingleCopyShape::kReduce:
      return oversubscribed ? kNever : Window{32 * KiB, 32 * MiB};
    case SingleCopyShape::kGather:
      return oversubscribed ? kNever : Window{8 * KiB, 8 * MiB};
    case SingleCopyShape::kAllToAll:
      return oversubscribed ? Window{64 * KiB, 4 * MiB} : Window{8 * KiB, 8 * MiB};
  }
  return kNever;
}

// Where the kernel's copy is slow (kernel_copy_is_slow), measured on the
// Zen 4 VM of 2026-11-26 against the buffers. all_reduce and reduce by
// single copy took twice as long from 1 MiB (2 ranks, 1 MiB 110-141 ->
// 52-64 us, 4 MiB 496-528 -> 205-266 us, 16 MiB 3.1-3.2 -> 1.6 ms) and the
// same up to 256 KiB, so they never use it. all_gather and all_to_all, 2
// ranks, gained only for blocks of 32-128 KiB (medians of five alternating
// runs of 1000 calls; all_gather, then all_to_all, the buffers' time first:
// blocks of 8 KiB 1.5 and 1.7 against 2.9 and 3.0 us, 16 KiB 2.9 and 3.0
// against 3.6 and 3.7, 32 KiB 6.0 and 5.8 against 5.2 and 5.3, 128 KiB
// 22.2 and 18.4 against 14.7 and 17.5, 256 KiB 26.0 and 22.1 against 29.5
// and 29.4; all_to_all still copies directly every block up to a buffer
// section once the largest reaches the window, see its `direct`); 4 ranks
// on the 2 cores, all_to_all lost at every block size (blocks of 64 KiB 33
// against 57 us, 256 KiB 104 against 154 us). Broadcast gained (1 MiB 40
// against 101 us) but for a ring of slots (from kDefaultRingBytes, 1 MiB,
// algorithms/shm/shm_move.cc), about as fast at 1 MiB (42-48 against 41-46
// us) and faster from 2 MiB (67 against 81 us; 64 MiB 3.2 against 6.1
// ms). TDIST_SHM_RING_BYTES does not move this limit.
Window narrowed_for_slow_kernel_copy(SingleCopyShape shape, Window window, bool oversubscribed) {
  constexpr size_t KiB = 1024;
  switch (shape) {
    case SingleCopyShape::kReduce:
      return kNever;
    case SingleCopyShape::kShared:
      return Window{window.min, std::min(window.max, kDefaultRingBytes - 1)};
    case SingleCopyShape::kGather:
    case SingleCopyShape::kAllToAll:
      if (oversubscribed) return kNever;
      return Window{std::max(window.min, 32 * KiB), std::min(window.max, 128 * KiB)};
    default:
      return window;
  }
}

}  // namespace

SingleCopyWindow SingleCopySettings::window(SingleCopyShape shape) const {
  if (!enabled) return kNever;
  if (min_bytes || max_bytes) return Window{min_bytes.value_or(0), max_bytes.value_or(SIZE_MAX)};
  const Window window = default_window(shape, oversubscribed);
  return slow_kernel_copy ? narrowed_for_slow_kernel_copy(shape, window, oversubscribed) : window;
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
