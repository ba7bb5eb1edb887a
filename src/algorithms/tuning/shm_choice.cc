// The shared-memory domain's choices (tuning.h). docs/tuning.md has the
// figures behind each threshold.

#include "algorithms/tuning/tuning.h"
#include "transport/shm/shm_sync.h"

namespace tdist::algorithms {

const char* shm_algo_name(ShmAlgo algo) {
  switch (algo) {
    case ShmAlgo::kEager:
      return "shm eager";
    case ShmAlgo::kOneShot:
      return "shm one-shot";
    case ShmAlgo::kSingleCopy:
      return "shm single copy";
    case ShmAlgo::kTwoShot:
      return "shm two-shot";
    case ShmAlgo::kRing:
      return "shm ring";
    case ShmAlgo::kRounds:
      return "shm rounds";
  }
  return "shm unknown";
}

ShmAlgo choose_shm_reduce(size_t bytes, bool rooted, bool premul_sum, const ShmFacts& facts) {
  // A reduce's contributions fit the flag lines: only the root waits.
  if (rooted && bytes <= transport::shm::kPayloadBytes) return ShmAlgo::kEager;
  // Small enough that two-shot's second meeting would cost more than
  // reading every contribution whole.
  if (bytes <= transport::shm::kPayloadBytes || (bytes <= kOneShotMaxBytes && bytes <= facts.buffer_bytes))
    return ShmAlgo::kOneShot;
  // PREMUL_SUM's factor is applied on the way into the buffers, which
  // single copy skips.
  if (!premul_sum && single_copy_window(SingleCopyShape::kReduce, facts.single_copy).contains(bytes))
    return ShmAlgo::kSingleCopy;
  return ShmAlgo::kTwoShot;
}

ShmAlgo choose_shm_broadcast(size_t bytes, const ShmFacts& facts) {
  if (bytes <= transport::shm::kPayloadBytes) return ShmAlgo::kEager;
  if (single_copy_window(SingleCopyShape::kShared, facts.single_copy).contains(bytes))
    return ShmAlgo::kSingleCopy;
  if (bytes >= shm_ring_threshold(false, facts)) return ShmAlgo::kRing;
  return ShmAlgo::kRounds;
}

ShmAlgo choose_shm_gather(size_t largest_block, const ShmFacts& facts) {
  if (largest_block > 0 &&
      single_copy_window(SingleCopyShape::kGather, facts.single_copy).contains(largest_block))
    return ShmAlgo::kSingleCopy;
  if (largest_block >= shm_ring_threshold(true, facts)) return ShmAlgo::kRing;
  return ShmAlgo::kRounds;
}

ShmAlgo choose_shm_scatter(size_t largest_block, const ShmFacts& facts) {
  if (largest_block > 0 &&
      single_copy_window(SingleCopyShape::kOneSource, facts.single_copy).contains(largest_block))
    return ShmAlgo::kSingleCopy;
  return ShmAlgo::kRounds;
}

ShmAlgo choose_shm_all_to_all(size_t largest_block, bool sizes_fit, size_t first_section,
                              const ShmFacts& facts) {
  const SingleCopyWindow window = single_copy_window(SingleCopyShape::kAllToAll, facts.single_copy);
  const bool direct = sizes_fit && largest_block >= window.min &&
                      (largest_block <= window.max || largest_block <= first_section);
  return direct ? ShmAlgo::kSingleCopy : ShmAlgo::kRounds;
}

bool all_to_all_skips_sections(size_t own_largest, const ShmFacts& facts) {
  return own_largest >= single_copy_window(SingleCopyShape::kAllToAll, facts.single_copy).min;
}

bool shm_round_in_flag_line(size_t bytes) {
  return bytes <= transport::shm::kPayloadBytes;
}

size_t shm_ring_threshold(bool gather, const ShmFacts& facts) {
  if (facts.ring_bytes) return *facts.ring_bytes;
  return gather && facts.single_copy.oversubscribed ? kOversubscribedGatherRingBytes : kDefaultRingBytes;
}

}  // namespace tdist::algorithms
