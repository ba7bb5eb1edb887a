#pragma once

// Flags in shared memory (the MPICH release/gather and DeepSpeed designs, see
// docs/design.md): every flag is a 64-bit sequence number on its own cache
// line that only grows, written by one rank with release order and read by
// the others with acquire order, so it never needs a reset and has no ABA
// problem. A flag line also carries up to kPayloadBytes of data, so a tiny
// message arrives with the flag in one cache-line transfer (Open MPI xhc).
//
// Waiting spins a little (cheap when every rank has a core), then yields
// (ranks may outnumber cores: 4 ranks on 2 cores), then sleeps on a futex in
// short slices (at once when a yield shows that a computation shares the
// core: kYieldGaveCoreAway), checking the deadline and the failure callback
// between slices so a dead or aborted peer is an error, never a hang.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "common/function_ref.h"

namespace tdist::transport::shm {

inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kPayloadBytes = 48;

struct alignas(kCacheLine) FlagLine {
  std::atomic<uint64_t> seq;
  /// Ranks sleeping on this line's futex; the writer wakes them only if
  /// nonzero, so a publish without sleepers costs no system call.
  std::atomic<uint32_t> sleepers;
  /// The stamp of the call that last published this line (stamp_call in
  /// common/call_signature.h; 0: none), stored before `seq`: a reader
  /// compares it with its own call's before it uses what the line says.
  std::atomic<uint32_t> stamp;
  uint8_t payload[kPayloadBytes];
};
static_assert(sizeof(FlagLine) == kCacheLine);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);

/// Stores `value` with release order and wakes sleepers.
void publish(FlagLine& line, uint64_t value);

/// How long to spin and yield before sleeping; from whether the ranks that
/// share the host outnumber the CPUs they may run on.
struct WaitPolicy {
  /// Busy polls before yielding...
  int spins = 0;
  int yields = 0;
  /// ... or, if not zero, busy polls until this long has passed since the
  /// 256th (the clock is read every 256 polls, so a wait that ends sooner
  /// never reads it).
  std::chrono::nanoseconds spin_time{0};
  /// The policy for ranks that do or do not outnumber their CPUs, with the
  /// TDIST_SHM_SPINS / TDIST_SHM_YIELDS overrides.
  /// (A group decides that over the union of its ranks' CPUs,
  /// ShmGroup::connect.)
  static WaitPolicy for_oversubscription(bool oversubscribed);
};

/// How long a rank with a core to itself spins before it yields (see
/// WaitPolicy::for_oversubscription).
inline constexpr std::chrono::nanoseconds kSpinTime{44'000};

/// A yield that kept the waiter off its core this long gave the core to
/// another thread (one that returns at once takes about a microsecond); if
/// the flag has not come meanwhile, the waiter sleeps on the futex instead of
/// yielding again (see wait_at_least).
inline constexpr std::chrono::nanoseconds kYieldGaveCoreAway{50'000};

/// What a wait does between sleeps: throws to abandon the wait (a peer died
/// or aborted, the deadline passed). A reference: the check outlives the wait.
using FailureCheck = detail::FunctionRef<void()>;

/// How a wait went (for tests and diagnostics; callers may ignore it).
struct WaitEnd {
  int yields = 0;               // sched_yield calls made
  bool gave_core_away = false;  // a yield showed a computation sharing the core
  bool slept = false;           // it slept on the futex at least once
};

/// Returns once line.seq >= target (acquire). Calls `check` every few
/// milliseconds while waiting; its exception propagates.
WaitEnd wait_at_least(const FlagLine& line, uint64_t target, const WaitPolicy& policy, FailureCheck check);

/// One beat of a spin: tells the CPU the thread is polling (a sibling
/// hyperthread gets the core's resources, and leaving the loop costs no
/// pipeline flush).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// True once line.seq >= target (acquire), without waiting.
inline bool reached(const FlagLine& line, uint64_t target) {
  return line.seq.load(std::memory_order_acquire) >= target;
}

/// Wakes every sleeper of `line` (used when aborting).
void wake_all(FlagLine& line);

/// A line that many ranks bump (a doorbell: "there is news for you"): adds
/// one to its seq and wakes its sleepers, if any.
void ring_bell(FlagLine& line);

/// Sleeps on `line` until its seq is no longer `seen` or `timeout` has
/// passed (or a spurious wake-up): for a thread that has nothing to do until
/// some rank bumps the line, and must look up now and then regardless.
void sleep_while_unchanged(const FlagLine& line, uint64_t seen, std::chrono::nanoseconds timeout);

}  // namespace tdist::transport::shm
