#pragma once

// Building blocks shared by the shared-memory collectives: waiting on a
// peer's flag with the call's deadline, failing the whole group on any
// error, and slicing a range into per-round pieces.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
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
  transport::shm::SingleCopyWindow single_copy_window(transport::shm::SingleCopyShape shape) const;
  /// True if a call of `shape` whose blocks are at most `bytes` long copies directly.
  bool single_copy(transport::shm::SingleCopyShape shape, size_t bytes) const {
    return single_copy_window(shape).contains(bytes);
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

/// memcpy, or streaming stores when `streaming` (common/stream_copy.h): a
/// copy into a large output, or a chunk handed to readers on other cores.
void copy_out(void* dst, const void* src, size_t n, bool streaming);

/// For a block laid out as `segments` one after another (the segmented
/// reduce_scatter input and all_gather output), calls fn(segment, offset,
/// from, n) for every piece of its units [begin, begin + length): n units
/// at `offset` units into `segment`, `from` units past begin.
/// `size_of(segment)` gives a segment's units.
template <typename Segment, typename SizeOf, typename Fn>
void for_each_piece(const std::vector<Segment>& segments, SizeOf size_of, size_t begin, size_t length,
                    Fn&& fn) {
  const size_t end = begin + length;
  size_t at = 0;  // units of the block before this segment
  for (const Segment& segment : segments) {
    if (at >= end) break;
    const size_t size = size_of(segment);
    const size_t from = std::max(at, begin);
    const size_t to = std::min(at + size, end);
    if (from < to) fn(segment, from - at, from - begin, to - from);
    at += size;
  }
}

/// How a writer stores a chunk (a ring's slot, a round's piece, a
/// reduction's contribution) for readers on other cores. On the
/// Zen 4 VM the two vCPUs are at times two threads of one core, at times
/// two cores (a cache line passed back and forth in 27 ns, or in 160 ns;
/// the state changes every few seconds to minutes). Between two cores a
/// writer refilling a slot with ordinary stores first takes every line back
/// from the reader's cache, slowly: filling a 512 KiB slot took 200 us
/// there against 27 us with streaming stores, which write whole lines
/// without reading them (a 128 KiB slot: 6-36 against 2.7 us). On one core
/// the ordinary stores leave the chunk in the cache the reader shares,
/// where streaming stores send it to memory and back. Measured 2026-11-26,
/// alternating runs each labelled by a ping-pong just before it, 2 ranks,
/// ordinary against streaming stores: broadcast 64 MiB 3.1-3.7 against
/// 4.5-4.8 ms on one core, 26-28.7 against 3.3-3.7 on two; all_gather
/// 64 MiB 4.2-4.3 against 5.5-5.9 on one core, 16-17 against 4.3-5.5 on
/// two; broadcast 4 MiB on two cores 1.0-1.8 ms against 175-204 us.
/// So writers and readers measure (Handoff below): one round in every
/// kHandoffProbeRounds is a probe with ordinary stores and another with
/// streaming stores, at places that move from period to period (so a loop
/// of calls whose rounds repeat does not meet them always in the same
/// step), and every round of a group's first kHandoffFirstProbes is one,
/// so that its first large calls need not wait for a verdict. Only a few:
/// on two cores an ordinary probe costs its round 2-3x, and 16 of them
/// made a 2-rank 1 MiB all_reduce of 25 calls (one round each) average
/// 260-300 us instead of 55-180 (2026-11-26). In a probe
/// round every writer uses the probe's stores; writers time their fill,
/// readers their copy or reduction (chunks of at least kHandoffMinBytes;
/// per MiB), each in its HandoffLine, copies apart from reductions.
/// A writer streams its other chunks of kHandoffMinBytes or more if its
/// best fill plus its slowest reader's best copy (or reduction), of the
/// last two probes of each kind, is a quarter shorter with streaming
/// stores (two, so that one preempted copy does not decide; a quarter, so
/// that noise on one core does not).
/// TDIST_SHM_HANDOFF=cached or streamed (rank 0's, ShmGroup::handoff_mode)
/// fixes the stores of every chunk and turns the probes off.
enum class HandoffProbe { kNone, kCached, kStreamed };
inline constexpr uint64_t kHandoffProbeRounds = 128;
inline constexpr uint64_t kHandoffFirstProbes = 6;
/// Outside probe rounds, chunks smaller than this are written with
/// ordinary stores; they are never timed (their hand-over costs little
/// either way, and timing it is noise).
inline constexpr size_t kHandoffMinBytes = size_t{64} << 10;
/// Which probe round `round` is, if any.
HandoffProbe handoff_probe(uint64_t round);
/// Which of a HandoffLine's two places a probe of `round` goes to.
size_t handoff_place(uint64_t round);
/// The better of two probe times (0: none).
uint32_t best_probe(uint32_t a, uint32_t b);
/// A hand-over's cost with one kind of stores: the writer's fill and its
/// slowest reader's copy (ns per MiB, 0: not measured).
struct HandoffCost {
  uint32_t fill = 0;
  uint32_t read = 0;
};
/// True if every time was measured and streaming stores cost at least a
/// quarter less.
bool handoff_prefers_streaming(HandoffCost cached, HandoffCost streamed);
/// A probe's time for `bytes` as ns per MiB, at least 1 (0 means "none").
uint32_t ns_per_mib(uint64_t ns, size_t bytes);

/// Chunks of round-numbered hand-overs within one call: a writer fills its
/// chunk of round k with the stores its readers want (HandoffProbe above),
/// a reader copies it out or reduces it, timing the probes.
class Handoff {
 public:
  /// What readers do with the chunks: copy them out, or reduce them.
  enum class Use { kCopy = 0, kReduce = 1 };
  /// `only_reader` < 0: every rank reads every writer; else only that rank.
  Handoff(Call& call, int only_reader, Use use = Use::kCopy)
      : call_(call), only_reader_(only_reader), use_(static_cast<size_t>(use)) {}
  /// A writer: its chunk of round k from `src` to `dst` in its buffer.
  void fill(uint64_t k, uint8_t* dst, const uint8_t* src, size_t n) const;
  /// A reader: a writer's chunk of round k from `src` to `dst`, with
  /// streaming stores if `streaming` (the caller's output is large).
  void read(uint64_t k, uint8_t* dst, const uint8_t* src, size_t n, bool streaming) const;
  /// A writer whose round-k chunks (n bytes in all) are several copies:
  /// `copy_in(streaming)` makes them with the stores given.
  void fill_with(uint64_t k, size_t n, tdist::detail::FunctionRef<void(bool streaming)> copy_in) const;
  /// A reader that works on the round-k chunks (n bytes from its writers)
  /// in place, a reduction: `work` runs, timed if round k is a probe.
  void read_with(uint64_t k, size_t n, tdist::detail::FunctionRef<void()> work) const;
  bool reads_from(int reader, int writer) const {
    return reader != writer && (only_reader_ < 0 || reader == only_reader_);
  }

 private:
  // The probe of round k, if it is one and the probes are on.
  HandoffProbe probe_of(uint64_t k) const;
  // The verdict of this writer's and its readers' probes so far.
  bool measured_streaming() const;
  void record(bool fill, HandoffProbe probe, uint64_t k, uint64_t ns, size_t n) const;

  Call& call_;
  int only_reader_;
  size_t use_;
};

/// Chunks from writers to readers through each writer's two buffers taken
/// together as one ring of slots, so that a writer may run a ring ahead of
/// its readers instead of one round: it reuses a slot once every rank that
/// reads from it has released the chunk the slot held. Each chunk is a round
/// of its own (numbers taken with ShmGroup::skip_rounds): writers publish
/// `arrive` for it, readers `reduced` once done with it from every writer
/// they read; at the end every rank publishes `arrive` of one more round,
/// which the next call's begin_round waits for. Every rank publishes
/// `arrive` of the ring's first round on entering it, done with the round
/// before, whose buffer holds the second half of the ring: a writer fills
/// that half only once every rank has entered.
///
/// Why: a writer that refills a buffer which a reader on another core has
/// just read takes every line of it back from that core's cache. Two
/// threads moving 64 MiB from one to the other through two 256 KiB buffers
/// took 8.2 ms; through a 2 MiB ring of 64-256 KiB slots, larger than the
/// L2 (1 MiB), so that a slot's lines have gone to the shared L3 by the time
/// it is reused, 3.2-3.5 ms (2026-11-26, Zen 4 VM).
class SlotRing {
 public:
  /// Begins moving up to `bytes` (at least 1) per writer in chunks of
  /// `slot_bytes` (a multiple of 64), or of a buffer if that is smaller.
  /// `only_reader` < 0: every rank reads every writer; else only that rank
  /// reads.
  SlotRing(Call& call, size_t bytes, size_t slot_bytes, int only_reader);
  /// Bytes per chunk, and how many chunks there are.
  size_t slot_bytes() const { return slot_bytes_; }
  size_t chunks() const { return chunks_; }
  /// A writer's slot for chunk j, once every rank that reads it is done with
  /// what it held. Writers claim their chunks in order.
  uint8_t* claim(size_t j);
  /// A writer: its chunk j is in its slot.
  void publish(size_t j) { call_.group.publish_arrive(round_of(j)); }
  /// A reader: writer r's chunk j, once it is there.
  const uint8_t* await(int r, size_t j) const;
  /// A reader: done with chunk j of every writer it reads.
  void release(size_t j) { call_.group.publish_reduced(round_of(j)); }
  /// A writer: claims chunk j's slot, copies its `n` bytes from `src` in
  /// with the stores its readers want (HandoffProbe above) and publishes it.
  void fill(size_t j, const uint8_t* src, size_t n);
  /// A reader: copies writer r's chunk j (`n` bytes) to `dst`, with
  /// streaming stores if `streaming`, timing it if it is a probe.
  void read(int r, size_t j, uint8_t* dst, size_t n, bool streaming);
  /// A reader: `copy(src)` takes writer r's chunk j (`n` bytes) from its
  /// slot, timed if it is a probe.
  void read_with(int r, size_t j, size_t n, tdist::detail::FunctionRef<void(const uint8_t* src)> copy);
  /// Every rank, once done with every chunk it writes or reads.
  void finish() { call_.group.publish_arrive(end_); }

 private:
  uint64_t round_of(size_t j) const { return first_ + 1 + j; }

  uint8_t* slot(int r, size_t j) const;
  bool reads_from(int reader, int writer) const { return handoff_.reads_from(reader, writer); }

  Call& call_;
  Handoff handoff_;
  size_t slot_bytes_;
  size_t chunks_;
  size_t slots_per_buffer_;
  // Declared in this order: first_ takes the next round (begin_round), then
  // end_ skips the ring's rounds after it.
  uint64_t first_;  // the round every rank publishes on entering the ring
  uint64_t end_;    // the round every rank publishes on leaving it
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

/// Piece `index` of a range of `total` units cut into pieces of `piece`
/// units: [begin, begin + length), empty past the end.
struct Piece {
  size_t begin;
  size_t length;
};
inline Piece piece_of(size_t total, size_t piece, size_t index) {
  size_t begin = std::min(total, index * piece);
  return Piece{begin, std::min(total, begin + piece) - begin};
}

inline size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

/// Elements per piece of one two-shot round of `round_count` elements
/// (`element_bytes` each) over `p` ranks, at most `full_section`: an even
/// share, rounded up to whole cache lines. A round shorter than a buffer
/// (the last one, or a message smaller than a buffer) cut into full sections
/// would leave all the reducing to the first ranks (a 2-rank 256 KiB
/// all_reduce took 46 us instead of 25 with 1 MiB buffers).
inline size_t two_shot_section(size_t round_count, int p, size_t element_bytes, size_t full_section) {
  const size_t line = 64 / std::gcd(size_t{64}, element_bytes);  // elements per cache line
  return std::min(full_section, ceil_div(ceil_div(round_count, static_cast<size_t>(p)), line) * line);
}

/// Bytes of a single-copy broadcast of `nbytes` over `p` ranks that the root
/// writes into the front of each reader's tensor; each reader reads the
/// rest. With a core per rank every rank then copies about (p - 1) / p of
/// the message, instead of the readers copying all of it while the root
/// waits. Whole 4 KiB units, so that each slice covers whole pages when the
/// tensor starts on one. Below 32 KiB a second system call costs more than
/// it saves: the readers copy everything (2 ranks, 2026-11-25: 16 KiB 1.2
/// us read alone, 1.2-1.5 shared; 32 KiB 1.9 and 1.6-1.9; 1 MiB 47 and 17).
inline constexpr size_t kBroadcastShareMinBytes = size_t{32} << 10;
inline size_t broadcast_pushed_bytes(size_t nbytes, int p) {
  if (nbytes < kBroadcastShareMinBytes) return 0;
  return nbytes / static_cast<size_t>(p) / 4096 * 4096;
}

// Two-shot rounds (all_reduce and reduce) are at most this long when ranks
// outnumber cores. Ranks that take turns on a core evict each other's
// lines; rounds that stay in L2 beat fewer, longer rounds there. 4 ranks on
// 2 cores, 1 MiB buffers, all_reduce (2026-11-25): 4 MiB 1.7-2.2 -> 1.1-1.2
// ms, 16 MiB 6.0 -> 4.7-5.3 ms, 64 MiB 29.8-30.5 -> 25.5-25.9 ms at 256
// KiB; no change at 64 KiB-1 MiB. Since two-shot keeps two rounds in
// flight (reduce_two_shot), 128 KiB: 64 MiB 24.4 ms against 28.3 at 256 KiB
// and 26.2 at 96 KiB (medians of five alternating runs). With as many cores
// as ranks shorter rounds gain nothing, and broadcast, all_gather,
// reduce_scatter and all_to_all lose from shorter buffers (measured on the
// same day; reduce was not measured apart).
inline constexpr size_t kOversubscribedRoundBytes = size_t{128} << 10;

// Single-copy reductions read this much per tile, over all peers (whole
// pages): 2 ranks, 64 MiB (2026-11-25, a prototype): 64 KiB 7.2 ms, 128 KiB 7.1, 256 KiB 6.4,
// 512 KiB 7.2, 1 MiB 8.7.
inline constexpr size_t kSingleCopyTileBytes = size_t{256} << 10;

/// Bytes a single-copy reduction over `p` ranks reads from each peer per
/// tile: kSingleCopyTileBytes shared by the peers, in whole pages, at least
/// 16 KiB (a multiple of every element size).
inline size_t single_copy_tile_bytes(int p) {
  const size_t share = kSingleCopyTileBytes / static_cast<size_t>(std::max(1, p - 1)) / 4096 * 4096;
  return std::max<size_t>(size_t{16} << 10, share);
}

/// Elements per piece of a single-copy reduction of `count` elements
/// (`element_bytes` each) over `p` ranks: an even share rounded up to whole
/// 4 KiB units, so that two owners writing neighbouring pieces into a peer's
/// tensor never share a cache line when the tensor starts on one (nor a
/// page, when it starts on a page).
inline size_t single_copy_piece(size_t count, int p, size_t element_bytes) {
  const size_t unit = 4096 / std::gcd(size_t{4096}, element_bytes);  // elements per 4 KiB
  return std::max(unit, ceil_div(ceil_div(count, static_cast<size_t>(p)), unit) * unit);
}

/// Bytes of a buffer each of `parts` sections may use: a multiple of 64
/// (sections start on cache lines) and of `element_bytes`.
size_t section_bytes(const ShmGroup& group, int parts, size_t element_bytes);

/// The sources of a reduction, one per rank: on the stack for groups of up
/// to 16 ranks (no allocation on a small collective's path).
class Sources {
 public:
  explicit Sources(int n) : n_(static_cast<size_t>(n)) {
    if (n_ > kInline) heap_.resize(n_);
  }
  const void*& operator[](size_t i) { return n_ > kInline ? heap_[i] : inline_[i]; }
  const void* const* data() const { return n_ > kInline ? heap_.data() : inline_; }

 private:
  static constexpr size_t kInline = 16;
  size_t n_;
  const void* inline_[kInline] = {};
  std::vector<const void*> heap_;
};

/// dst = srcs[0] op srcs[1] op ... (in that order), count elements; for AVG
/// also divides. Tiles the range so the partial result stays in L1. With
/// `copy_to`, each finished tile is also copied there while still in L1
/// (cheaper than a second pass over the whole result). dst may be one of the
/// sources (the same elements), not overlap one in any other way; so may
/// copy_to.
void reduce_sources(void* dst, const void* const* srcs, int n, size_t count, DType dtype, const ReduceOp& op,
                    int world_size, void* copy_to = nullptr);

}  // namespace tdist::algorithms::shm::detail
