// The ring of slots of the shared-memory broadcast and gathers
// (algorithms/shm/shm_common.h, SlotRing): a writer must not write into
// its buffer of the round before the ring until every rank (not only the
// ring's readers) has entered the ring, nor reuse a slot until every
// reader has released the chunk it holds. Each case makes one rank give up
// (abort the group) instead of going on: a writer that waits as it must
// then fails its claim with the abort; one that does not wait returns from
// it.

#include <gtest/gtest.h>

#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "algorithms/shm/shm_common.h"
#include "test_harness.h"
#include "transport/shm/shm_group.h"

namespace tdist::testing {
namespace {

namespace shm = transport::shm;
using algorithms::shm::detail::abort_group;
using algorithms::shm::detail::Call;
using algorithms::shm::detail::SlotRing;

constexpr int kRanks = 3;
constexpr size_t kSlotsPerBuffer = 4;
constexpr size_t kRingChunks = 2 * kSlotsPerBuffer;

void give_up(shm::ShmGroup& group) {
  abort_group(group, std::make_exception_ptr(DistBackendError("a rank gives up (test)")));
}

// True if claiming chunk j failed because rank `quitter` aborted the group.
bool claim_waits(SlotRing& ring, size_t j, int quitter) {
  try {
    ring.claim(j);
  } catch (const DistBackendError& e) {
    return std::string(e.what()).find("rank " + std::to_string(quitter) + " aborted the group") !=
           std::string::npos;
  }
  return false;
}

bool all_bytes_are(const uint8_t* p, size_t n, uint8_t value) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != value) return false;
  }
  return true;
}

// A gather to rank 0 whose writer, rank 1, enters its ring while rank 2,
// which does not read in the gather, still reads rank 1's buffer of the
// round before: rank 1 may fill the slots in that round's other buffer,
// not those in the one rank 2 reads.
void a_rank_still_in_the_round_before(Store& store, Group& g, int rank) {
  auto group = shm::ShmGroup::connect(store, rank, kRanks, 60s, "before/");
  const size_t slot = group->buffer_bytes() / kSlotsPerBuffer;
  const std::string op = "all_gather";  // the contexts view their ops
  const std::string ring_op = "gather";
  const auto ctx = g.call(op);
  Call call{ctx, *group};
  const uint64_t k = call.begin_round();
  if (rank == 1) std::memset(group->buffer(1, k), 0x5a, group->buffer_bytes());
  group->publish_arrive(k);
  for (int r = 0; r < kRanks; ++r) {
    if (r != rank) call.wait_arrive(r, k);
  }
  if (rank == 2) {
    give_up(*group);
    store.wait({"before/done"});
    check(all_bytes_are(group->buffer(1, k), group->buffer_bytes(), 0x5a),
          "rank 1 wrote into the buffer rank 2 was reading");
    return;
  }
  const auto ring_ctx = g.call(ring_op);
  Call ring_call{ring_ctx, *group};
  SlotRing ring(ring_call, 3 * kRingChunks * slot, slot, /*only_reader=*/0);
  if (rank == 0) {
    store.set("before/entered", to_bytes("1"));
    store.wait({"before/done"});
    return;
  }
  // Only rank 2 is left outside the ring.
  store.wait({"before/entered"});
  for (size_t j = 0; j < kSlotsPerBuffer; ++j) {
    std::memset(ring.claim(j), 1, slot);
    ring.publish(j);
  }
  const bool waited = claim_waits(ring, kSlotsPerBuffer, 2);
  store.set("before/done", to_bytes("1"));
  check(waited, "rank 1 claimed a slot in the buffer rank 2 was still reading");
}

// Rank 0 writes to ranks 1 and 2; rank 2 releases every chunk of the first
// lap, rank 1 reads them and releases none: rank 0 must not claim the next
// chunk, whose slot holds the first.
void a_reader_that_releases_nothing(Store& store, Group& g, int rank) {
  auto group = shm::ShmGroup::connect(store, rank, kRanks, 60s, "release/");
  const size_t slot = group->buffer_bytes() / kSlotsPerBuffer;
  const std::string op = "broadcast";  // the context views it
  const auto ctx = g.call(op);
  Call call{ctx, *group};
  SlotRing ring(call, 3 * kRingChunks * slot, slot, -1);
  if (rank != 0) {
    for (size_t j = 0; j < kRingChunks; ++j) {
      check(all_bytes_are(ring.await(0, j), slot, static_cast<uint8_t>(j + 1)),
            "chunk " + std::to_string(j) + " arrived wrong");
      if (rank == 2) ring.release(j);
    }
    if (rank == 2) store.set("release/released", to_bytes("1"));
    if (rank == 1) give_up(*group);
    store.wait({"release/done"});
    check(all_bytes_are(ring.await(0, 0), slot, 1), "rank 0 overwrote a chunk rank 1 had not released");
    return;
  }
  for (size_t j = 0; j < kRingChunks; ++j) {
    std::memset(ring.claim(j), static_cast<int>(j + 1), slot);
    ring.publish(j);
  }
  // Only rank 1 holds the first chunk.
  store.wait({"release/released"});
  const bool waited = claim_waits(ring, kRingChunks, 1);
  store.set("release/done", to_bytes("1"));
  check(waited, "rank 0 reused a slot rank 1 had not released");
}

TEST(SlotRing, AWriterWaitsForEveryRankToLeaveTheRoundBeforeAndForReadersToReleaseSlots) {
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    SCOPED_TRACE(mode_name(mode));
    std::string failures = with_store_and_group(
        mode, kRanks,
        [&](Store& store, Group& g) {
          // Both cases run even if the first fails (its peers would wait
          // for the second's group in vain).
          std::string failed;
          for (auto* one_case : {a_rank_still_in_the_round_before, a_reader_that_releases_nothing}) {
            try {
              one_case(store, g, g.rank());
            } catch (const std::exception& e) {
              failed += std::string(failed.empty() ? "" : "; ") + e.what();
            }
          }
          check(failed.empty(), failed);
        },
        120s);
    EXPECT_EQ(failures, "");
  }
}

}  // namespace
}  // namespace tdist::testing
