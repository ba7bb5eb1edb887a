#pragma once

// One shared-memory call on one group (Call): waiting for a peer's flag
// with the call's deadline, comparing signatures, reading and writing a
// peer's memory; and run_guarded, which fails the whole group on any error.

#include <cstring>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/tuning/tuning.h"
#include "common/function_ref.h"
#include "tdist/errors.h"
#include "transport/shm/shm_group.h"
#include "transport/shm/shm_single_copy.h"

namespace tdist::algorithms::shm::detail {

using transport::shm::FlagLine;
using transport::shm::ShmGroup;

/// One call on one group: waits name the op, its sequence number and the
/// peer in their errors.
struct Call {
  const CallContext& ctx;
  ShmGroup& group;
  /// What this call does once it has waited long (algorithms.h).
  mutable LongWait long_wait{};

  int rank() const { return group.rank(); }
  int size() const { return group.size(); }
  uint64_t begin_round();
  /// Eager ops (see ShmGroup::next_eager): begin returns the op's number n,
  /// after making sure every rank is done with what its slots held; end
  /// says this rank is done with n.
  uint64_t begin_eager();
  void end_eager(uint64_t n);
  /// What a flag's numbers count, for the timeout's message: rounds,
  /// eager operations (an eager slot holds op n + 1 once op n is in it), or
  /// how many eager operations a rank has finished (eager_done).
  enum class Counts { kRounds, kEagerOps, kEagerOpsDone };
  /// Waits for `peer`'s `line` to reach `target`; a timeout names `what` we
  /// wait for, the target and how far the peer got.
  void wait(const FlagLine& line, uint64_t target, int peer, const char* what,
            Counts counts = Counts::kRounds) const;
  void wait_arrive(int peer, uint64_t k) const { wait(group.arrive(peer, k), k, peer, "its data"); }
  void wait_reduced(int peer, uint64_t k) const { wait(group.reduced(peer), k, peer, "its reduced piece"); }
  /// Throws if the group was aborted or `peer` (every peer if -1) died.
  void check_failures(int peer) const;
  /// What a wait for `peer` checks now and then: check_failures(failed_peer),
  /// and that `peer`'s call (and any message of another call that reached
  /// this rank) matches this one.
  void check_while_waiting(int failed_peer, int peer) const;
  /// Before this rank uses what `peer` published on `line` in this call:
  /// throws DistBackendError on every rank if the peer's call is not the
  /// same as this one (ShmGroup::begin_call). One compare of the line's
  /// stamp when it matches.
  void verify(int peer, const FlagLine& line) const {
    if (line.stamp.load(std::memory_order_relaxed) != group.stamp() && !ctx.sig.empty())
      check_signature(peer, true);
  }
  /// Compares `peer`'s record of this call, if it has begun it, with ours.
  /// `published`: the peer published a line this call waited for, so it
  /// must have begun this call.
  void check_signature(int peer, bool published) const;
  /// Throws the mismatch of the first call before `end` (as far back as the
  /// records go) that `peer` passed differently, if any.
  void throw_first_difference(int peer, uint64_t end) const;
  /// Throws DistTimeoutError past the deadline, naming `peer`, `what` it
  /// waits for on `line` and how far it got.
  void check_deadline(int peer, const FlagLine& line, uint64_t target, const char* what, Counts counts) const;

  // Single copy (transport/shm/shm_single_copy.h): a rank publishes the
  // address of its data in its arrive line, readers copy from there and
  // say so on their `reduced` line, and the owner of the data returns only
  // once its readers are done.
  /// The block sizes with which a call of `shape` copies directly (empty
  /// when the group cannot).
  SingleCopyWindow single_copy_window(SingleCopyShape shape) const {
    return algorithms::single_copy_window(shape, group.single_copy_settings());
  }
  /// True if a call of `shape` whose blocks are at most `bytes` long copies directly.
  bool single_copy(SingleCopyShape shape, size_t bytes) const {
    return single_copy_window(shape).contains(bytes);
  }
  /// What the group's tuning choices depend on (algorithms/tuning/tuning.h).
  ShmFacts facts() const {
    return ShmFacts{group.buffer_bytes(), group.ring_bytes(), group.single_copy_settings()};
  }
  /// Rank `peer`'s published address, at `offset` in its arrive line of round k.
  const void* address_of(int peer, uint64_t k, size_t offset = 0) const;
  void publish_address(uint64_t k, const void* address, size_t offset = 0);
  /// Copies `n` bytes at `remote` in `peer`'s memory to `local`.
  void read_from(int peer, void* local, const void* remote, size_t n) const;
  /// Copies `n` bytes at `local` to `remote` in `peer`'s memory, in slices,
  /// each bracketed by this rank's `writing` count and started only if the
  /// group has not been aborted (see await_writers).
  void write_to(int peer, void* remote, const void* local, size_t n) const;
  /// Waits until `peer` is done copying from or into this rank's memory in
  /// round k (it says so on its `reduced` line).
  void wait_copied(int peer, uint64_t k) const { wait(group.reduced(peer), k, peer, "its copy of our data"); }
};

/// Marks `group` aborted with `error` (its text and kind) so peers stop
/// waiting at once. Never throws.
void abort_group(ShmGroup& group, const std::exception_ptr& error) noexcept;

/// Call::write_to writes in slices of this many bytes, with an abort check
/// before each: a peer that failed waits at most one slice (about 100 us)
/// before it returns. Longer slices gained nothing measurable (2026-11-25:
/// 256 KiB and 1 MiB CMA copies ran at the same speed).
inline constexpr size_t kWriteSliceBytes = size_t{1} << 20;

/// After this rank marked the group aborted: waits until no peer is in the
/// middle of writing into this rank's memory (Call::write_to), so that the
/// caller gets its memory back only once nobody writes to it. A writer
/// checks for an abort before every slice, so this takes at most a slice's
/// time; a writer that died writes no more. Gives up (and logs) after
/// five seconds in case a writer is stopped (SIGSTOP, a debugger). Never
/// throws.
void await_writers(const CallContext& ctx, const ShmGroup& group) noexcept;

/// Runs a collective's body; on any exception marks the group aborted (so
/// peers stop waiting at once), waits for peers writing into this rank's
/// memory, and aborts the transport, then rethrows.
/// A group that a rank has aborted fails every later call at once: a late
/// rank could otherwise find all the flags it waits for already published
/// and "complete" a call its peers have given up on.
template <typename F>
void run_guarded(const CallContext& ctx, ShmGroup& group, F&& body) {
  try {
    if (group.aborted_rank() >= 0)
      group.check_aborted(std::string(ctx.op) + " (call #" + std::to_string(ctx.seq) + " in this group)");
    if (!ctx.sig.empty()) group.begin_call(ctx.sig, ctx.entered_at);
    body(Call{ctx, group});
    group.flush_record();
  } catch (...) {
    group.flush_record();
    abort_group(group, std::current_exception());
    await_writers(ctx, group);
    algorithms::detail::abort_call(ctx, std::current_exception());
    throw;
  }
}

}  // namespace tdist::algorithms::shm::detail
