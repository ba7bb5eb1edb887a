#pragma once

// Single copy between the processes of a group: a rank copies straight out
// of a peer's memory with process_vm_readv (Linux cross-memory attach,
// CMA), one copy where the shared buffers take two (the writer's copy in,
// the reader's copy out). Some ops also write into their peers' memory
// with process_vm_writev: broadcast's root copies part of the message while
// the readers copy the rest, all_reduce and reduce write each reduced piece
// into the peers' tensors, and gather's ranks write their blocks into the
// root's output. It needs ptrace permission over the peer (same
// user, no Yama restriction, no seccomp filter: often blocked in
// containers), so a group probes it when it connects and uses it only if
// every rank can read and write every other; the shared buffers stay the
// fallback.
//
// Which blocks go this way is the collectives' choice
// (algorithms/tuning/tuning.h, single_copy_window).

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace tdist::transport::shm {

/// Copies `n` bytes at `remote` in process `pid` (group rank `peer`) to
/// `local`. Raises DistNetworkError if the peer's process is gone, else
/// DistBackendError naming the peer, the size and the system's error.
void read_peer_memory(pid_t pid, int peer, void* local, const void* remote, size_t n);

/// Copies `n` bytes at `local` to `remote` in process `pid`
/// (process_vm_writev); errors as read_peer_memory.
void write_peer_memory(pid_t pid, int peer, void* remote, const void* local, size_t n);

/// True if this process can read the 8 bytes at `remote` in `pid`, they
/// hold `expected`, and it can write them (it writes the same value back).
bool can_access_peer_memory(pid_t pid, void* remote, uint64_t expected);

/// Whether single copy may be used at all: TDIST_SHM_SINGLE_COPY=0
/// forbids it; unset or 1 lets the probe decide.
bool single_copy_allowed();

/// Whether the kernel's copy between processes runs at less than 40% of
/// memcpy's rate on this machine (blocks of 256 KiB in the caches; the
/// kernel pins every page of the other process before it copies it).
/// Measured once per process, on the first call that needs it, with
/// process_vm_readv on this process's own memory (well under a
/// millisecond); false if that fails. TDIST_SHM_KERNEL_COPY_SLOW=0|1, read
/// at every call, replaces the measurement.
bool kernel_copy_is_slow();

/// What a group agreed on at connect (ShmGroup::connect), so that every rank
/// takes the same path in every call: single copy's windows
/// (algorithms/tuning/tuning.h, single_copy_window) must not depend on one
/// rank's own view (its CPU affinity, its environment).
struct SingleCopySettings {
  /// Every rank can read and write every other rank's memory and allows it.
  bool enabled = false;
  /// Some rank of the group may run on fewer cores than the group has ranks.
  bool oversubscribed = false;
  /// Rank 0's TDIST_SHM_SINGLE_COPY_MIN_BYTES and _MAX_BYTES: when either
  /// is set they replace the measured windows for every shape.
  std::optional<size_t> min_bytes;
  std::optional<size_t> max_bytes;
  /// Rank 0's kernel_copy_is_slow(): narrower windows.
  bool slow_kernel_copy = false;

  /// Sets min_bytes and max_bytes from this process's environment.
  void read_window_overrides();
};

}  // namespace tdist::transport::shm
