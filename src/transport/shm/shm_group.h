#pragma once

// The shared-memory domain of one process group whose ranks all run on one
// host: one segment with, for every rank, a few flag lines and two data
// buffers. Collectives (src/algorithms/shm/) move data through it in rounds:
//
//   round k, on every rank:  begin_round() -> k
//                            write own buffer(k) / flag payload
//                            publish_arrive(k); wait for peers' arrive(k)
//                            [two-phase ops: reduce own piece, publish_reduced(k),
//                             wait for peers' reduced(k)]
//                            read peers' buffers(k)
//
// Buffers alternate between rounds (k % 2). begin_round() waits until every
// rank has published arrive(k - 1), which each rank does only after it
// finished everything of round k - 2, the last round that used the same
// buffers, so a buffer is never overwritten while somebody reads it. Every
// rank runs the same rounds in the same order because every rank runs the
// same collectives with the same sizes. (Two-shot runs two rounds at a
// time inside a call, where arrive promises less, and ends so that what
// this rule protects holds for the next call; see reduce_two_shot in
// src/algorithms/shm/shm_reduce.cc.)
//
// Small broadcasts and reduces skip the rounds and use each rank's ring of
// eager slots instead (next_eager() below): their writers do not wait for
// the readers. Large broadcasts and gathers run a ring of slots over a
// writer's two buffers (algorithms/shm/shm_handoff.h, SlotRing), a run of
// rounds taken at once (skip_rounds() below) that keeps the rule above for
// the calls before and after it.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/call_signature.h"
#include "tdist/store.h"
#include "transport/shm/shm_segment.h"
#include "transport/shm/shm_single_copy.h"
#include "transport/shm/shm_sync.h"

namespace tdist::transport::shm {

/// Who shares a host: TDIST_HOST_ID if set (tests use it to pretend ranks
/// are on different hosts), else hostname, boot id and the identity of
/// /dev/shm (ranks in containers with separate /dev/shm do not share).
std::string host_identity();

/// Default bytes per data buffer; TDIST_SHM_BUFFER_BYTES overrides it (rank
/// 0's value is used by all).
inline constexpr size_t kDefaultBufferBytes = size_t{1} << 20;

/// What a rank measured handing chunks over to other ranks
/// (algorithms/shm/shm_handoff.h, Handoff): its last two probe times, in ns
/// per MiB (0: none yet), of filling its buffer as a writer and of taking
/// chunks in as a reader, for chunks stored with ordinary (kind 0) and
/// with streaming stores (1), separately for chunks that readers copy out
/// (use 0) and chunks that they reduce (1). Only the rank itself writes its
/// line; writers read their readers' lines.
struct alignas(kCacheLine) HandoffLine {
  std::atomic<uint32_t> fill_ns[2][2][2];  // [use][kind][place]
  std::atomic<uint32_t> read_ns[2][2][2];
};
static_assert(sizeof(HandoffLine) == kCacheLine);

/// How writers store large chunks for their readers: measured (auto), or
/// fixed by TDIST_SHM_HANDOFF (rank 0's value holds for the group).
enum class HandoffMode { kAuto, kCached, kStreamed };

/// One call's signature in a rank's ring of calls (CallSignature): `mark`
/// is the call's seq + 1 once the rest is written (release), so a reader
/// that finds its seq + 1 there reads the whole signature of that call.
struct alignas(kCacheLine) CallRecord {
  std::atomic<uint64_t> mark;
  std::atomic<uint64_t> words[4];
  std::atomic<uint64_t> history;  // CallStamp::history of the calls before it
  // When the rank entered the call, on the flight recorder's clock (ticks
  // that every process of a host shares): peers name the rank that arrived
  // last from these.
  std::atomic<int64_t> entered_at;
};
static_assert(sizeof(CallRecord) == kCacheLine);

class ShmGroup {
 public:
  /// One rank's flags (defined in shm_group.cc).
  struct RankArea;

  /// Creates (rank 0) or opens the group's segment, agreeing through `store`
  /// (keys under `prefix`). Every rank of the group must call it.
  /// `group_ranks[r]` is member r's rank in the process group, for
  /// messages (a host's part of a larger group); empty: the same numbers.
  static std::unique_ptr<ShmGroup> connect(Store& store, int rank, int size,
                                           std::chrono::milliseconds timeout,
                                           const std::string& prefix = "shm/",
                                           std::vector<int> group_ranks = {});
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  int rank() const { return rank_; }
  /// Member r's rank in the process group, as messages name it.
  int group_rank(int r) const { return group_ranks_.empty() ? r : group_ranks_[static_cast<size_t>(r)]; }
  int size() const { return size_; }
  size_t buffer_bytes() const { return buffer_bytes_; }
  const WaitPolicy& policy() const { return policy_; }
  const std::string& segment_name() const { return segment_.name(); }

  /// Starts the next round (see above) and returns its number. While it
  /// waits for peer r's `line` to reach `target`, check(r, line, target)
  /// runs now and then (FailureCheck), so that its errors can name the peer.
  uint64_t begin_round(detail::FunctionRef<void(int peer, const FlagLine& line, uint64_t target)> check);
  /// Rank r's data buffer of round k.
  uint8_t* buffer(int r, uint64_t k) const;
  /// Skips `n` round numbers and returns the last: a run of rounds that
  /// manages its buffers itself (algorithms/shm/shm_handoff.h, SlotRing)
  /// takes its numbers this way, and every rank publishes arrive(last) once
  /// done with all of them, so that the next begin_round waits for it as
  /// for any round.
  uint64_t skip_rounds(uint64_t n) { return round_ += n; }
  /// Rank r's arrive flag line of round k (its payload is free for data).
  FlagLine& arrive(int r, uint64_t k) const;
  /// The last round rank r arrived in (its two arrive lines alternate).
  uint64_t last_arrival(int r) const;
  FlagLine& reduced(int r) const;
  /// Rank r's count of writes into peers' memory (single copy): odd while
  /// one is under way. A rank that fails a call waits until no peer is
  /// writing before it returns (algorithms/shm/shm_call.h).
  FlagLine& writing(int r) const;
  /// Rank r's line as a reader of rings of slots (HandoffLine).
  HandoffLine& handoff(int r) const;

  void publish_arrive(uint64_t k) { publish_stamped(arrive(rank_, k), k); }
  void publish_reduced(uint64_t k) { publish_stamped(reduced(rank_), k); }
  /// Publishes `value` on one of this rank's lines with the current call's
  /// stamp (begin_call).
  void publish_stamped(FlagLine& line, uint64_t value) {
    line.stamp.store(stamp_, std::memory_order_relaxed);
    publish(line, value);
    // After the first publish, not before: its stores then drain while
    // this rank waits for its peers instead of before the flag's fence
    // (7 ns of an 8 B all_reduce's 170). A peer that finds this call's
    // stamp before the record waits for the record (check_signature).
    if (record_pending_) write_record();
  }

  /// Every call's signatures (common/call_signature.h): a rank records what
  /// it passes to call `sig.seq` in its ring of kCallRecords calls before it
  /// publishes anything in it, and stamps every line it publishes in it
  /// with stamp_call(sig, ...).stamp. A peer that finds another stamp on a line it
  /// waited for reads the record (signature_of) to tell a mismatched call
  /// from one that has moved on to its next call. The ring is longer than
  /// any lead a rank can have over another (an eager writer's is at most
  /// kEagerSlots calls).
  static constexpr uint64_t kCallRecords = 256;
  /// `entered_at`: when this rank entered the call, on the flight recorder's
  /// clock (recorded for peers to read; 0 if unknown).
  void begin_call(const tdist::detail::CallSignature& sig, int64_t entered_at = 0);
  /// Writes the current call's record if no publish has yet (every call
  /// ends with it, so that a call that published nothing is on record).
  void flush_record() {
    if (record_pending_) write_record();
  }
  uint32_t stamp() const { return stamp_; }
  /// The history of this rank's calls before the current one (what its
  /// record of the current call holds, written or not).
  uint64_t history_before_call() const { return pending_.history; }
  /// Rank r's signature of call `seq`, if r has begun that call and not yet
  /// kCallRecords more, with the history of r's calls before it.
  struct Recorded {
    tdist::detail::CallSignature sig;
    uint64_t history;
    int64_t entered_at = 0;
  };
  std::optional<Recorded> signature_of(int r, uint64_t seq) const;
  /// How many calls rank r has begun (a scan of its records: for errors).
  uint64_t calls_begun(int r) const;

  /// Eager operations (broadcast and reduce of at most kPayloadBytes)
  /// bypass the rounds: a writer (the broadcast's root, every rank of a
  /// reduce) puts op n into slot n % kEagerSlots of its own ring and goes
  /// on; readers take it from there whenever they get to it. Every rank
  /// counts them alike (next_eager() returns n). A slot is written again
  /// kEagerSlots ops later, so every kEagerCheck ops each rank publishes how
  /// many it has finished (eager_done) and waits until every rank has
  /// finished all but the last kEagerCheck of them (Call::begin_eager).
  /// 128 slots: 4 ranks on 2 cores, 1000 back-to-back 8 B ops (2026-11-26,
  /// the Zen 4 VM, medians of 5-7 alternating runs): broadcast 0.32-0.34 ->
  /// 0.20-0.26 us, reduce 0.31 -> 0.25 us against 32 slots (the ranks meet
  /// a quarter as often); 256 and 512 did no better within the noise, 2
  /// ranks were 0.07 us with any.
  static constexpr uint64_t kEagerSlots = 128;
  static constexpr uint64_t kEagerCheck = kEagerSlots / 2;
  uint64_t next_eager() { return eager_++; }
  FlagLine& eager_slot(int writer, uint64_t n) const;
  FlagLine& eager_done(int r) const;

  /// Rank 0's TDIST_SHM_RING_BYTES, if set: broadcast, all_gather and
  /// gather then move messages of at least this many bytes per writer
  /// through a ring of slots (algorithms/shm/shm_handoff.h, SlotRing) in
  /// place of their measured thresholds (algorithms/shm/shm_move.cc).
  std::optional<size_t> ring_bytes() const { return ring_bytes_; }
  /// Rank 0's TDIST_SHM_HANDOFF (every rank checks its own value at
  /// connect, so a bad one fails there, naming the variable).
  HandoffMode handoff_mode() const { return handoff_mode_; }

  /// True if every rank can read and write every other rank's memory
  /// directly (shm_single_copy.h); decided at connect.
  bool single_copy() const { return single_copy_.enabled; }
  /// The single-copy settings every rank agreed on at connect.
  const SingleCopySettings& single_copy_settings() const { return single_copy_; }
  /// The group has more ranks than the CPUs its ranks may run on together
  /// (the union of their affinity masks): agreed at connect, so every rank
  /// picks the same protocol and wait policy from it.
  bool oversubscribed() const { return single_copy_.oversubscribed; }
  /// Rank r's process, for single copy.
  pid_t pid(int r) const;

  /// Why a rank aborted; peers raise the same exception type.
  enum class AbortKind : uint8_t { kOther = 0, kTimeout = 1, kNetwork = 2 };
  /// Marks this rank as failed with `reason` (unless another rank already
  /// did: its reason is the root cause) and wakes every sleeper, so peers
  /// stop waiting. The group is unusable afterwards.
  void abort(const std::string& reason, AbortKind kind) noexcept;
  /// If any rank aborted, throws what it failed with (DistTimeoutError,
  /// DistNetworkError or DistBackendError): "<op>: rank R aborted the
  /// group: <reason>".
  void check_aborted(std::string_view op) const;
  /// The first rank that aborted the group, or -1 (cheap: builds no message).
  int aborted_rank() const;

 private:
  ShmGroup(Segment segment, int rank, int size, size_t buffer_bytes);
  RankArea& area(int r) const;

  Segment segment_;
  int rank_;
  int size_;
  size_t buffer_bytes_;
  size_t data_offset_;
  WaitPolicy policy_;
  std::optional<size_t> ring_bytes_;
  HandoffMode handoff_mode_ = HandoffMode::kAuto;
  uint64_t round_ = 0;
  uint64_t eager_ = 0;
  uint32_t stamp_ = 0;
  uint64_t history_ = 0;  // of the calls begun (CallStamp::history)
  Recorded pending_{};    // the current call's record (written or not)
  bool record_pending_ = false;
  void write_record();
  SingleCopySettings single_copy_;
  std::vector<int> group_ranks_;
};

/// The bytes of a segment for `size` ranks and `buffer_bytes` per buffer.
size_t segment_bytes(int size, size_t buffer_bytes);

}  // namespace tdist::transport::shm
