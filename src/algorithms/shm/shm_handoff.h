#pragma once

// How chunks pass from writers to readers on shared memory: the stores a
// writer uses (Handoff, with its probes of ordinary against streaming
// stores) and the ring of slots over each writer's two buffers (SlotRing).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "algorithms/shm/shm_call.h"
#include "algorithms/shm/shm_slicing.h"

namespace tdist::algorithms::shm::detail {

/// memcpy, or streaming stores when `streaming` (common/stream_copy.h): a
/// copy into a large output, or a chunk handed to readers on other cores.
void copy_out(void* dst, const void* src, size_t n, bool streaming);

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

}  // namespace tdist::algorithms::shm::detail
