// The executor's state machine (process_group/call_executor.h) on its own:
// who may own the group when, the order calls run in, and what an abort or
// a stop leaves. Calls here record their names instead of moving data.

#include <gtest/gtest.h>

#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "process_group/call_executor.h"

namespace tdist::detail {
namespace {

// The calls' log, in the order they ran.
class Log {
 public:
  void add(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_back(what);
  }
  std::vector<std::string> entries() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> entries_;
};

QueuedCall call_named(const std::string& name) {
  QueuedCall call;
  call.op = name;
  call.work = std::make_shared<Work>(name);
  return call;
}

// An executor whose calls log their op, wait for the future held[op] if
// there is one (filled before the call is pushed), and finish their work.
struct Fixture {
  Log log;
  std::map<std::string, std::shared_future<void>> held;
  CallExecutor executor{[this](QueuedCall& call) {
    log.add(call.op);
    auto it = held.find(call.op);
    if (it != held.end()) it->second.wait();
    call.work->finish(nullptr);
  }};
};

TEST(CallExecutor, AnIdleGroupIsClaimedInlineOnceAndReleasedToIdle) {
  Fixture f;
  f.executor.start();
  EXPECT_EQ(f.executor.state(), 0U);
  ASSERT_TRUE(f.executor.try_claim());
  EXPECT_EQ(f.executor.state(), 1U);
  EXPECT_FALSE(f.executor.try_claim());  // one owner at a time
  f.executor.release();
  EXPECT_EQ(f.executor.state(), 0U);
  EXPECT_TRUE(f.executor.idle());
}

TEST(CallExecutor, CallsQueuedWhileAnInlineCallOwnsTheGroupRunAfterItInOrder) {
  Fixture f;
  f.executor.start();
  ASSERT_TRUE(f.executor.try_claim());
  std::vector<WorkPtr> works;
  for (const char* name : {"first", "second", "third"}) {
    auto call = call_named(name);
    works.push_back(call.work);
    ASSERT_TRUE(f.executor.push(std::move(call)));
  }
  EXPECT_EQ(f.executor.state(), 1U + 2U * 3U);
  // The inline call still owns the group: a claim fails, nothing ran.
  EXPECT_FALSE(f.executor.try_claim());
  f.log.add("inline");
  f.executor.release();
  for (auto& work : works) work->wait();
  EXPECT_EQ(f.log.entries(), (std::vector<std::string>{"inline", "first", "second", "third"}));
  // The worker's last step after a call is its count: claim_when_idle sees it.
  ASSERT_TRUE(f.executor.claim_when_idle());
  EXPECT_EQ(f.executor.state(), 1U);
  f.executor.release_claim();
  EXPECT_EQ(f.executor.state(), 0U);
}

TEST(CallExecutor, ClaimWhenIdleWaitsForTheQueuedCallsToRun) {
  Fixture f;
  f.executor.start();
  std::promise<void> let_go;
  f.held["blocking"] = let_go.get_future().share();
  ASSERT_TRUE(f.executor.push(call_named("blocking")));
  ASSERT_TRUE(f.executor.push(call_named("after")));
  std::thread claimer([&] {
    ASSERT_TRUE(f.executor.claim_when_idle());
    f.log.add("claimed");
    f.executor.release_claim();
  });
  let_go.set_value();
  claimer.join();
  EXPECT_EQ(f.log.entries(), (std::vector<std::string>{"blocking", "after", "claimed"}));
  EXPECT_EQ(f.executor.state(), 0U);
}

TEST(CallExecutor, TakeQueuedRemovesTheCallsThatHaveNotStarted) {
  Fixture f;
  f.executor.start();
  ASSERT_TRUE(f.executor.try_claim());
  ASSERT_TRUE(f.executor.push(call_named("a")));
  ASSERT_TRUE(f.executor.push(call_named("b")));
  EXPECT_FALSE(f.executor.idle());
  auto taken = f.executor.take_queued();
  ASSERT_EQ(taken.size(), 2U);
  EXPECT_EQ(taken[0].op, "a");
  EXPECT_EQ(taken[1].op, "b");
  EXPECT_EQ(f.executor.state(), 1U);  // only the inline owner is left
  f.executor.release();
  EXPECT_EQ(f.executor.state(), 0U);
  // A call pushed now runs: the executor is not stopped by an abort.
  auto later = call_named("later");
  auto work = later.work;
  ASSERT_TRUE(f.executor.push(std::move(later)));
  work->wait();
  EXPECT_EQ(f.log.entries(), (std::vector<std::string>{"later"}));
}

TEST(CallExecutor, StopRunsWhatIsQueuedThenRefusesNewCalls) {
  Fixture f;
  f.executor.start();
  std::vector<WorkPtr> works;
  for (const char* name : {"x", "y"}) {
    auto call = call_named(name);
    works.push_back(call.work);
    ASSERT_TRUE(f.executor.push(std::move(call)));
  }
  EXPECT_TRUE(f.executor.stop().empty());
  for (auto& work : works) EXPECT_TRUE(work->is_completed());
  EXPECT_EQ(f.log.entries(), (std::vector<std::string>{"x", "y"}));
  EXPECT_FALSE(f.executor.push(call_named("z")));
  EXPECT_FALSE(f.executor.claim_when_idle());
  EXPECT_TRUE(f.executor.stop().empty());  // idempotent
}

TEST(CallExecutor, StopWhileAnInlineCallOwnsTheGroupHandsBackWhatIsQueued) {
  Fixture f;
  f.executor.start();
  ASSERT_TRUE(f.executor.try_claim());
  ASSERT_TRUE(f.executor.push(call_named("queued")));
  auto left = f.executor.stop();
  ASSERT_EQ(left.size(), 1U);
  EXPECT_EQ(left[0].op, "queued");
  EXPECT_TRUE(f.log.entries().empty());
  f.executor.release();
}

TEST(CallExecutor, IdleWaitsForTheLatestCallsWork) {
  Fixture f;
  f.executor.start();
  std::promise<void> let_go;
  f.held["slow"] = let_go.get_future().share();
  auto call = call_named("slow");
  auto work = call.work;
  ASSERT_TRUE(f.executor.push(std::move(call)));
  EXPECT_FALSE(f.executor.idle());  // queued or running, its work unfinished
  let_go.set_value();
  work->wait();
  EXPECT_TRUE(f.executor.idle());  // finished, even if the worker has not counted it yet
}

}  // namespace
}  // namespace tdist::detail
