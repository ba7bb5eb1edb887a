#include "algorithms/shm/shm_call.h"

#include <sched.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "common/env.h"
#include "common/error_text.h"
#include "tdist/errors.h"
#include "tdist/logging.h"
#include "transport/shm/shm_single_copy.h"

namespace tdist::algorithms::shm::detail {

namespace {

// How long a rank whose peer published a flag of this call waits for the
// peer's record of it (check_signature).
constexpr auto kRecordGraceTime = std::chrono::milliseconds(100);

}  // namespace

uint64_t Call::begin_round() {
  // The previous round's flags come from every peer; any of them may be the
  // one that is late, so the failure check looks at all of them.
  return group.begin_round([this](int peer, const FlagLine& line, uint64_t target) {
    check_while_waiting(-1, peer);
    check_deadline(peer, line, target, "its arrival", Counts::kRounds);
  });
}

uint64_t Call::begin_eager() {
  const uint64_t n = group.next_eager();
  if (n % ShmGroup::kEagerCheck == 0 && n >= ShmGroup::kEagerCheck) {
    // The slots of the next kEagerCheck ops were last used kEagerSlots ops
    // before them: every rank must be done with those.
    for (int r = 0; r < size(); ++r) {
      if (r != rank()) {
        wait(group.eager_done(r), n - ShmGroup::kEagerCheck, r, "its eager operations",
             Counts::kEagerOpsDone);
      }
    }
  }
  return n;
}

void Call::end_eager(uint64_t n) {
  if ((n + 1) % ShmGroup::kEagerCheck == 0) transport::shm::publish(group.eager_done(rank()), n + 1);
}

void Call::check_failures(int peer) const {
  group.check_aborted(ctx.op);
  for (int r = 0; r < size(); ++r) {
    if (r == rank() || (peer >= 0 && r != peer)) continue;
    if (ctx.transport.peer_failed(r)) {
      // A live peer's connection counts as failed too once this rank's
      // transport was aborted (a peer's abort notice, a crash that broke
      // the group): that abort names the rank at the root of it.
      if (auto why = ctx.transport.abort_reason()) std::rethrow_exception(why);
      throw DistNetworkError(std::string(ctx.op) + " (call #" + std::to_string(ctx.seq) +
                             " in this group): rank " + std::to_string(group.group_rank(r)) +
                             " died or closed its connection");
    }
  }
}

void Call::check_deadline(int peer, const FlagLine& line, uint64_t target, const char* what,
                          Counts counts) const {
  long_wait.poll(ctx, group.group_rank(rank()));
  if (Clock::now() < ctx.deadline) return;
  // How far the peer got tells a late rank (one behind) from one in
  // another call or stuck in this one.
  const uint64_t seen = line.seq.load(std::memory_order_acquire);
  std::string progress;
  switch (counts) {
    case Counts::kRounds:
      // Its arrive lines alternate between rounds: the one we wait on holds
      // its last round but one.
      progress = " in round " + std::to_string(target) + "; " +
                 (&line == &group.arrive(peer, 0) || &line == &group.arrive(peer, 1)
                      ? "its last arrival was in round " + std::to_string(group.last_arrival(peer))
                      : "its flag is at round " + std::to_string(seen));
      break;
    case Counts::kEagerOps:
      progress = " in eager operation " + std::to_string(target - 1) + "; " +
                 (seen == 0 ? std::string("its slot was never written")
                            : "its slot holds operation " + std::to_string(seen - 1));
      break;
    case Counts::kEagerOpsDone:
      progress =
          ": it must have finished " + std::to_string(target) + " and has finished " + std::to_string(seen);
      break;
  }
  // Only the store tells who never came: this thread does not read what
  // peers send over TCP meanwhile.
  throw DistTimeoutError(algorithms::detail::timeout_text(
      ctx, {group.group_rank(peer)}, std::string(" over shared memory (for ") + what + progress + ")",
      false));
}

void Call::wait(const FlagLine& line, uint64_t target, int peer, const char* what, Counts counts) const {
  transport::shm::wait_at_least(line, target, group.policy(), [&] {
    check_while_waiting(peer, peer);
    check_deadline(peer, line, target, what, counts);
  });
  // eager_done lines count operations of earlier calls; every other line
  // waited for was published in this call.
  if (counts != Counts::kEagerOpsDone) verify(peer, line);
}

void Call::check_while_waiting(int failed_peer, int peer) const {
  // A rank that waits before publishing anything (a broadcast's reader)
  // must be on record for peers that compare while they wait.
  group.flush_record();
  check_failures(failed_peer);
  if (ctx.sig.empty()) return;
  // A peer in another op may never publish what we wait for; over TCP (a
  // hierarchical group's other ops) it may have sent this rank what shows
  // it.
  check_signature(peer, false);
  algorithms::detail::throw_if_unmatched(ctx, group.group_rank(rank()));
}

void Call::throw_first_difference(int peer, uint64_t end) const {
  const uint64_t first = end > ShmGroup::kCallRecords - 1 ? end - (ShmGroup::kCallRecords - 1) : 0;
  for (uint64_t s = first; s < end; ++s) {
    const auto a = group.signature_of(rank(), s);
    const auto b = group.signature_of(peer, s);
    if (a && b && !(a->sig == b->sig)) {
      throw DistBackendError(tdist::detail::earlier_mismatch_message(
          ctx.op, ctx.sig.seq, a->sig, group.group_rank(rank()), b->sig, group.group_rank(peer)));
    }
  }
}

void Call::check_signature(int peer, bool published) const {
  const int me = group.group_rank(rank());
  const int them = group.group_rank(peer);
  const uint64_t seq = ctx.sig.seq;
  auto theirs = group.signature_of(peer, seq);
  if (!theirs && published) {
    // A rank writes its record just after its first flag of the call
    // (ShmGroup::publish_stamped): give it the moment it needs, a few
    // stores. One that published our flag from an earlier call never will.
    const auto give_up = Clock::now() + kRecordGraceTime;
    while (!(theirs = group.signature_of(peer, seq)) && Clock::now() < give_up) {
      check_failures(peer);
      sched_yield();
    }
  }
  if (theirs) {
    if (!(theirs->sig == ctx.sig))
      throw DistBackendError(tdist::detail::mismatch_message(ctx.op, ctx.sig, me, theirs->sig, them));
    if (group.history_before_call() == theirs->history) return;
    // The same call, after different ones: one that nobody checked then
    // (a small broadcast whose root waits for no reader).
    throw_first_difference(peer, seq);
    throw DistBackendError(tdist::detail::calls_differ_message(ctx.op, seq,
                                                               "rank " + std::to_string(me) + " and rank " +
                                                                   std::to_string(them) +
                                                                   " made different calls before this one"));
  }
  if (!published) return;  // it has not begun this call: late, not mismatched
  // It published a line this call waits for without having begun this
  // call: what it did before differs from what this rank did. If it has
  // found that out already, its reason says more.
  group.check_aborted(ctx.op);
  const uint64_t begun = group.calls_begun(peer);
  throw_first_difference(peer, std::min(begun, seq));
  const auto last_record = begun > 0 ? group.signature_of(peer, begun - 1) : std::nullopt;
  const auto last = last_record ? std::optional(last_record->sig) : std::nullopt;
  throw DistBackendError(tdist::detail::calls_differ_message(
      ctx.op, seq,
      "rank " + std::to_string(them) + " published data for it while in call #" +
          (begun > 0 ? std::to_string(begun - 1) : std::string("(none)")) +
          (last ? " (" + tdist::detail::describe(*last) + ")" : std::string()) + ", so rank " +
          std::to_string(me) + " and rank " + std::to_string(them) +
          " made different calls before this one"));
}

const void* Call::address_of(int peer, uint64_t k, size_t offset) const {
  uint64_t address = 0;
  std::memcpy(&address, group.arrive(peer, k).payload + offset, sizeof(address));
  return reinterpret_cast<const void*>(static_cast<uintptr_t>(address));
}

void Call::publish_address(uint64_t k, const void* address, size_t offset) {
  const uint64_t value = reinterpret_cast<uintptr_t>(address);
  std::memcpy(group.arrive(rank(), k).payload + offset, &value, sizeof(value));
}

void Call::read_from(int peer, void* local, const void* remote, size_t n) const {
  if (n == 0) return;
  transport::shm::read_peer_memory(group.pid(peer), group.group_rank(peer), local, remote, n);
  // The owner may have given up meanwhile (a timeout) and reused its
  // memory: what we read then is not its data. The fence keeps the check
  // after the kernel's loads on weakly ordered CPUs.
  std::atomic_thread_fence(std::memory_order_acquire);
  if (group.aborted_rank() >= 0) group.check_aborted(ctx.op);
}

namespace {

// How long a failed rank waits for a writer that neither finishes its
// slice nor dies (one stopped by SIGSTOP or a debugger).
constexpr int kWriterGraceMs = 5000;

}  // namespace

void Call::write_to(int peer, void* remote, const void* local, size_t n) const {
  FlagLine& writing = group.writing(rank());
  // Even again when the slice ends, however it ends.
  struct EndSlice {
    FlagLine& writing;
    ~EndSlice() { writing.seq.fetch_add(1, std::memory_order_release); }
  };
  for (size_t done = 0; done < n; done += kWriteSliceBytes) {
    // Odd from here: a peer that aborts from now on waits for the slice.
    // The fence orders the count before the abort check below (a
    // store-buffering pair with await_writers' fence): either we see the
    // abort or the aborting peer sees the odd count. On x86 the locked add
    // alone would do; weaker CPUs may move an acquire load before it.
    writing.seq.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    EndSlice end{writing};
    if (group.aborted_rank() >= 0) group.check_aborted(ctx.op);
    transport::shm::write_peer_memory(
        group.pid(peer), group.group_rank(peer), static_cast<uint8_t*>(remote) + done,
        static_cast<const uint8_t*>(local) + done, std::min(kWriteSliceBytes, n - done));
  }
}

namespace {

// The writer's process is gone: it writes no more. Not the transport's
// peer_failed, which also holds for a live peer once this rank's own
// transport was aborted (by a failed TCP op, say).
bool process_gone(pid_t pid) {
  return kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace

void await_writers(const CallContext& ctx, const ShmGroup& group) noexcept {
  // Pairs with write_to's fence: our abort (or the one we saw) is ordered
  // before the loads below.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const auto give_up = Clock::now() + std::chrono::milliseconds(kWriterGraceMs);
  try {
    for (int r = 0; r < group.size(); ++r) {
      if (r == group.rank()) continue;
      const FlagLine& writing = group.writing(r);
      while ((writing.seq.load(std::memory_order_acquire) & 1) != 0 && !process_gone(group.pid(r))) {
        if (Clock::now() >= give_up) {
          TDIST_LOG(WARNING) << ctx.op << ": rank " << group.group_rank(r)
                             << " still writes into this rank's memory after " << kWriterGraceMs
                             << " ms; returning anyway";
          return;
        }
        sched_yield();
      }
    }
  } catch (...) {
    // Only the log line can throw (no memory): the wait is best effort then.
  }
}

namespace {

// What kind of failure `error` is, for peers to raise the same type.
ShmGroup::AbortKind abort_kind_of(const std::exception_ptr& error) {
  switch (error_kind(error)) {
    case ErrorKind::kTimeout:
      return ShmGroup::AbortKind::kTimeout;
    case ErrorKind::kNetwork:
      return ShmGroup::AbortKind::kNetwork;
    case ErrorKind::kOther:
      break;
  }
  return ShmGroup::AbortKind::kOther;
}

}  // namespace

void abort_group(ShmGroup& group, const std::exception_ptr& error) noexcept {
  try {
    group.abort(exception_text(error), abort_kind_of(error));
  } catch (...) {
    group.abort("(the error's text could not be built)", abort_kind_of(error));
  }
}
}  // namespace tdist::algorithms::shm::detail
