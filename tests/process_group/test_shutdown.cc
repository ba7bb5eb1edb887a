// ProcessGroup::shutdown (what torch's destroy_process_group calls through
// the plugin): the queued operations finish first, with their results;
// then every call raises, naming the shutdown, and reinit refuses; a second
// shutdown changes nothing. A thread waiting for a receive when another
// shuts the group down gets an error, and nothing is freed under it. Ranks
// as threads and as forked processes, 1 to 5 of them, on shared memory and
// (the tcp. copy) over TCP.

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pg_harness.h"
#include "tdist/distributed.h"
#include "tdist/errors.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

class Shutdown : public WorldsTest {};

// A group in which rank 1 sends `tensor` to rank 0 (tag `tag`) once rank 0
// set "test/callback_set", i.e. once its callback on the receive is in
// place: the receive then completes under a wait or on the transport's
// thread, not as the callback is attached.
Group group_where_rank_1_sends_once_the_callback_is_set(Store& store, int rank, int size,
                                                        const Tensor& tensor, int tag) {
  ProcessGroupOptions options;
  options.timeout = 60s;
  auto pg = group_on_store(store, rank, size, options);
  if (rank == 1) {
    store.wait({"test/callback_set"}, 60s);
    pg->send(tensor, 0, tag)->wait();
  }
  return pg;
}

TEST_P(Shutdown, QueuedCallsFinishThenEveryCallRaises) {
  const int size = n();
  EXPECT_EQ(run_with_store(
                mode(), size,
                [&](Store& store, int rank) -> KeepAlive {
                  ProcessGroupOptions options;
                  options.timeout = 60s;
                  auto pg = group_on_store(store, rank, size, options);
                  // Async calls still queued when shutdown() comes run to the end.
                  std::vector<Tensor> tensors;
                  std::vector<WorkPtr> works;
                  for (int k = 0; k < 3; ++k) {
                    tensors.push_back(Tensor::zeros(DType::kInt64, {1001 + k}));
                    for (int64_t i = 0; i < tensors.back().numel(); ++i) {
                      tensors.back().data<int64_t>()[i] = (rank + 1) * (k + 1);
                    }
                    works.push_back(pg->all_reduce(tensors.back(), ReduceOp::SUM));
                  }
                  pg->shutdown();
                  const int64_t ranks_sum = static_cast<int64_t>(size) * (size + 1) / 2;
                  for (int k = 0; k < 3; ++k) {
                    works[k]->wait();
                    for (int64_t i = 0; i < tensors[k].numel(); ++i) {
                      check(tensors[k].data<int64_t>()[i] == ranks_sum * (k + 1), [&] {
                        return "all_reduce " + std::to_string(k) + " queued before shutdown, element " +
                               std::to_string(i);
                      });
                    }
                  }
                  const std::string later =
                      error_of<DistBackendError>([&] { pg->all_reduce(tensors[0], ReduceOp::SUM)->wait(); },
                                                 "an all_reduce after shutdown");
                  expect_in(later, "all_reduce: the process group was shut down");
                  const std::string rebuild =
                      error_of<DistBackendError>([&] { pg->reinit(true); }, "reinit after shutdown");
                  expect_in(rebuild, "reinit_process_group: the process group was shut down");
                  pg->shutdown();  // again: nothing to do
                  return pg;
                },
                100s, 80s),
            "");
}

// Rank 0 waits on a thread for a receive that rank 1 never sends, and its
// main thread ends the group under that wait: by shutdown() or by letting
// go of the last handle. The wait raises, naming what closed the group.
std::string end_a_group_under_a_wait(Mode mode, int size, bool by_shutdown) {
  return run_with_store(
      mode, size,
      [&](Store& store, int rank) -> KeepAlive {
        ProcessGroupOptions options;
        options.timeout = 60s;
        auto pg = group_on_store(store, rank, size, options);
        if (rank != 0) {
          // Sends nothing, and shuts down only once rank 0 has its error
          // (a goodbye would end rank 0's receive first).
          store.wait({"test/rank0_done"}, 60s);
          pg->shutdown();
          return pg;
        }
        auto got = Tensor::zeros(DType::kFloat32, {5});
        WorkPtr work = pg->recv(got, 1, 7);
        std::string message;
        std::atomic<bool> waited{false};
        std::thread waiter([&] {
          message =
              error_of<DistBackendError>([&] { work->wait(); }, "the wait of a receive its group closed");
          waited = true;
        });
        // A thread waiting on a receive makes the group busy: from then on
        // the waiter is inside the transport.
        while (pg->idle() && !waited.load()) std::this_thread::yield();
        const bool inside = !waited.load();
        if (by_shutdown) {
          pg->shutdown();
        } else {
          pg.reset();
        }
        waiter.join();
        store.set("test/rank0_done", "1");
        check(inside, "the waiter ended before the group did: " + message);
        expect_in(message, by_shutdown
                               ? "the group's connections were closed (destroy_process_group, shutdown"
                               : "the group's connections were freed (the group's last handle went)");
        expect_in(message, "while a thread posted or waited for a send or receive on them");
        // The work stays finished with that error (a new wait returns it
        // without reaching the transport).
        expect_in(error_of<DistBackendError>([&] { work->wait(); }, "a second wait"),
                  "while a thread posted or waited");
        if (pg) check(pg->idle(), "the group is idle once the waiter left");
        return pg;
      },
      100s, 80s);
}

TEST_P(Shutdown, AThreadWaitingForAReceiveGetsAnErrorAndTheTransportOutlivesItsWait) {
  if (n() < 2) GTEST_SKIP() << "a receive needs a peer";
  EXPECT_EQ(end_a_group_under_a_wait(mode(), n(), true), "");
}

TEST_P(Shutdown, FreeingTheGroupUnderAWaitingReceiveEndsItTheSameWay) {
  if (n() < 2) GTEST_SKIP() << "a receive needs a peer";
  EXPECT_EQ(end_a_group_under_a_wait(mode(), n(), false), "");
}

TEST_P(Shutdown, AShutdownInsideAReceivesCallbackRaisesInsteadOfWaitingForItself) {
  if (n() < 2) GTEST_SKIP() << "a receive needs a peer";
  const int size = n();
  EXPECT_EQ(run_with_store(
                mode(), size,
                [&](Store& store, int rank) -> KeepAlive {
                  auto one = Tensor::zeros(DType::kFloat32, {3});
                  auto pg = group_where_rank_1_sends_once_the_callback_is_set(store, rank, size, one, 3);
                  if (rank != 0) return pg;
                  WorkPtr work = pg->recv(one, 1, 3);
                  std::string inside;
                  auto next = work->get_future()->then([&](Future&) {
                    inside = error_of<DistError>([&] { pg->shutdown(); }, "a shutdown inside the callback");
                    return std::vector<Tensor>{};
                  });
                  store.set("test/callback_set", "1");
                  work->wait();
                  next->wait();
                  // Run by this thread, inside its wait, or by the
                  // transport's own thread (which a shutdown would join):
                  // either way it must refuse, not hang.
                  expect_in(inside, "would deadlock");
                  pg->shutdown();  // outside: fine
                  return pg;
                },
                100s, 80s),
            "");
}

TEST_P(Shutdown, AGroupFreedInsideAReceivesCallbackKeepsItsTransportsInsteadOfFreeingThemUnderItself) {
  if (n() < 2) GTEST_SKIP() << "a receive needs a peer";
  const int size = n();
  EXPECT_EQ(run_with_store(
                mode(), size,
                [&](Store& store, int rank) -> KeepAlive {
                  auto tensor = Tensor::zeros(DType::kInt32, {5});
                  if (rank == 1) {
                    for (int32_t i = 0; i < 5; ++i) tensor.data<int32_t>()[i] = 10 + i;
                  }
                  auto pg = group_where_rank_1_sends_once_the_callback_is_set(store, rank, size, tensor, 4);
                  if (rank != 0) return pg;
                  // The callback runs inside this thread's wait (holding
                  // the group's point-to-point lease) or on the transport's
                  // own thread: either way the group's last handle goes
                  // there, and the transports it drives must outlive it
                  // (they are kept, with a warning), not be freed under it.
                  WorkPtr work = pg->recv(tensor, 1, 4);
                  const std::weak_ptr<ProcessGroup> watched = pg;
                  // The handle lives in a box the callback shares, so that
                  // a failed wait leaving this scope early cannot free it
                  // under the callback.
                  auto box = std::make_shared<Group>(std::move(pg));
                  auto inside = std::make_shared<std::string>();
                  auto next = work->get_future()->then([box, inside](Future&) {
                    // Proof that this runs where the leak path is taken (a
                    // shutdown here refuses to wait for itself).
                    *inside =
                        error_of<DistError>([&] { (*box)->shutdown(); }, "a shutdown inside the callback");
                    box->reset();
                    return std::vector<Tensor>{};
                  });
                  store.set("test/callback_set", "1");
                  work->wait();
                  next->wait();
                  expect_in(*inside, "would deadlock");
                  check(*box == nullptr && watched.expired(), "the group outlived its last handle");
                  for (int32_t i = 0; i < 5; ++i) {
                    check(tensor.data<int32_t>()[i] == 10 + i, "element " + std::to_string(i) + " is " +
                                                                   std::to_string(tensor.data<int32_t>()[i]));
                  }
                  return nullptr;
                },
                100s, 80s),
            "");
}

TEST_P(Shutdown, AShutdownInsideACollectivesCallbackEndsTheGroup) {
  const int size = n();
  EXPECT_EQ(run_with_store(
                mode(), size,
                [&](Store& store, int rank) -> KeepAlive {
                  ProcessGroupOptions options;
                  options.timeout = 60s;
                  auto pg = group_on_store(store, rank, size, options);
                  auto tensor = Tensor::zeros(DType::kInt64, {7});
                  for (int64_t i = 0; i < 7; ++i) tensor.data<int64_t>()[i] = rank + i;
                  // Run by the group's worker thread (or this one, if the
                  // all_reduce ended first): neither is inside a transport.
                  std::string raised = "none";
                  auto next = pg->all_reduce(tensor, ReduceOp::SUM)->get_future()->then([&](Future&) {
                    try {
                      pg->shutdown();
                    } catch (const std::exception& e) {
                      raised = e.what();
                    }
                    return std::vector<Tensor>{};
                  });
                  next->wait();
                  check(raised == "none", "the shutdown in the callback raised: " + raised);
                  const int64_t ranks_sum = static_cast<int64_t>(size) * (size - 1) / 2;
                  for (int64_t i = 0; i < 7; ++i) {
                    check(tensor.data<int64_t>()[i] == ranks_sum + size * i, "all_reduce element");
                  }
                  expect_in(error_of<DistBackendError>([&] { pg->all_reduce(tensor, ReduceOp::SUM)->wait(); },
                                                       "an all_reduce after the shutdown"),
                            "the process group was shut down");
                  return pg;
                },
                100s, 80s),
            "");
}

INSTANTIATE_TEST_SUITE_P(Worlds, Shutdown,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(1, 2, 3, 5)),
                         worlds_param_name);

}  // namespace
}  // namespace tdist::testing
