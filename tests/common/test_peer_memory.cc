// common/peer_memory.h: whole transfers in pieces, and where a transfer that
// cannot go on stops. This process reads and writes a child's memory (a
// forked copy has the same addresses) and its own.

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <numeric>
#include <vector>

#include "common/peer_memory.h"

namespace tdist::detail {
namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t first) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(PeerMemory, ReadsAndWritesWholeInPiecesOfAnySize) {
  const auto source = pattern(100003, 7);  // odd: the last piece is short
  for (size_t piece : {size_t{1} << 30, size_t{4096}, size_t{999}, size_t{1}}) {
    if (piece == 1) {
      std::vector<uint8_t> one(17, 0);
      ASSERT_FALSE(read_peer(getpid(), one.data(), source.data(), one.size(), piece));
      EXPECT_TRUE(std::equal(one.begin(), one.end(), source.begin()));
      continue;
    }
    std::vector<uint8_t> read(source.size(), 0);
    ASSERT_FALSE(read_peer(getpid(), read.data(), source.data(), source.size(), piece)) << piece;
    EXPECT_EQ(read, source) << piece;
    std::vector<uint8_t> written(source.size(), 0);
    ASSERT_FALSE(write_peer(getpid(), written.data(), source.data(), source.size(), piece)) << piece;
    EXPECT_EQ(written, source) << piece;
  }
  // Nothing to move is no error.
  EXPECT_FALSE(read_peer(getpid(), nullptr, nullptr, 0));
}

TEST(PeerMemory, AReadPastTheMappedMemoryStopsThereAndSaysHowFarItGot) {
  // Two pages, the second unmapped: a read across the boundary moves the
  // first page, then the next call moves nothing (EFAULT).
  const long page = sysconf(_SC_PAGESIZE);
  void* mapped = mmap(nullptr, static_cast<size_t>(2 * page), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* bytes = static_cast<uint8_t*>(mapped);
  ASSERT_EQ(munmap(bytes + page, static_cast<size_t>(page)), 0);
  std::vector<uint8_t> out(static_cast<size_t>(2 * page));
  const auto failure = read_peer(getpid(), out.data(), bytes, out.size());
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->error, EFAULT);
  EXPECT_EQ(failure->done, static_cast<size_t>(page));
  munmap(bytes, static_cast<size_t>(page));
}

TEST(PeerMemory, AProcessThatIsGoneIsNoSuchProcess) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);  // reaped: the pid names nobody now
  uint64_t word = 0;
  const auto failure = read_peer(child, &word, &word, sizeof(word));
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->error, ESRCH);
  EXPECT_EQ(failure->done, 0U);
}

}  // namespace
}  // namespace tdist::detail
