#pragma once

// Internal: every choice of how a collective runs, for every domain, and
// the sizes that cut its bytes. Include as "algorithms/tuning/tuning.h".
// docs/tuning.md has the same list as tables, with the figures behind the
// thresholds and the command that measures them.
//
//  1. The domain (TCP, shared memory, hierarchical):
//     ProcessGroupTdist::domain_for (process_group/tdist_backend.h), from
//     the domains the group built at connect (process_group/
//     transport_choice.cc). Not here: it depends on the group's hosts.
//  2. The algorithm, a pure function of the call's sizes and of facts every
//     rank of the group agreed on, so that every rank makes the same one:
//     - TCP: tcp_model.h, the cheapest algorithm under a cost model;
//     - shared memory: choose_shm_* below;
//     - hierarchical: hierarchical_all_reduce_whole below (the local and
//       cross stages then choose as above).
//  3. The sizes, below. Sizes that only cut an algorithm's bytes into
//     pieces without choosing anything stay beside the loop they cut, and
//     the transports' own sizes in the transport layer, which lies below
//     this one; docs/tuning.md lists every one of them with its place.
//
// Every choice has a name, which the calling thread records
// (note_chosen_algorithm) for the flight recorder's entry of the call and
// for tdist-bench's rows.

#include <cstddef>
#include <cstdint>
#include <optional>

#include "algorithms/tuning/tcp_model.h"
#include "transport/shm/shm_single_copy.h"

namespace tdist::algorithms {

// ---- Named decisions ----

/// The name of the algorithm the calling thread chose last (a static
/// string), or null if none since the last take: the flight recorder keeps
/// it with the call.
const char* take_chosen_algorithm();
/// Records `name` (a static string) as the calling thread's choice.
void note_chosen_algorithm(const char* name);

// ---- Shared memory ----

/// The algorithms of the shared-memory domain (algorithms/shm/):
///  - eager: at most kPayloadBytes, in a ring of flag lines; the ranks that
///    keep nothing run on (broadcast, reduce);
///  - one-shot: every rank reduces every rank's whole contribution;
///  - single copy: straight between the ranks' memories (process_vm_readv/
///    writev), for blocks inside the shape's window;
///  - two-shot: a reduce-scatter then an all-gather through the buffers;
///  - ring: a ring of slots, the writer up to a ring ahead of its readers;
///  - rounds: a buffer per rank per round.
enum class ShmAlgo { kEager, kOneShot, kSingleCopy, kTwoShot, kRing, kRounds };

/// "shm eager", "shm one-shot", "shm single copy", "shm two-shot",
/// "shm ring", "shm rounds".
const char* shm_algo_name(ShmAlgo algo);

/// What a shared-memory group agreed on at connect and every choice
/// depends on (ShmGroup holds them; shm_facts in algorithms/shm/shm_call.h).
struct ShmFacts {
  size_t buffer_bytes = 0;  // each rank's shared buffer
  /// Rank 0's TDIST_SHM_RING_BYTES: replaces both ring thresholds.
  std::optional<size_t> ring_bytes;
  /// Single copy's settings, and whether some rank may run on fewer cores
  /// than the group has ranks (single_copy.oversubscribed).
  transport::shm::SingleCopySettings single_copy;
};

/// all_reduce (rooted = false) and reduce: eager for a reduce of at most
/// kPayloadBytes, one-shot up to kOneShotMaxBytes (and one buffer), single
/// copy inside the kReduce window (not for PREMUL_SUM), else two-shot.
ShmAlgo choose_shm_reduce(size_t bytes, bool rooted, bool premul_sum, const ShmFacts& facts);
/// broadcast: eager, single copy (kShared), ring from the ring threshold,
/// else rounds.
ShmAlgo choose_shm_broadcast(size_t bytes, const ShmFacts& facts);
/// all_gather and gather, by their largest block: single copy (kGather),
/// ring from the gathers' ring threshold, else rounds.
ShmAlgo choose_shm_gather(size_t largest_block, const ShmFacts& facts);
/// scatter, by its largest block: single copy (kOneSource), else rounds.
ShmAlgo choose_shm_scatter(size_t largest_block, const ShmFacts& facts);

/// all_to_all, once the ranks agreed on the largest block of any pair
/// (in its first round): single copy for a largest block inside the
/// kAllToAll window, and also for one above the window's top that a
/// one-round buffer section (`first_section` bytes) would have carried,
/// since a sender whose own blocks reached the window's bottom did not
/// fill its sections (all_to_all_skips_sections); rounds otherwise, and
/// whenever the block sizes did not fit in the first round's buffer
/// (`sizes_fit` false: nobody published its input's address there).
ShmAlgo choose_shm_all_to_all(size_t largest_block, bool sizes_fit, size_t first_section,
                              const ShmFacts& facts);
/// Whether an all_to_all sender whose largest block is `own_largest`
/// leaves its first-round sections empty: single copy will fetch its
/// blocks, since the agreed largest block is then at least the window's
/// bottom (choose_shm_all_to_all's rule, from the sender's side).
bool all_to_all_skips_sections(size_t own_largest, const ShmFacts& facts);

/// Whether a round whose part per rank is `bytes` rides in the ranks' flag
/// lines (one cache-line transfer per peer) instead of their buffers: the
/// eager ops, one-shot reductions, gather rounds and reduce_scatter
/// sections up to kPayloadBytes.
bool shm_round_in_flag_line(size_t bytes);

/// Messages of at least this many bytes per writer go through a ring of
/// slots: kDefaultRingBytes, or for the gathers of an oversubscribed group
/// kOversubscribedGatherRingBytes; TDIST_SHM_RING_BYTES replaces both.
size_t shm_ring_threshold(bool gather, const ShmFacts& facts);

/// The shapes of single-copy operations, which profit from it at different
/// sizes: one source read by every other rank (scatter); one source whose
/// owner writes part of every other rank's copy while they read the rest
/// (broadcast); every rank's block read by every other (all_gather,
/// gather); a block per pair (all_to_all); a piece of every rank's tensor
/// read, reduced and written back by its owner (all_reduce, reduce).
enum class SingleCopyShape { kOneSource, kShared, kGather, kAllToAll, kReduce };

/// The block sizes, in bytes, with which an operation copies directly:
/// [min, max] (empty when min > max).
struct SingleCopyWindow {
  size_t min;
  size_t max;
  bool contains(size_t bytes) const { return bytes >= min && bytes <= max; }
  bool empty() const { return min > max; }
};

/// The window of `shape` for a group with `settings`: empty unless single
/// copy is enabled; the overrides (TDIST_SHM_SINGLE_COPY_MIN/MAX_BYTES)
/// when set; else the measured window, narrowed where ranks outnumber cores
/// and where the kernel's copy is slow.
SingleCopyWindow single_copy_window(SingleCopyShape shape,
                                    const transport::shm::SingleCopySettings& settings);

// ---- Hierarchical ----

/// all_reduce messages up to this size cross hosts whole from every local
/// rank (the link carries L copies of them, at most 8 KiB with 8 ranks per
/// host) rather than in pieces, saving the shared-memory all-gather.
inline constexpr size_t kHierarchicalWholeAllReduceBytes = 1024;
inline bool hierarchical_all_reduce_whole(size_t bytes) {
  return bytes <= kHierarchicalWholeAllReduceBytes;
}

// ---- Sizes (docs/tuning.md has the figures behind each) ----

/// One-shot reductions up to here; two-shot above.
inline constexpr size_t kOneShotMaxBytes = size_t{32} << 10;
/// Rounds of broadcast and all_gather/gather carry at most this much per
/// rank, though a buffer holds more: a round's piece then stays in the L2
/// caches between the writer's copy and the readers'. (The reducing ops
/// keep whole buffers: shorter rounds made them slower.)
inline constexpr size_t kCopyRoundBytes = size_t{256} << 10;
/// Two-shot rounds are at most this long when ranks outnumber cores: ranks
/// that take turns on a core evict each other's lines, and rounds that stay
/// in L2 beat fewer, longer ones. With a core per rank shorter rounds gain
/// nothing.
inline constexpr size_t kOversubscribedRoundBytes = size_t{128} << 10;
/// The ring of slots, from this many bytes per writer.
inline constexpr size_t kDefaultRingBytes = size_t{1} << 20;
/// ... and for the gathers of an oversubscribed group, where the ring lost
/// to the rounds below it.
inline constexpr size_t kOversubscribedGatherRingBytes = size_t{8} << 20;
/// The ring's slots: broadcast (one writer), the gathers (every rank writes
/// and reads).
inline constexpr size_t kBroadcastSlotBytes = size_t{128} << 10;
inline constexpr size_t kGatherSlotBytes = size_t{512} << 10;
/// A single-copy broadcast of at least this many bytes has the root write
/// part of every reader's copy (below, a second system call costs more than
/// it saves).
inline constexpr size_t kBroadcastShareMinBytes = size_t{32} << 10;
/// Single-copy reductions read this much per tile, over all peers.
inline constexpr size_t kSingleCopyTileBytes = size_t{256} << 10;
/// Outside probe rounds, hand-over chunks smaller than this are written
/// with ordinary stores and never timed (algorithms/shm/shm_handoff.h).
inline constexpr size_t kHandoffMinBytes = size_t{64} << 10;

}  // namespace tdist::algorithms
