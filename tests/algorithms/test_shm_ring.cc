// The ring of slots of the shared-memory broadcast and gathers
// (algorithms/shm/shm_common.h, SlotRing): a writer must not write into
// its buffer of the round before the ring until every reader has entered
// the ring, nor reuse a slot until every reader has released the chunk it
// holds. Each case makes the reader give up (abort the group) instead of
// going on: a writer that waits as it must then fails its claim with the
// abort; one that does not wait returns from it.

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

constexpr size_t kSlotsPerBuffer = 4;

void give_up(shm::ShmGroup& group) {
  abort_group(group, std::make_exception_ptr(DistBackendError("the reader gives up (test)")));
}

// True if claiming chunk j failed because the reader aborted the group.
bool claim_waits(SlotRing& ring, size_t j) {
  try {
    ring.claim(j);
  } catch (const DistBackendError& e) {
    return std::string(e.what()).find("rank 1 aborted the group") != std::string::npos;
  }
  return false;
}

bool all_bytes_are(const uint8_t* p, size_t n, uint8_t value) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != value) return false;
  }
  return true;
}

// Rank 1 reads rank 0's buffer of a round and stays there; rank 0 enters a
// ring: it may fill the slots in that round's other buffer, not those in
// the one rank 1 reads.
void a_reader_still_in_the_round_before(Store& store, Group& g, int rank) {
  auto group = shm::ShmGroup::connect(store, rank, 2, 60s, "before/");
  const size_t slot = group->buffer_bytes() / kSlotsPerBuffer;
  const std::string op = "all_gather";  // the contexts view their ops
  const std::string ring_op = "broadcast";
  const auto ctx = g.call(op);
  Call call{ctx, *group};
  const uint64_t k = call.begin_round();
  if (rank == 0) std::memset(group->buffer(0, k), 0x5a, group->buffer_bytes());
  group->publish_arrive(k);
  call.wait_arrive(1 - rank, k);
  if (rank == 1) {
    give_up(*group);
    store.wait({"before/done"});
    check(all_bytes_are(group->buffer(0, k), group->buffer_bytes(), 0x5a),
          "rank 0 wrote into the buffer rank 1 was reading");
    return;
  }
  const auto ring_ctx = g.call(ring_op);
  Call ring_call{ring_ctx, *group};
  SlotRing ring(ring_call, 3 * 2 * kSlotsPerBuffer * slot, slot, -1);
  for (size_t j = 0; j < kSlotsPerBuffer; ++j) {
    std::memset(ring.claim(j), 1, slot);
    ring.publish(j);
  }
  const bool waited = claim_waits(ring, kSlotsPerBuffer);
  store.set("before/done", to_bytes("1"));
  check(waited, "rank 0 claimed a slot in the buffer rank 1 was still reading");
}

// Rank 1 reads a whole ring of chunks and releases none: rank 0 must not
// claim the next chunk, whose slot holds the first.
void a_reader_that_releases_nothing(Store& store, Group& g, int rank) {
  auto group = shm::ShmGroup::connect(store, rank, 2, 60s, "release/");
  const size_t slot = group->buffer_bytes() / kSlotsPerBuffer;
  const size_t ring_chunks = 2 * kSlotsPerBuffer;
  const std::string op = "broadcast";  // the context views it
  const auto ctx = g.call(op);
  Call call{ctx, *group};
  SlotRing ring(call, 3 * ring_chunks * slot, slot, -1);
  if (rank == 1) {
    for (size_t j = 0; j < ring_chunks; ++j) {
      check(all_bytes_are(ring.await(0, j), slot, static_cast<uint8_t>(j + 1)),
            "chunk " + std::to_string(j) + " arrived wrong");
    }
    give_up(*group);
    store.wait({"release/done"});
    check(all_bytes_are(ring.await(0, 0), slot, 1), "rank 0 overwrote a chunk rank 1 had not released");
    return;
  }
  for (size_t j = 0; j < ring_chunks; ++j) {
    std::memset(ring.claim(j), static_cast<int>(j + 1), slot);
    ring.publish(j);
  }
  const bool waited = claim_waits(ring, ring_chunks);
  store.set("release/done", to_bytes("1"));
  check(waited, "rank 0 reused a slot rank 1 had not released");
}

TEST(SlotRing, AWriterWaitsForReadersToLeaveTheRoundBeforeAndToReleaseSlots) {
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    SCOPED_TRACE(mode_name(mode));
    std::string failures = run_with_store(
        mode, 2,
        [&](Store& store, int rank) -> KeepAlive {
          transport::TcpOptions options;
          options.timeout = 60s;
          std::shared_ptr<transport::Transport> t = transport::connect_tcp(store, rank, 2, options);
          Group g(*t);
          // Both cases run even if the first fails (its peer would wait
          // for the second's group in vain).
          std::string failed;
          for (auto* one_case : {a_reader_still_in_the_round_before, a_reader_that_releases_nothing}) {
            try {
              one_case(store, g, rank);
            } catch (const std::exception& e) {
              failed += std::string(failed.empty() ? "" : "; ") + e.what();
            }
          }
          check(failed.empty(), failed);
          return t;
        },
        120s);
    EXPECT_EQ(failures, "");
  }
}

}  // namespace
}  // namespace tdist::testing
