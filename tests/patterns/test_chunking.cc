#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "algorithms/patterns/chunking.h"

namespace tdist::patterns {
namespace {

static_assert(is_pow2(1) && is_pow2(2) && is_pow2(64) && !is_pow2(0) && !is_pow2(3) && !is_pow2(-4));
static_assert(floor_log2(1) == 0 && floor_log2(2) == 1 && floor_log2(3) == 1 && floor_log2(64) == 6);
static_assert(ceil_log2(1) == 0 && ceil_log2(2) == 1 && ceil_log2(3) == 2 && ceil_log2(5) == 3 &&
              ceil_log2(64) == 6);
static_assert(pow2_floor(1) == 1 && pow2_floor(7) == 4 && pow2_floor(8) == 8 && pow2_ceil(5) == 8);
static_assert(lowest_bit(12) == 4 && lowest_bit(1) == 1 && rank_mod(-1, 5) == 4 && rank_mod(-10, 5) == 0);
static_assert(chunk_elements(10, 3, 0) == ElementRange{0, 4} &&
              chunk_elements(10, 3, 2) == ElementRange{7, 3});
static_assert(chunk_range_elements(10, 3, ChunkRange{1, 2}) == ElementRange{4, 6});
static_assert(segment_of(ElementRange{5, 10}, 4, 2) == ElementRange{13, 2});

TEST(IntegerHelpers, AgreeWithNaiveLoops) {
  for (int x = 1; x <= 5000; ++x) {
    int floor_lg = 0;
    while ((2 << floor_lg) <= x) ++floor_lg;
    int ceil_lg = 0;
    while ((1 << ceil_lg) < x) ++ceil_lg;
    EXPECT_EQ(floor_log2(x), floor_lg) << x;
    EXPECT_EQ(ceil_log2(x), ceil_lg) << x;
    EXPECT_EQ(pow2_floor(x), 1 << floor_lg) << x;
    EXPECT_EQ(pow2_ceil(x), 1 << ceil_lg) << x;
    EXPECT_EQ(is_pow2(x), floor_lg == ceil_lg) << x;
    EXPECT_EQ(x % lowest_bit(x), 0) << x;
    EXPECT_EQ((x / lowest_bit(x)) % 2, 1) << x;
  }
  for (int p = 1; p <= 20; ++p) {
    for (int x = -3 * p; x <= 3 * p; ++x) EXPECT_EQ(rank_mod(x, p), ((x % p) + p) % p);
  }
}

TEST(Partition, BalancedTilingForManyCountsAndParts) {
  for (size_t count : {0UL, 1UL, 2UL, 3UL, 7UL, 63UL, 64UL, 65UL, 100UL, 1000UL, 1000003UL}) {
    for (int parts = 1; parts <= 70; ++parts) {
      SCOPED_TRACE("count=" + std::to_string(count) + " parts=" + std::to_string(parts));
      const std::vector<ElementRange> chunks = partition(count, parts);
      ASSERT_EQ(chunks.size(), static_cast<size_t>(parts));
      const size_t base = count / static_cast<size_t>(parts);
      const size_t longer = count % static_cast<size_t>(parts);
      size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        EXPECT_EQ(chunks[i].offset, next);
        EXPECT_EQ(chunks[i].length,
                  base + (static_cast<size_t>(i) < longer ? 1 : 0));  // first count % parts longer
        EXPECT_EQ(chunk_offset(count, parts, i), chunks[i].offset);
        next = chunks[i].end();
      }
      EXPECT_EQ(next, count);
      EXPECT_EQ(chunk_offset(count, parts, parts), count);
      for (int first = 0; first <= parts; ++first) {
        for (int n = 0; first + n <= parts; ++n) {
          const ElementRange r = chunk_range_elements(count, parts, ChunkRange{first, n});
          const size_t begin = first < parts ? chunks[first].offset : count;
          const size_t end = n == 0 ? begin : chunks[first + n - 1].end();
          ASSERT_EQ(r, (ElementRange{begin, end - begin})) << "chunks [" << first << ", " << first + n << ")";
        }
      }
    }
  }
}

TEST(Segments, FixedStrideWithShorterLast) {
  EXPECT_TRUE(segments(ElementRange{17, 0}, 4).empty());
  EXPECT_EQ(segment_count(0, 1), 0U);
  EXPECT_EQ(segment_count(8, 4), 2U);
  EXPECT_EQ(segment_count(9, 4), 3U);
  EXPECT_EQ(segment_count(static_cast<size_t>(-1), static_cast<size_t>(-1)), 1U);  // no overflow
  for (size_t offset : {0UL, 3UL, 4096UL}) {
    for (size_t length = 0; length <= 100; ++length) {
      for (size_t max = 1; max <= 40; ++max) {
        const std::vector<ElementRange> segs = segments(ElementRange{offset, length}, max);
        ASSERT_EQ(segs.size(), (length + max - 1) / max);
        size_t next = offset;
        for (size_t i = 0; i < segs.size(); ++i) {
          ASSERT_EQ(segs[i].offset, next);
          ASSERT_GE(segs[i].length, 1U);
          if (i + 1 < segs.size()) {
            ASSERT_EQ(segs[i].length, max);
          }
          ASSERT_LE(segs[i].length, max);
          next = segs[i].end();
        }
        ASSERT_EQ(next, offset + length);
      }
    }
  }
}

TEST(ChunkRange, Basics) {
  constexpr ChunkRange r{3, 4};
  static_assert(r.end() == 7 && r.contains(3) && r.contains(6) && !r.contains(7) && !r.contains(2));
  static_assert(ChunkRange{}.empty() && !r.empty());
  constexpr Step idle{};
  static_assert(idle.idle() && !idle.sends() && !idle.receives());
  constexpr Step send = send_step(2, ChunkRange{0, 1});
  static_assert(send.sends() && !send.receives() && !send.idle() && send.send_chunks == ChunkRange{0, 1});
  constexpr Step recv = recv_step(3, ChunkRange{1, 2}, true);
  static_assert(recv.receives() && !recv.sends() && recv.reduce && recv.recv_from == 3);
  constexpr Step both = exchange_step(1, ChunkRange{0, 1}, 2, ChunkRange{1, 1});
  static_assert(both.send_to == 1 && both.recv_from == 2 && both.recv_chunks == ChunkRange{1, 1} &&
                !both.reduce);
}

}  // namespace
}  // namespace tdist::patterns
