// The pure arithmetic of the shared-memory collectives.

#include <gtest/gtest.h>

#include <stdlib.h>

#include <string>
#include <vector>

#include "algorithms/shm/shm_common.h"
#include "transport/shm/shm_single_copy.h"

namespace tdist::algorithms::shm::detail {
namespace {

TEST(TwoShotSection, SharesEveryRoundEvenlyInWholeCacheLinesWithinTheBuffer) {
  for (size_t eb : {size_t{1}, size_t{2}, size_t{4}, size_t{8}, size_t{16}}) {
    const size_t line = 64 / eb;
    for (int p : {1, 2, 3, 5, 8}) {
      const size_t full = (size_t{1} << 20) / static_cast<size_t>(p) / 64 * 64 / eb;  // a 1 MiB buffer
      for (size_t count : {size_t{1}, size_t{63}, size_t{64}, size_t{1000}, size_t{65537}, full,
                           full * static_cast<size_t>(p)}) {
        if (count > full * static_cast<size_t>(p)) continue;  // a round holds at most p full sections
        const size_t section = two_shot_section(count, p, eb, full);
        SCOPED_TRACE("eb " + std::to_string(eb) + ", p " + std::to_string(p) + ", count " +
                     std::to_string(count));
        EXPECT_LE(section, full);
        EXPECT_EQ(section % line, 0U);                       // pieces start on cache lines
        EXPECT_GE(section * static_cast<size_t>(p), count);  // the pieces cover the round
        EXPECT_LT(section,
                  (count + static_cast<size_t>(p) - 1) / static_cast<size_t>(p) + line);  // even share
      }
    }
  }
}

TEST(SingleCopyPiece, CoversTheTensorInWholePagesWithEvenShares) {
  for (size_t eb : {size_t{1}, size_t{2}, size_t{4}, size_t{8}, size_t{16}}) {
    const size_t unit = 4096 / eb;  // elements per 4 KiB
    for (int p : {1, 2, 3, 5, 8}) {
      for (size_t count : {size_t{1}, size_t{4095}, size_t{8193}, size_t{100003}, size_t{1} << 24}) {
        SCOPED_TRACE("eb " + std::to_string(eb) + ", p " + std::to_string(p) + ", count " +
                     std::to_string(count));
        const size_t piece = single_copy_piece(count, p, eb);
        EXPECT_EQ(piece % unit, 0U);                                  // owners never share a page's line
        EXPECT_GE(piece * static_cast<size_t>(p), count);             // the pieces cover the tensor
        EXPECT_LT(piece, count / static_cast<size_t>(p) + 2 * unit);  // an even share
        size_t covered = 0;
        for (int j = 0; j < p; ++j) covered += piece_of(count, piece, static_cast<size_t>(j)).length;
        EXPECT_EQ(covered, count);
      }
    }
  }
}

TEST(BroadcastPushedBytes, TheRootWritesAnEvenShareInWholePagesFrom32KiB) {
  EXPECT_EQ(broadcast_pushed_bytes(0, 2), 0U);
  EXPECT_EQ(broadcast_pushed_bytes(kBroadcastShareMinBytes - 1, 2), 0U);  // readers copy everything
  EXPECT_EQ(broadcast_pushed_bytes(kBroadcastShareMinBytes, 2), kBroadcastShareMinBytes / 2);
  EXPECT_EQ(broadcast_pushed_bytes(size_t{1} << 20, 2), size_t{512} << 10);
  for (int p : {2, 3, 5, 8}) {
    for (size_t n : {size_t{32} << 10, size_t{100003}, size_t{1} << 20, (size_t{64} << 20) + 5}) {
      const size_t pushed = broadcast_pushed_bytes(n, p);
      SCOPED_TRACE("p " + std::to_string(p) + ", n " + std::to_string(n));
      EXPECT_EQ(pushed % 4096, 0U);
      // The root's share over p - 1 readers is about what each reader reads.
      EXPECT_LE(pushed * static_cast<size_t>(p), n);
      EXPECT_GT((pushed + 4096) * static_cast<size_t>(p), n);
    }
  }
}

TEST(KernelCopy, TheEnvironmentReplacesTheMeasurementOfTheKernelsCopy) {
  const char* before = getenv("TDIST_SHM_KERNEL_COPY_SLOW");
  const std::string saved = before ? before : "";
  setenv("TDIST_SHM_KERNEL_COPY_SLOW", "1", 1);
  EXPECT_TRUE(transport::shm::kernel_copy_is_slow());
  setenv("TDIST_SHM_KERNEL_COPY_SLOW", "0", 1);
  EXPECT_FALSE(transport::shm::kernel_copy_is_slow());
  // Unset, the measurement decides (either answer; it must not fail).
  unsetenv("TDIST_SHM_KERNEL_COPY_SLOW");
  const bool measured = transport::shm::kernel_copy_is_slow();
  EXPECT_EQ(transport::shm::kernel_copy_is_slow(), measured);  // measured once
  if (before) setenv("TDIST_SHM_KERNEL_COPY_SLOW", saved.c_str(), 1);
}

TEST(HandoffProbes, EveryEarlyRoundThenOneOfEachKindPer128RoundsInAlternatingPlaces) {
  // The first rounds alternate: streamed at even, cached at odd ones. A
  // group's rounds start at 1; from there, before the periodic probes
  // start, each kind is measured twice and in each place at least once.
  int early[2][2] = {};  // [kind][place]
  for (uint64_t round = 1; round < kHandoffFirstProbes; ++round) {
    const HandoffProbe probe = handoff_probe(round);
    ASSERT_NE(probe, HandoffProbe::kNone) << round;
    EXPECT_EQ(probe, round % 2 == 1 ? HandoffProbe::kCached : HandoffProbe::kStreamed) << round;
    ++early[probe == HandoffProbe::kStreamed ? 1 : 0][handoff_place(round)];
  }
  for (auto& kind : early) {
    for (int count : kind) EXPECT_GE(count, 1);
    EXPECT_GE(kind[0] + kind[1], 2);
  }
  EXPECT_EQ(handoff_probe(kHandoffFirstProbes), HandoffProbe::kNone);
  // Later, in every period of 128 rounds: one probe of each kind, half a
  // period apart, at a place that moves from one period to the next (a
  // loop of calls whose rounds repeat does not meet the probes always in
  // the same step); consecutive periods keep their times in the other place.
  uint64_t last_cached_at = kHandoffProbeRounds;  // none yet
  for (uint64_t period : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{96}, uint64_t{97}}) {
    const uint64_t from = period * kHandoffProbeRounds;
    std::vector<uint64_t> cached;
    std::vector<uint64_t> streamed;
    for (uint64_t round = from; round < from + kHandoffProbeRounds; ++round) {
      const HandoffProbe probe = handoff_probe(round);
      if (probe == HandoffProbe::kCached) cached.push_back(round - from);
      if (probe == HandoffProbe::kStreamed) streamed.push_back(round - from);
      EXPECT_EQ(handoff_place(round), period % 2) << round;
    }
    ASSERT_EQ(cached.size(), 1U) << period;
    ASSERT_EQ(streamed.size(), 1U) << period;
    EXPECT_EQ((cached[0] + kHandoffProbeRounds / 2) % kHandoffProbeRounds, streamed[0]) << period;
    if (period == 2 || period == 3 || period == 97) {
      EXPECT_NE(cached[0], last_cached_at) << period;
    }
    last_cached_at = cached[0];
  }
  // Period 8: the cached probe 8 * 37 % 128 = 40 rounds in, the streamed
  // one 64 after.
  EXPECT_EQ(handoff_probe(1024 + 40), HandoffProbe::kCached);
  EXPECT_EQ(handoff_probe(1024 + 104), HandoffProbe::kStreamed);
  EXPECT_EQ(handoff_probe(1024), HandoffProbe::kNone);
}

TEST(HandoffProbes, TimesAreKeptPerMiBAndNeverAsZero) {
  EXPECT_EQ(ns_per_mib(1000, size_t{1} << 20), 1000U);
  EXPECT_EQ(ns_per_mib(1000, size_t{512} << 10), 2000U);  // a half-MiB slot
  EXPECT_EQ(ns_per_mib(2700, size_t{128} << 10), 21600U);
  EXPECT_EQ(ns_per_mib(0, size_t{64} << 10), 1U);  // 0 would read as "not measured"
  EXPECT_EQ(ns_per_mib(uint64_t{1} << 40, size_t{64} << 10), UINT32_MAX);
  EXPECT_EQ(ns_per_mib(5, 0), UINT32_MAX);
}

TEST(HandoffProbes, StreamingOnlyWhenEveryTimeIsMeasuredAndItsSumIsShorter) {
  EXPECT_EQ(best_probe(0, 0), 0U);
  EXPECT_EQ(best_probe(0, 7), 7U);
  EXPECT_EQ(best_probe(7, 0), 7U);
  EXPECT_EQ(best_probe(9, 7), 7U);
  // Two cores of the Zen 4 VM, ns per MiB: ordinary fills 400 us, streaming
  // ones 55 us, the reads alike.
  EXPECT_TRUE(handoff_prefers_streaming({400'000, 56'000}, {55'000, 60'000}));
  // One core: the reader's copy from the shared cache wins it for cached.
  EXPECT_FALSE(handoff_prefers_streaming({28'000, 24'000}, {22'000, 38'000}));
  // The sum decides, not either part: a slower fill, a much faster read.
  EXPECT_TRUE(handoff_prefers_streaming({10'000, 90'000}, {30'000, 20'000}));
  EXPECT_FALSE(handoff_prefers_streaming({30'000, 20'000}, {30'000, 20'000}));  // ties keep the cache
  // Streaming must save a quarter: 20% is noise on one core.
  EXPECT_FALSE(handoff_prefers_streaming({50'000, 50'000}, {40'000, 40'000}));
  EXPECT_FALSE(handoff_prefers_streaming({50'000, 50'000}, {37'500, 37'500}));
  EXPECT_TRUE(handoff_prefers_streaming({50'000, 50'000}, {37'000, 37'000}));
  // Anything unmeasured keeps ordinary stores.
  EXPECT_FALSE(handoff_prefers_streaming({0, 90'000}, {1, 1}));
  EXPECT_FALSE(handoff_prefers_streaming({90'000, 0}, {1, 1}));
  EXPECT_FALSE(handoff_prefers_streaming({90'000, 90'000}, {0, 1}));
  EXPECT_FALSE(handoff_prefers_streaming({90'000, 90'000}, {1, 0}));
  // Sums beyond 32 bits do not wrap (wrapped, 2^32 + 1 would read as 1).
  EXPECT_TRUE(handoff_prefers_streaming({UINT32_MAX, 2}, {100, 100}));
}

}  // namespace
}  // namespace tdist::algorithms::shm::detail
