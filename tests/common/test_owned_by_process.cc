// owned_by_this_process: an object is destroyed by its maker's process only;
// a forked child's release of its copy leaves it be (its threads are not in
// the child). The child's side is reported through a pipe.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>

#include "common/owned_by_process.h"

namespace tdist::detail {
namespace {

struct CountsDestruction {
  explicit CountsDestruction(std::atomic<int>* counter) : destroyed(counter) {}
  ~CountsDestruction() { destroyed->fetch_add(1); }
  CountsDestruction(const CountsDestruction&) = delete;
  CountsDestruction& operator=(const CountsDestruction&) = delete;
  std::atomic<int>* destroyed;
};

TEST(OwnedByProcess, AForkedChildDoesNotDestroyItsCopyAndTheMakerDoes) {
  std::atomic<int> destroyed{0};
  auto object = owned_by_this_process(std::make_unique<CountsDestruction>(&destroyed));
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child's own pid, not the parent's cached one.
    const char seen_pid = this_process_id() == getpid() ? 1 : 0;
    object.reset();  // the last owner in the child
    const char seen[2] = {seen_pid, static_cast<char>(destroyed.load())};
    _exit(write(fds[1], seen, sizeof seen) == sizeof seen ? 0 : 1);
  }
  close(fds[1]);
  char seen[2] = {0, 0};
  EXPECT_EQ(read(fds[0], seen, sizeof seen), static_cast<ssize_t>(sizeof seen));
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(seen[0], 1) << "this_process_id() in the child was not the child's pid";
  EXPECT_EQ(seen[1], 0) << "the child destroyed its copy";
  EXPECT_EQ(this_process_id(), getpid());
  EXPECT_EQ(destroyed.load(), 0);
  object.reset();
  EXPECT_EQ(destroyed.load(), 1);
}

}  // namespace
}  // namespace tdist::detail
