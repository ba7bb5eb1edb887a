#include "transport/shm/shm_single_copy.h"

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
  // each, so that a preemption does not decide. Where single copy lost to
  // the buffers the ratio was 0.20-0.28 (docs/tuning.md).
  constexpr size_t kBytes = size_t{256} << 10;
  constexpr int kRuns = 5;
  std::vector<uint8_t> from(kBytes, 1), to(kBytes, 2);
  using Clock = std::chrono::steady_clock;
  auto kernel = Clock::duration::max();
  auto user = Clock::duration::max();
  // The two alternate, so that a clock that speeds up favours neither.
  for (int i = 0; i < kRuns; ++i) {
    auto start = Clock::now();
    if (tdist::detail::read_peer(getpid(), to.data(), from.data(), kBytes)) return false;
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
  if (tdist::detail::read_peer(pid, &value, remote, sizeof(value)) || value != expected) return false;
  // Writing needs the same permission, but a seccomp filter may allow one
  // system call and not the other: write the same value back.
  return !tdist::detail::write_peer(pid, remote, &value, sizeof(value));
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

void SingleCopySettings::read_window_overrides() {
  auto bytes = [](const char* name) -> std::optional<size_t> {
    auto v = env_int(name, 0, int64_t{1} << 50);
    return v ? std::optional<size_t>(static_cast<size_t>(*v)) : std::nullopt;
  };
  min_bytes = bytes("TDIST_SHM_SINGLE_COPY_MIN_BYTES");
  max_bytes = bytes("TDIST_SHM_SINGLE_COPY_MAX_BYTES");
}

}  // namespace tdist::transport::shm
