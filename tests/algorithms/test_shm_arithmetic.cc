// The pure arithmetic of the shared-memory collectives.

#include <gtest/gtest.h>

#include "algorithms/shm/shm_common.h"

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

}  // namespace
}  // namespace tdist::algorithms::shm::detail
