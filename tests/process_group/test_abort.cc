// ProcessGroup::abort: a call blocked on the other ranks fails on every rank
// with an error naming the rank that aborted; queued calls fail without
// starting; later calls raise until reinit rebuilds the group, after which
// it works again. Ranks as threads and as forked processes, 2 to 5 of them,
// on shared memory, (the tcp. copy of this suite) over TCP, and mixed: two
// hosts of two ranks, shared memory inside each and TCP across.

#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "pg_harness.h"
#include "process_group/tdist_backend.h"
#include "tdist/distributed.h"
#include "tdist/errors.h"
#include "tdist/file_store.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

// Runs fn(group, store, rank) on n ranks with a tdist group whose timeout
// (60 s) is far beyond what an abort may take: an error seen here comes
// from the abort, not from a timeout.
std::string with_group_and_store(Mode mode, int n,
                                 const std::function<void(ProcessGroup&, Store&, int)>& fn) {
  return run_with_store(
      mode, n,
      [&](Store& store, int rank) -> KeepAlive {
        ProcessGroupOptions options;
        options.timeout = 60s;
        std::shared_ptr<Store> shared(&store, [](Store*) {});
        auto group =
            create_process_group("tdist", std::make_shared<PrefixStore>("pg", shared), rank, n, options);
        fn(*group, store, rank);
        return group;
      },
      100s, 80s);
}

class Abort : public WorldsTest {};

// Every rank but 0 enters an all_reduce that rank 0 never joins; rank 0
// aborts once they all said they are entering. Their call fails (not
// after the 60 s timeout), naming rank 0 and its reason; then every call
// raises until all rebuild, and the rebuilt group works.
void blocked_call_fails_then_reinit_recovers(ProcessGroup& pg, Store& store, int rank) {
  const int size = pg.size();
  Tensor t = Tensor::zeros(DType::kFloat32, {100003});
  if (rank == 0) {
    for (int r = 1; r < size; ++r) store.wait({"entering/" + std::to_string(r)});
    pg.abort("the test stops the step");
  } else {
    store.set("entering/" + std::to_string(rank), {1});
    const std::string what =
        error_of<DistBackendError>([&] { pg.all_reduce(t, ReduceOp::SUM)->wait(); }, "blocked all_reduce");
    expect_in(what, "rank 0");
    expect_in(what, "the test stops the step");
  }
  // Until the rebuild every call raises, on every rank.
  if (store.add("failed", 1) == size) store.set("all_failed", {1});
  store.wait({"all_failed"});
  const std::string later =
      error_of<DistBackendError>([&] { pg.barrier()->wait(); }, "a call after the abort");
  if (rank == 0) expect_in(later, "barrier: the group was aborted by rank 0: the test stops the step");
  pg.reinit(true);
  checked_all_reduce(pg, 7);
  checked_all_reduce(pg, 70001);
}

TEST_P(Abort, ABlockedCallFailsOnEveryRankAndReinitRecovers) {
  EXPECT_EQ(with_group_and_store(mode(), n(), blocked_call_fails_then_reinit_recovers), "");
}

// A mixed group: two "hosts" (TDIST_HOST_ID) of two ranks each, so the
// all_reduce runs on shared memory inside each host and over TCP across;
// the abort reaches both kinds of waiter, and the rebuilt group is mixed
// again.
TEST(AbortHierarchy, ABlockedCallFailsOnEveryRankAndReinitRecovers) {
  if (getenv("TDIST_TRANSPORT") != nullptr) GTEST_SKIP() << "runs its own hosts";
  const int n = 4;
  const std::string path = temp_path("abort_hier");
  auto outcomes = run_forked(
      n,
      [&](int rank) {
        setenv("TDIST_HOST_ID", rank % 2 == 0 ? "a" : "b", 1);
        auto store = std::make_shared<FileStore>(path, n);
        ProcessGroupOptions options;
        options.timeout = 60s;
        auto pg = create_process_group("tdist", std::make_shared<PrefixStore>("pg", store), rank, n, options);
        check(dynamic_cast<ProcessGroupTdist&>(*pg).hierarchical(), "expected the hierarchy");
        blocked_call_fails_then_reinit_recovers(*pg, *store, rank);
        check(dynamic_cast<ProcessGroupTdist&>(*pg).hierarchical(), "expected the hierarchy after reinit");
      },
      100s);
  EXPECT_EQ(describe_failures(outcomes), "");
  unlink(path.c_str());
}

// Calls queued behind a blocked one fail without starting; abort is
// idempotent.
TEST_P(Abort, QueuedCallsFailWithoutStarting) {
  const int size = n();
  EXPECT_EQ(with_group_and_store(mode(), size,
                                 [&](ProcessGroup& pg, Store& store, int rank) {
                                   std::vector<Tensor> tensors;
                                   std::vector<WorkPtr> works;
                                   // Rank 0 alone queues a call the others never make: it
                                   // blocks, and the three behind it wait in the queue.
                                   if (rank == 0) {
                                     for (int k = 0; k < 4; ++k) {
                                       tensors.push_back(Tensor::zeros(DType::kInt64, {5}));
                                       works.push_back(pg.all_reduce(tensors.back(), ReduceOp::SUM));
                                     }
                                     pg.abort("");
                                     pg.abort("a second abort changes nothing");
                                     for (auto& work : works) {
                                       const std::string what = error_of<DistBackendError>(
                                           [&] { work->wait(); }, "a queued all_reduce");
                                       expect_in(what, "the group was aborted by rank 0: abort() was called");
                                     }
                                     store.set("aborted", {1});
                                   } else {
                                     store.wait({"aborted"});
                                   }
                                   pg.reinit(true);
                                   checked_all_reduce(pg, 3);
                                 }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Worlds, Abort,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(2, 3, 5)),
                         worlds_param_name);

}  // namespace
}  // namespace tdist::testing
