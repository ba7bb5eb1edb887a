#pragma once

// The collective algorithms, written once over the transport interface and
// the pure rank arithmetic of patterns/. Each entry point runs one
// collective to completion on the calling thread (the process group runs it
// on its worker thread for async work). Buffers are raw bytes plus dtype and
// element counts; the process group layer validates arguments before any of
// these run, so these only check what they alone can see.
//
// Every algorithm works for any group size, 1 and non-powers of two
// included. Algorithms are chosen per call by select_*() (tuning/tcp_model.h) unless
// forced by TDIST_ALGO_<OP>=name.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/call_signature.h"
#include "common/scratch.h"
#include "tdist/dtype.h"
#include "tdist/reduce_op.h"
#include "transport/transport.h"

namespace tdist::algorithms {

using transport::Clock;
using transport::RequestPtr;

/// What a call leaves for its peers beside the data path, and reads of
/// theirs (the process group keeps these notes in its store): why it failed,
/// before it aborts its connections (a peer whose connection broke in the
/// middle of a message sees only a reset); that it is in a call that has
/// waited long, for a timeout to name the ranks that never said so instead
/// of only the peer it happened to wait for (in a ring, a neighbour waiting
/// for the same missing rank); and with which signature (a broadcast whose
/// ranks all think another is the root moves nothing anyone could compare).
///
/// The notes are diagnostics, and the store may not answer (its host
/// stopped or cut off): every read or write gives up at `until` (a call's
/// deadline while it waits; kLateNotes from the failure once it has failed),
/// returning "nothing known", so that they never hold a call past its
/// timeout by more than kLateNotes.
class CallNotes {
 public:
  virtual ~CallNotes() = default;
  /// The call failed with `error` (abort_call, before the transport's
  /// abort); gives up kLateNotes from now.
  virtual void failed(const std::exception_ptr& error) noexcept = 0;
  /// This rank is in call `sig.seq`, passing `sig`.
  virtual void arrived(const tdist::detail::CallSignature& sig, Clock::time_point until) noexcept = 0;
  /// The group's ranks, this one aside, that have not said they are in call
  /// `seq`; nothing if that cannot be told (the store does not answer).
  virtual std::optional<std::vector<int>> missing(uint64_t seq, Clock::time_point until) noexcept = 0;
  /// A rank that said it is in call `mine.seq` with another signature: its
  /// rank and signature.
  virtual std::optional<std::pair<int, tdist::detail::CallSignature>> differing(
      const tdist::detail::CallSignature& mine, Clock::time_point until) noexcept = 0;
  /// The reason a rank left with failed() (the group's first), if any.
  virtual std::optional<std::string> failure(Clock::time_point until) noexcept {
    (void)until;
    return std::nullopt;
  }
};

/// How long the notes may take once a call has failed or timed out (its
/// timeout's message, the reason a peer left): a live store answers in
/// microseconds, a loaded one in milliseconds.
inline constexpr std::chrono::milliseconds kLateNotes{500};

struct CallContext;

/// What a call that waits long does now and then (wait_all over TCP, the
/// failure checks of a shared-memory wait): past half its timeout (at most
/// a second) it tells ctx.notes, and its peers through ctx.transport
/// (Transport::announce_waiting), that it is in the call, and from then on
/// compares, every 200 ms, the signatures that the others left there,
/// raising DistBackendError on a mismatch, or with the reason a peer left
/// when it failed the group (a peer's abort notice may never be read by a
/// rank that waits on shared memory).
struct LongWait {
  bool noted = false;
  Clock::time_point next_compare{};
  /// `my_rank` names this rank in messages (the whole group's number; -1:
  /// the transport's).
  void poll(const CallContext& ctx, int my_rank);
};

/// Everything one collective call needs besides its buffers.
struct CallContext {
  transport::Transport& transport;
  /// The op's name for messages: "all_reduce". Views a string that outlives
  /// the call (a literal, or the queued task's name).
  std::string_view op;
  /// The call's sequence number in its group; identical on every rank.
  uint64_t seq = 0;
  /// When the call must give up, and the timeout it came from (for messages).
  Clock::time_point deadline = Clock::time_point::max();
  std::chrono::milliseconds timeout{0};

  /// What this rank passed to the call (seq included), carried by every
  /// message and flag of the call and compared by its peers before they
  /// use any of its data (common/call_signature.h). Empty: unchecked.
  tdist::detail::CallSignature sig{};
  /// This rank's signature of the call before (empty if none), to name
  /// both sides when a peer's message of that call is found unreceived.
  tdist::detail::CallSignature previous{};
  /// Null: no notes (timeouts name only the peers waited for).
  CallNotes* notes = nullptr;
  /// When this rank entered the call, on the flight recorder's clock (0:
  /// unknown), recorded with its signature for peers to read.
  int64_t entered_at = 0;

  int rank() const { return transport.rank(); }
  /// The transport's isend/irecv with this call's signature.
  RequestPtr isend(int to, uint64_t tag, const void* data, size_t nbytes) const {
    return transport.isend(to, tag, data, nbytes, sig);
  }
  RequestPtr irecv(int from, uint64_t tag, void* data, size_t nbytes) const {
    return transport.irecv(from, tag, data, nbytes, sig);
  }
  int size() const { return transport.size(); }
  /// "all_reduce (call #7 in this group)" for messages; "connect (the
  /// start-up barrier)" for the barrier that ends a group's connect.
  std::string label() const {
    if (seq == kStartupSeq) return std::string(op) + " (the start-up barrier)";
    return std::string(op) + " (call #" + std::to_string(seq) + " in this group)";
  }
  /// The sequence number of the barrier that ends a group's connect: one
  /// no call reaches (tags keep 39 bits of it), so that the group's calls
  /// still count from 0 and none can take its messages.
  static constexpr uint64_t kStartupSeq = (uint64_t{1} << 39) - 1;
  /// The tag of step `step` of this call. Collective tags have the top bit
  /// clear; point-to-point tags (the process group's) have it set.
  uint64_t tag(uint32_t step = 0) const {
    return ((seq & ((uint64_t{1} << 39) - 1)) << 24) | (step & 0xffffff);
  }
};

/// Waits for every request. Rethrows the first error (a DistNetworkError
/// naming the peer) with the op and its sequence number put into its message
/// (with_context: same type); at the deadline raises DistTimeoutError naming the op,
/// its sequence number, the timeout and the peers still pending. Before
/// throwing it aborts ctx.transport with that error: the transport cannot
/// cancel one request, and a receive left pending would write into a buffer
/// the caller frees while unwinding (Gloo likewise closes its pairs when an
/// operation times out). Peers then fail fast instead of waiting out their
/// own timeouts.
void wait_all(const CallContext& ctx, const std::vector<RequestPtr>& requests);

// ---- Algorithm names (TDIST_ALGO_<OP> takes these strings) ----
enum class AllReduceAlgo { kAuto, kRecursiveDoubling, kRing, kRabenseifner };
enum class BroadcastAlgo { kAuto, kBinomial, kScatterAllGather };
enum class ReduceAlgo { kAuto, kBinomial, kReduceScatterGather };
enum class AllGatherAlgo { kAuto, kRing, kRecursiveDoubling, kBruck };
enum class GatherAlgo { kAuto, kBinomial, kLinear };
enum class ScatterAlgo { kAuto, kBinomial, kLinear };
enum class ReduceScatterAlgo { kAuto, kRing, kRecursiveHalving };
enum class AllToAllAlgo { kAuto, kPairwise, kLinear };
enum class BarrierAlgo { kAuto, kDissemination };

// ---- Collectives ----

/// In place: every rank ends with op over all ranks' `data`, bitwise
/// identical on every rank (floating point included). Applies AVG's
/// division and PREMUL_SUM's factor.
void all_reduce(const CallContext& ctx, void* data, size_t count, DType dtype, const ReduceOp& op,
                AllReduceAlgo algo = AllReduceAlgo::kAuto);

/// In place: every rank ends with root's `nbytes` bytes.
void broadcast(const CallContext& ctx, void* data, size_t nbytes, int root,
               BroadcastAlgo algo = BroadcastAlgo::kAuto);

/// In place on root (other ranks' `data` is left unspecified: it may be used
/// as scratch, as torch allows): root ends with op over all ranks' data.
void reduce(const CallContext& ctx, void* data, size_t count, DType dtype, const ReduceOp& op, int root,
            ReduceAlgo algo = ReduceAlgo::kAuto);

/// `out` is the concatenation of every rank's block; rank r's block has
/// `bytes[r]` bytes (blocks may differ in size). `in` holds this rank's
/// block; it may point at this rank's slot of `out` (in place).
void all_gather(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& bytes,
                AllGatherAlgo algo = AllGatherAlgo::kAuto);

/// Like all_gather, but only `root` receives (`out` is ignored elsewhere).
void gather(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& bytes, int root,
            GatherAlgo algo = GatherAlgo::kAuto);

/// Root's `in` is the concatenation of blocks of `bytes[r]` bytes; rank r
/// receives its block into `out` (`in` is ignored elsewhere).
void scatter(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& bytes, int root,
             ScatterAlgo algo = ScatterAlgo::kAuto);

/// `in` is the concatenation of size() blocks of `counts[r]` elements; rank r
/// ends with op over every rank's block r in `out`. `out` may point at this
/// rank's block of `in`. `in` is not modified unless it aliases `out`.
void reduce_scatter(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& counts,
                    DType dtype, const ReduceOp& op, ReduceScatterAlgo algo = ReduceScatterAlgo::kAuto);

/// Block r of `in` (send_bytes[r] bytes at send_offsets[r]) goes to rank r,
/// landing in its `out` at recv_offsets[this rank] (recv_bytes[this rank]
/// bytes). `in` and `out` do not overlap.
void all_to_all(const CallContext& ctx, const void* in, const std::vector<size_t>& send_bytes,
                const std::vector<size_t>& send_offsets, void* out, const std::vector<size_t>& recv_bytes,
                const std::vector<size_t>& recv_offsets, AllToAllAlgo algo = AllToAllAlgo::kAuto);

/// Returns once every rank has entered.
void barrier(const CallContext& ctx, BarrierAlgo algo = BarrierAlgo::kAuto);

// ---- Internal: building blocks the algorithm files share ----
// Not for use outside src/algorithms/.
namespace detail {

/// Bytes per pipeline segment. Large enough that the per-message cost (a
/// 48-byte header, a syscall and a wake-up of the receiver, ~5-10 us on
/// loopback TCP) stays under ~10% of the ~50 us a segment takes to cross at
/// a few GB/s; small enough that a segment and its reduction operand stay in
/// L2 and that a ring step of a few MiB is cut into several segments, so one
/// segment is reduced while the next one is on the wire.
inline constexpr size_t kSegmentBytes = size_t{256} << 10;
/// Receives posted ahead of the one being reduced: 2 posts segment k + 1
/// before segment k is reduced (double buffering).
inline constexpr size_t kPipelineDepth = 2;

/// The whole segment size in elements of `element_bytes` (at least 1).
constexpr size_t segment_elements(size_t element_bytes) {
  return element_bytes >= kSegmentBytes ? 1 : kSegmentBytes / element_bytes;
}

using tdist::detail::make_scratch;
using tdist::detail::Scratch;

/// Raises DistInvalidArgument, before any communication, if this rank's
/// block to itself has another size in `send_bytes` than in `recv_bytes`
/// (an all_to_all's own block is copied, not sent: nothing else would
/// notice, and the rest of the received block would be left stale).
void check_own_block(const CallContext& ctx, const std::vector<size_t>& send_bytes,
                     const std::vector<size_t>& recv_bytes);

/// Raises DistBackendError naming both calls if ctx.transport holds a
/// message that shows a peer's call differs from this one
/// (Transport::conflicting_message), aborting ctx.transport first so that
/// every peer fails too.
void check_unmatched(const CallContext& ctx);
/// The check of check_unmatched without the abort (for callers that abort
/// on any error themselves); `my_rank` names this rank in the message (-1:
/// ctx.rank()).
void throw_if_unmatched(const CallContext& ctx, int my_rank = -1);

/// The message of a call that timed out waiting for `waited` (ranks of
/// the group; transport::kAnySource: any rank), with `details` on what it
/// waited for: "<label>: Timed out after N ms waiting for rank 2<details>",
/// then "; rank 1 never said it reached this call (behind, stopped or
/// dead)" when such ranks are known: from ctx.notes (the group's store),
/// less the ranks that said so through the transport or sent this rank a
/// message of the call when `transport_knows` (a thread that waits on TCP
/// reads what peers send; one that waits on shared memory may not), or
/// from the transport alone when the store does not answer. A rank waited
/// for that is not among them reached the call and waits in turn (a ring's
/// neighbour): then the missing ranks are named as the ones waited for,
/// and the healthy one, with its details, not at all.
std::string timeout_text(const CallContext& ctx, const std::vector<int>& waited, const std::string& details,
                         bool transport_knows);

/// wait_all of one request.
void wait_one(const CallContext& ctx, const RequestPtr& request);

/// isend / irecv, or nothing (null, which wait_all skips) for 0 bytes: both
/// sides of every transfer know its size, so empty ones are skipped on both.
inline RequestPtr post_send(const CallContext& ctx, int to, uint64_t tag, const void* data, size_t nbytes) {
  return nbytes == 0 ? nullptr : ctx.isend(to, tag, data, nbytes);
}
inline RequestPtr post_recv(const CallContext& ctx, int from, uint64_t tag, void* data, size_t nbytes) {
  return nbytes == 0 ? nullptr : ctx.irecv(from, tag, data, nbytes);
}

/// Aborts ctx.transport with `error`, so that no request still pending can
/// touch a buffer once the call unwinds. Never throws.
void abort_call(const CallContext& ctx, std::exception_ptr error) noexcept;

/// Runs a collective's communication; any exception aborts the transport
/// (see wait_all) before it propagates unchanged.
template <typename F>
void guarded(const CallContext& ctx, F&& body) {
  try {
    body();
  } catch (...) {
    abort_call(ctx, std::current_exception());
    throw;
  }
}

/// Reduction of one call: dtype, operator and group size (for AVG).
struct Combiner {
  DType dtype;
  ReduceOp op;
  size_t element_bytes;
  int world_size;

  /// local = lower op upper, where the received partial is the lower
  /// (contributions of lower ranks) if `received_first`. The operands are
  /// passed to reduce_into in exactly that order, so two ranks combining the
  /// same two partials get the same bits, NaN payloads and signed zeros
  /// included. `received` may be overwritten.
  void combine(uint8_t* local, uint8_t* received, size_t count, bool received_first) const;
  /// AVG's division, once per element of the final result.
  void finalize(uint8_t* data, size_t count) const;
};

/// One step of a reducing pattern, pipelined in segments: sends `send_count`
/// elements at `send` to `to` and receives `recv_count` elements from
/// `from`, combining each received segment into `acc` (Combiner::combine).
/// Either peer may be patterns::kNoPeer. `send` is either disjoint from
/// `acc` or the same range (recursive doubling); then each segment is
/// overwritten only after it was sent. Both sides cut the range into the
/// same segments, all under tag ctx.tag(step).
void reduce_exchange(const CallContext& ctx, uint32_t step, int to, const uint8_t* send, size_t send_count,
                     int from, uint8_t* acc, size_t recv_count, bool received_first,
                     const Combiner& combiner);

/// Element offsets of chunks: chunk i is [bounds[i], bounds[i + 1]).
using Bounds = std::vector<size_t>;

/// Bounds of a balanced partition of `count` into `parts` chunks.
Bounds balanced_bounds(size_t count, int parts);
/// Bounds of consecutive blocks of the given sizes.
Bounds prefix_bounds(const std::vector<size_t>& sizes);

/// Fold-in and recursive-halving core (Rabenseifner 2004) on `acc`, whose
/// chunks are `bounds`: p chunks, one per rank, if `per_rank`, else pof2
/// chunks, one per virtual rank. Afterwards a core rank holds its virtual
/// rank's chunks fully reduced (not finalized); extras hold nothing. Uses
/// steps [first_step, first_step + halving_num_steps(p)).
void halving_reduce_scatter(const CallContext& ctx, uint32_t first_step, uint8_t* acc, const Bounds& bounds,
                            bool per_rank, const Combiner& combiner);
uint32_t halving_num_steps(int p);

/// Ring reduce-scatter over the p blocks `bounds` of `in` (Patarasuk & Yuan
/// 2009), pipelined in segments across steps: a segment is forwarded as
/// soon as it is reduced. Partial results live in segment-sized scratch, so
/// `in` is only read (premultiplied on the fly if `premultiply_in`); block
/// rank()'s result, finalized, goes to `out`, which may alias that block of
/// `in`. Uses steps [first_step, first_step + p - 1).
void ring_reduce_scatter(const CallContext& ctx, uint32_t first_step, const uint8_t* in, uint8_t* out,
                         const Bounds& bounds, bool premultiply_in, const Combiner& combiner);

/// Ring all-gather of p byte blocks `byte_bounds` of `out`, indexed by ring
/// position, `me` being this rank's position and `next`/`prev` its
/// neighbours. This rank's block is sent from `own` (out's block may be
/// filled by the caller at any time, or be `own`). Segments are forwarded as
/// soon as they arrive. Uses steps [first_step, first_step + p - 1).
void ring_all_gather(const CallContext& ctx, uint32_t first_step, int me, int p, int next, int prev,
                     uint8_t* out, const Bounds& byte_bounds, const uint8_t* own);

}  // namespace detail

}  // namespace tdist::algorithms
