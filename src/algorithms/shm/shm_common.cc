#include "algorithms/shm/shm_common.h"

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
#include "common/reduce_kernels.h"
#include "common/stream_copy.h"
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
  throw DistTimeoutError(
      std::string(ctx.op) + " (call #" + std::to_string(ctx.seq) + " in this group): Timed out after " +
      std::to_string(ctx.timeout.count()) + " ms waiting for rank " + std::to_string(group.group_rank(peer)) +
      " over shared memory (for " + what + progress + ")" + algorithms::detail::missing_ranks_text(ctx));
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

transport::shm::SingleCopyWindow Call::single_copy_window(transport::shm::SingleCopyShape shape) const {
  return group.single_copy_settings().window(shape);
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

SlotRing::SlotRing(Call& call, size_t bytes, size_t slot_bytes, int only_reader)
    : call_(call),
      handoff_(call, only_reader),
      slot_bytes_(std::min(slot_bytes, call.group.buffer_bytes())),
      chunks_(ceil_div(bytes, slot_bytes_)),
      slots_per_buffer_(call.group.buffer_bytes() / slot_bytes_),
      first_(call.begin_round()),
      end_(call.group.skip_rounds(chunks_ + 1)) {
  // begin_round let us write the buffer of round first_ (its last round,
  // first_ - 2, is done everywhere); the other buffer waits for every
  // rank's arrive(first_), which says it is done with round first_ - 1.
  // Every rank, not only the ring's readers: in the round before, any rank
  // may have been reading our buffer (a gather's other ranks too).
  call.group.publish_arrive(first_);
}

uint8_t* SlotRing::slot(int r, size_t j) const {
  const size_t s = j % (2 * slots_per_buffer_);
  return call_.group.buffer(r, first_ + s / slots_per_buffer_) + s % slots_per_buffer_ * slot_bytes_;
}

uint8_t* SlotRing::claim(size_t j) {
  const int me = call_.rank();
  const size_t ring = 2 * slots_per_buffer_;
  for (int r = 0; r < call_.size(); ++r) {
    if (r == me) continue;
    if (j >= ring) {
      if (reads_from(r, me))
        call_.wait(call_.group.reduced(r), round_of(j - ring), r, "its release of our slot");
    } else if (j >= slots_per_buffer_) {
      call_.wait(call_.group.arrive(r, first_), first_, r, "its entry into the ring");
    }
  }
  return slot(me, j);
}

const uint8_t* SlotRing::await(int r, size_t j) const {
  call_.wait(call_.group.arrive(r, round_of(j)), round_of(j), r, "its data");
  return slot(r, j);
}

void copy_out(void* dst, const void* src, size_t n, bool streaming) {
  if (n == 0 || dst == src) return;
  if (streaming) {
    tdist::detail::stream_copy(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

HandoffProbe handoff_probe(uint64_t round) {
  if (round < kHandoffFirstProbes) return round % 2 == 1 ? HandoffProbe::kCached : HandoffProbe::kStreamed;
  // The cached probe's place in each period moves by 37 (prime to the
  // period) from one period to the next; the streamed one is half a
  // period after it.
  const uint64_t place = round / kHandoffProbeRounds * 37 % kHandoffProbeRounds;
  const uint64_t at = round % kHandoffProbeRounds;
  if (at == place) return HandoffProbe::kCached;
  if (at == (place + kHandoffProbeRounds / 2) % kHandoffProbeRounds) return HandoffProbe::kStreamed;
  return HandoffProbe::kNone;
}

size_t handoff_place(uint64_t round) {
  return (round < kHandoffFirstProbes ? round / 2 : round / kHandoffProbeRounds) % 2;
}

uint32_t best_probe(uint32_t a, uint32_t b) {
  if (a == 0) return b;
  return b == 0 ? a : std::min(a, b);
}

bool handoff_prefers_streaming(HandoffCost cached, HandoffCost streamed) {
  if (cached.fill == 0 || cached.read == 0 || streamed.fill == 0 || streamed.read == 0) return false;
  // Streaming must win by a quarter: on one core the two kinds are within
  // 10-20% of each other (a MiB in 55 against 60-68 us), and one slow
  // ordinary fill (a preemption, a cache miss) must not tip the verdict; on
  // two cores streaming wins by 2-8x.
  return 4 * (uint64_t{streamed.fill} + streamed.read) < 3 * (uint64_t{cached.fill} + cached.read);
}

uint32_t ns_per_mib(uint64_t ns, size_t bytes) {
  const uint64_t scaled = bytes == 0 ? UINT32_MAX : ns * (uint64_t{1} << 20) / bytes;
  return static_cast<uint32_t>(std::clamp<uint64_t>(scaled, 1, UINT32_MAX));
}

namespace {

uint32_t best_of(const std::atomic<uint32_t> (&ns)[2]) {
  return best_probe(ns[0].load(std::memory_order_relaxed), ns[1].load(std::memory_order_relaxed));
}

using Clock = std::chrono::steady_clock;

uint64_t ns_since(Clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
}

}  // namespace

HandoffProbe Handoff::probe_of(uint64_t k) const {
  return call_.group.handoff_mode() == transport::shm::HandoffMode::kAuto ? handoff_probe(k)
                                                                          : HandoffProbe::kNone;
}

bool Handoff::measured_streaming() const {
  const int me = call_.rank();
  const transport::shm::HandoffLine& mine = call_.group.handoff(me);
  HandoffCost kind[2];
  for (size_t k = 0; k < 2; ++k) {
    kind[k].fill = best_of(mine.fill_ns[use_][k]);
    uint32_t slowest = 0;
    bool all_measured = true;  // else the kind counts as unmeasured
    for (int r = 0; r < call_.size(); ++r) {
      if (!reads_from(r, me)) continue;
      const uint32_t read = best_of(call_.group.handoff(r).read_ns[use_][k]);
      all_measured = all_measured && read != 0;
      slowest = std::max(slowest, read);
    }
    kind[k].read = all_measured ? slowest : 0;
  }
  return handoff_prefers_streaming(kind[0], kind[1]);
}

// In a probe round every writer uses the probe's stores, whatever the size
// of its chunks, so that a reader's label (from the round) is always right;
// only chunks of kHandoffMinBytes or more are timed.
void Handoff::fill_with(uint64_t k, size_t n,
                        tdist::detail::FunctionRef<void(bool streaming)> copy_in) const {
  if (n == 0) return;
  switch (call_.group.handoff_mode()) {
    case transport::shm::HandoffMode::kCached:
      return copy_in(false);
    case transport::shm::HandoffMode::kStreamed:
      return copy_in(true);
    case transport::shm::HandoffMode::kAuto:
      break;
  }
  const HandoffProbe probe = probe_of(k);
  if (probe == HandoffProbe::kNone) return copy_in(n >= kHandoffMinBytes && measured_streaming());
  if (n < kHandoffMinBytes) return copy_in(probe == HandoffProbe::kStreamed);
  const Clock::time_point start = Clock::now();
  copy_in(probe == HandoffProbe::kStreamed);
  record(true, probe, k, ns_since(start), n);
}

void Handoff::read_with(uint64_t k, size_t n, tdist::detail::FunctionRef<void()> work) const {
  const HandoffProbe probe = probe_of(k);
  if (probe == HandoffProbe::kNone || n < kHandoffMinBytes) return work();
  const Clock::time_point start = Clock::now();
  work();
  record(false, probe, k, ns_since(start), n);
}

void Handoff::fill(uint64_t k, uint8_t* dst, const uint8_t* src, size_t n) const {
  fill_with(k, n, [&](bool streaming) { copy_out(dst, src, n, streaming); });
}

void Handoff::read(uint64_t k, uint8_t* dst, const uint8_t* src, size_t n, bool streaming) const {
  if (n == 0 || dst == src) return;
  read_with(k, n, [&] { copy_out(dst, src, n, streaming); });
}

// Into this rank's HandoffLine, in the probe's place (the older time of its
// kind: probe periods alternate between the two places).
void Handoff::record(bool fill, HandoffProbe probe, uint64_t k, uint64_t ns, size_t n) const {
  transport::shm::HandoffLine& line = call_.group.handoff(call_.rank());
  const size_t kind = probe == HandoffProbe::kStreamed ? 1 : 0;
  (fill ? line.fill_ns : line.read_ns)[use_][kind][handoff_place(k)].store(ns_per_mib(ns, n),
                                                                           std::memory_order_relaxed);
}

void SlotRing::fill(size_t j, const uint8_t* src, size_t n) {
  handoff_.fill(round_of(j), claim(j), src, n);
  publish(j);
}

void SlotRing::read(int r, size_t j, uint8_t* dst, size_t n, bool streaming) {
  handoff_.read(round_of(j), dst, await(r, j), n, streaming);
}

void SlotRing::read_with(int r, size_t j, size_t n,
                         tdist::detail::FunctionRef<void(const uint8_t* src)> copy) {
  const uint8_t* src = await(r, j);
  handoff_.read_with(round_of(j), n, [&] { copy(src); });
}

size_t section_bytes(const ShmGroup& group, int parts, size_t element_bytes) {
  size_t unit = 64 * element_bytes / std::__gcd(size_t{64}, element_bytes);
  size_t bytes = group.buffer_bytes() / static_cast<size_t>(parts) / unit * unit;
  if (bytes == 0) {
    throw DistBackendError("shared memory: a buffer of " + std::to_string(group.buffer_bytes()) +
                           " bytes cannot hold " + std::to_string(parts) +
                           " sections; raise TDIST_SHM_BUFFER_BYTES");
  }
  return bytes;
}

namespace {

// Tiles of the reduction: the partial result of pairwise passes stays in L1.
constexpr size_t kTileBytes = size_t{16} << 10;

bool overlaps(const void* a, const void* b, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

// dst = the sources' elements [begin, begin + len) reduced, in rank order;
// dst overlaps none of them. float32 sums (AVG and PREMUL_SUM sum too) run
// in one pass over the sources (`one_pass`).
void reduce_tile(uint8_t* dst, const void* const* srcs, int n, size_t begin, size_t len, DType dtype,
                 const ReduceOp& op, bool one_pass) {
  const size_t off = begin * element_size(dtype);
  auto at = [&](int i) { return static_cast<const uint8_t*>(srcs[i]) + off; };
  if (one_pass) {
    const float* tile_srcs[8];
    for (int i = 0; i < n; ++i) tile_srcs[i] = reinterpret_cast<const float*>(at(i));
    sum_float32_sources(reinterpret_cast<float*>(dst), tile_srcs, n, len);
    return;
  }
  reduce_into(dst, at(0), at(1), len, dtype, op);
  for (int i = 2; i < n; ++i) reduce_into(dst, dst, at(i), len, dtype, op);
}

// The same through a scratch tile, for a result that overlaps a source:
// two-shot PREMUL_SUM reduces a rank's own premultiplied piece where its
// result goes, and pairwise passes straight into it overwrote that source
// before reading it (wrong sums on ranks 2 and up). Out of line: only this
// path needs the 16 KiB of stack.
[[gnu::noinline]] void reduce_tile_via_scratch(uint8_t* dst, const void* const* srcs, int n, size_t begin,
                                               size_t len, DType dtype, const ReduceOp& op, bool one_pass) {
  alignas(64) uint8_t scratch[kTileBytes];
  reduce_tile(scratch, srcs, n, begin, len, dtype, op, one_pass);
  std::memcpy(dst, scratch, len * element_size(dtype));
}

}  // namespace

void reduce_sources(void* dst, const void* const* srcs, int n, size_t count, DType dtype, const ReduceOp& op,
                    int world_size, void* copy_to) {
  const size_t eb = element_size(dtype);
  const size_t tile = std::max<size_t>(1, kTileBytes / eb);
  auto* out = static_cast<uint8_t*>(dst);
  const bool sum_kind =
      op.kind == ReduceOp::SUM || op.kind == ReduceOp::AVG || op.kind == ReduceOp::PREMUL_SUM;
  const bool one_pass = dtype == DType::kFloat32 && sum_kind && n >= 2 && n <= 8;
  bool overlap = false;
  for (int i = 0; n > 1 && i < n; ++i) overlap = overlap || overlaps(out, srcs[i], count * eb);
  for (size_t begin = 0; begin < count; begin += tile) {
    const size_t len = std::min(tile, count - begin);
    const size_t off = begin * eb;
    if (n == 1) {
      if (out != srcs[0]) std::memcpy(out + off, static_cast<const uint8_t*>(srcs[0]) + off, len * eb);
    } else if (overlap) {
      reduce_tile_via_scratch(out + off, srcs, n, begin, len, dtype, op, one_pass);
    } else {
      reduce_tile(out + off, srcs, n, begin, len, dtype, op, one_pass);
    }
    finalize_reduce(out + off, len, dtype, op, world_size);
    if (copy_to != nullptr) std::memcpy(static_cast<uint8_t*>(copy_to) + off, out + off, len * eb);
  }
}

}  // namespace tdist::algorithms::shm::detail
