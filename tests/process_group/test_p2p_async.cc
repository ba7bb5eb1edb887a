// Point-to-point operations and async work handles of the tdist backend.

#include <gtest/gtest.h>

#include <atomic>

#include "pg_harness.h"
#include "tdist/errors.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

class P2P : public WorldsTest {};

TEST_P(P2P, RingOfSendAndRecvWithTags) {
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int rank) {
                          int p = pg.size();
                          if (p == 1) return;
                          int next = (rank + 1) % p;
                          int prev = (rank + p - 1) % p;
                          // Two tags in flight; the receiver takes them in the other order.
                          Tensor a = make_tensor(DType::kFloat64, 1000, [&](int64_t i) { return rank + i; });
                          Tensor b = make_tensor(DType::kFloat64, 3, [&](int64_t) { return -rank; });
                          auto sa = pg.send(a, next, 1);
                          auto sb = pg.send(b, next, 2);
                          Tensor rb = Tensor::zeros(DType::kFloat64, {3});
                          Tensor ra = Tensor::zeros(DType::kFloat64, {1000});
                          pg.recv(rb, prev, 2)->wait();
                          pg.recv(ra, prev, 1)->wait();
                          sa->wait();
                          sb->wait();
                          check(real_at(rb, 2) == -prev && real_at(ra, 999) == prev + 999,
                                "tagged messages mixed up");
                        }),
            "");
}

TEST_P(P2P, AnySourceReceiveReportsTheSender) {
  EXPECT_EQ(with_groups(
                mode(), n(),
                [&](ProcessGroup& pg, int rank) {
                  if (rank != 0) {
                    pg.send(make_tensor(DType::kInt32, 1, [&](int64_t) { return rank * 10; }), 0, 0)->wait();
                    return;
                  }
                  std::vector<int> seen(static_cast<size_t>(pg.size()), 0);
                  for (int i = 1; i < pg.size(); ++i) {
                    Tensor t = Tensor::zeros(DType::kInt32, {1});
                    auto work = pg.recv(t, -1, 0);
                    work->wait();
                    int src = work->source_rank();
                    check(src > 0 && src < pg.size() && real_at(t, 0) == src * 10, "any-source sender");
                    seen[static_cast<size_t>(src)]++;
                  }
                  for (int r = 1; r < pg.size(); ++r)
                    check(seen[static_cast<size_t>(r)] == 1, "sender seen twice");
                }),
            "");
}

TEST_P(P2P, AsyncCollectivesCompleteInOrderWithFutures) {
  EXPECT_EQ(
      with_groups(mode(), n(),
                  [&](ProcessGroup& pg, int rank) {
                    std::vector<Tensor> tensors;
                    std::vector<WorkPtr> works;
                    for (int i = 0; i < 10; ++i) {
                      tensors.push_back(
                          make_tensor(DType::kInt64, 100, [&](int64_t j) { return rank + i + j; }));
                      works.push_back(pg.all_reduce(tensors.back(), ReduceOp::SUM));
                    }
                    std::atomic<int> callbacks{0};
                    auto chained = works.back()->get_future()->then([&](Future& f) {
                      callbacks++;
                      return f.value();
                    });
                    for (size_t i = 0; i < works.size(); ++i) {
                      check(works[i]->wait(), "wait returned false");
                      check(works[i]->is_completed() && works[i]->is_success() && !works[i]->exception(),
                            "work state after wait");
                    }
                    auto value = chained->value();
                    check(callbacks == 1 && value.size() == 1, "then() ran once with the output tensor");
                    int p = pg.size();
                    for (int i = 0; i < 10; ++i) {
                      check(real_at(tensors[static_cast<size_t>(i)], 5) == p * (i + 5) + p * (p - 1) / 2,
                            "async all_reduce " + std::to_string(i));
                    }
                  }),
      "");
}

TEST_P(P2P, ASizeMismatchOnRecvIsAnError) {
  if (n() < 2) GTEST_SKIP();
  EXPECT_EQ(
      with_groups(mode(), n(),
                  [&](ProcessGroup& pg, int rank) {
                    if (rank == 0) pg.send(Tensor::zeros(DType::kFloat32, {4}), 1, 0)->wait();
                    if (rank == 1) {
                      Tensor t = Tensor::zeros(DType::kFloat32, {8});
                      try {
                        pg.recv(t, 0, 0)->wait();
                        throw std::runtime_error("a 16-byte message filled a 32-byte tensor silently");
                      } catch (const DistError& e) {
                        check(std::string(e.what()).find("rank 0 sent 4 float32 elements but rank 1 "
                                                         "receives 8 float32 elements") != std::string::npos,
                              e.what());
                      }
                    }
                  }),
      "");
}

// The blocking sendrecv in a ring, every rank sending first: an 8 B message
// moves with no work (the message is in the ring, or comes while the
// receive watches it), longer ones through works (one spanning two ring
// slots, one read from its sender's memory), and none deadlocks. Each size
// runs three times on its own tag, so the two ways meet on one ring; the
// receive names its sender, and a receive of nothing leaves nothing written.
TEST_P(P2P, SendrecvInARingMovesEverySize) {
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int rank) {
                          const int p = pg.size();
                          if (p == 1) return;
                          const int next = (rank + 1) % p;
                          const int prev = (rank + p - 1) % p;
                          // 2500 int32: 10,000 B, two ring slots; 8192: 32 KiB, five; 10080:
                          // five full slots, the most that move at once; 10100: six, streamed
                          // (below the size read from the sender); 100003: odd, read from it.
                          for (int64_t count : {0, 1, 17, 2500, 8192, 10080, 10100, 100003}) {
                            for (int round = 0; round < 3; ++round) {
                              auto value = [&](int from) {
                                return [from, round](int64_t i) { return from * 1000 + round * 7 + i % 101; };
                              };
                              Tensor out = make_tensor(DType::kInt32, count, value(rank));
                              Tensor in = make_tensor(DType::kInt32, count, [](int64_t) { return -1; });
                              const int from = pg.sendrecv(&out, next, &in, prev, round);
                              const std::string what = "sendrecv of " + std::to_string(count) +
                                                       " elements, round " + std::to_string(round);
                              check(from == prev, what + ": reported source " + std::to_string(from));
                              check_elements(in, 0, count, value(prev), what);
                              check_elements(out, 0, count, value(rank), what + " (its send tensor)");
                            }
                          }
                        }),
            "");
}

// sendrecv with one part left out is the blocking send or recv: rank 0
// takes every other rank's message from any source and learns who sent it.
TEST_P(P2P, SendrecvWithOnePartIsABlockingSendOrRecv) {
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int rank) {
                          if (rank != 0) {
                            Tensor t =
                                make_tensor(DType::kFloat64, 3, [&](int64_t i) { return rank * 10 + i; });
                            check(pg.sendrecv(&t, 0, nullptr, -1, 4) == -1, "a send alone reports no source");
                            return;
                          }
                          std::vector<int> seen(static_cast<size_t>(pg.size()), 0);
                          for (int i = 1; i < pg.size(); ++i) {
                            Tensor t = Tensor::zeros(DType::kFloat64, {3});
                            const int src = pg.sendrecv(nullptr, -1, &t, -1, 4);
                            check(src > 0 && src < pg.size(), "source " + std::to_string(src));
                            check_elements(
                                t, 0, 3, [&](int64_t j) { return src * 10 + j; }, "any-source recv");
                            seen[static_cast<size_t>(src)]++;
                          }
                          for (int r = 1; r < pg.size(); ++r)
                            check(seen[static_cast<size_t>(r)] == 1, "sender seen twice");
                        }),
            "");
}

// Bad peers raise before anything moves, naming the call.
TEST_P(P2P, SendrecvRejectsItselfAndOutOfRangeRanks) {
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int rank) {
                          const int p = pg.size();
                          Tensor a = Tensor::zeros(DType::kFloat32, {2});
                          Tensor b = Tensor::zeros(DType::kFloat32, {2});
                          const int other = (rank + 1) % p;
                          expect_in(error_of<DistInvalidArgument>(
                                        [&] { pg.sendrecv(&a, rank, &b, other, 0); }, "sendrecv to itself"),
                                    "sendrecv: dst " + std::to_string(rank) + " is this rank");
                          expect_in(error_of<DistInvalidArgument>([&] { pg.sendrecv(&a, p, &b, other, 0); },
                                                                  "sendrecv past the group"),
                                    "sendrecv");
                          if (p > 1) {
                            expect_in(
                                error_of<DistInvalidArgument>([&] { pg.sendrecv(&a, other, &b, rank, 0); },
                                                              "sendrecv from itself"),
                                "sendrecv: src " + std::to_string(rank) + " is this rank");
                          }
                        }),
            "");
}

// A receive whose tensor has another count than the message fails naming
// both. The rank whose receive matched gets its message, unless the refusal
// of its own send (part of the same call) reaches it first: then its call
// raises that refusal, which names both sides too.
TEST_P(P2P, ASendrecvOfAnotherCountFailsNamingBothSides) {
  if (n() < 2) GTEST_SKIP();
  EXPECT_EQ(with_groups(
                mode(), n(),
                [&](ProcessGroup& pg, int rank) {
                  if (rank > 1) return;
                  const int peer = 1 - rank;
                  Tensor out = make_tensor(DType::kFloat32, 4, [&](int64_t i) { return rank + i; });
                  Tensor in = Tensor::zeros(DType::kFloat32, {rank == 1 ? 8 : 4});
                  if (rank == 0) {
                    int source = -1;
                    std::string refused;
                    try {
                      source = pg.sendrecv(&out, peer, &in, peer, 3);
                    } catch (const DistError& e) {
                      refused = e.what();
                    }
                    if (!refused.empty()) {
                      expect_in(refused, "a send of rank 0 was refused");
                      expect_in(refused,
                                "rank 0 sent 4 float32 elements but rank 1 receives 8 float32 elements");
                      return;
                    }
                    check(source == 1, "rank 0's source");
                    check_elements(
                        in, 0, 4, [](int64_t i) { return 1.0 + static_cast<double>(i); }, "rank 0's receive");
                    return;
                  }
                  expect_in(error_of<DistError>([&] { pg.sendrecv(&out, peer, &in, peer, 3); },
                                                "a receive of 8 elements for a message of 4"),
                            "rank 0 sent 4 float32 elements but rank 1 receives 8 float32 elements");
                }),
            "");
}

// A then() callback runs on the thread that completes operations; waiting
// there for an operation that thread must finish would never end, so the
// wait raises instead. The receive is held open until the callback is in
// place (rank 0 sends only after rank 1's go-ahead), so the callback runs on
// the completion thread every time, and the message the callback waits for
// is sent only after the callback has given up.
TEST_P(P2P, WaitingInsideAThenCallbackRaisesInsteadOfDeadlocking) {
  if (n() < 2) GTEST_SKIP();
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int rank) {
                          Tensor t = Tensor::zeros(DType::kInt32, {4});
                          Tensor late = Tensor::zeros(DType::kInt32, {1});
                          if (rank == 0) {
                            pg.recv(Tensor::zeros(DType::kInt32, {1}), 1, 2)->wait();
                            pg.send(Tensor::from_vector<int32_t>({7, 7, 7, 7}), 1, 1)->wait();
                            pg.recv(Tensor::zeros(DType::kInt32, {1}), 1, 4)->wait();
                            pg.send(late, 1, 3)->wait();
                          }
                          if (rank != 1) return;
                          auto chained = pg.recv(t, 0, 1)->get_future()->then([&](Future&) {
                            pg.recv(late, 0, 3)->wait();
                            return std::vector<Tensor>{};
                          });
                          pg.send(Tensor::zeros(DType::kInt32, {1}), 0, 2)->wait();
                          try {
                            chained->wait();
                            throw std::runtime_error("the callback's wait returned");
                          } catch (const DistError& e) {
                            check(std::string(e.what()).find("deadlock") != std::string::npos, e.what());
                          }
                          check(real_at(t, 3) == 7, "the received tensor");
                          pg.send(Tensor::zeros(DType::kInt32, {1}), 0, 4)->wait();
                        }),
            "");
}

// A thread waiting for a receive reads the message itself and then runs the
// receive's callbacks (ProcessGroupTdist::drive_on_wait). The same guard
// holds there: the callback's wait raises instead of waiting for a message
// that is sent only after the callback has given up. Rank 0 sends the
// message only after rank 1's go-ahead, when rank 1 is (as a rule) already
// waiting on the receive itself, not on a chained future.
TEST_P(P2P, ACallbackRunByTheWaitingThreadHasTheSameDeadlockGuard) {
  if (n() < 2) GTEST_SKIP();
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int rank) {
                          Tensor late = Tensor::zeros(DType::kInt32, {1});
                          if (rank == 0) {
                            pg.recv(Tensor::zeros(DType::kInt32, {1}), 1, 2)->wait();
                            pg.send(Tensor::from_vector<int32_t>({5, 6}), 1, 1)->wait();
                            pg.recv(Tensor::zeros(DType::kInt32, {1}), 1, 4)->wait();
                            pg.send(Tensor::from_vector<int32_t>({9}), 1, 3)->wait();
                          }
                          if (rank != 1) return;
                          Tensor t = Tensor::zeros(DType::kInt32, {2});
                          auto received = pg.recv(t, 0, 1);
                          std::string callback_error;
                          WorkPtr late_work;
                          auto chained = received->get_future()->then([&](Future&) {
                            try {
                              late_work = pg.recv(late, 0, 3);
                              late_work->wait();
                              callback_error = "the callback's wait returned";
                            } catch (const DistError& e) {
                              callback_error = e.what();
                            }
                            return std::vector<Tensor>{};
                          });
                          pg.send(Tensor::zeros(DType::kInt32, {1}), 0, 2)->wait();
                          received->wait();
                          chained->wait();
                          check(callback_error.find("deadlock") != std::string::npos, callback_error);
                          check(real_at(t, 0) == 5 && real_at(t, 1) == 6, "the received tensor");
                          // The receive the callback gave up on is still posted: it takes the late message.
                          pg.send(Tensor::zeros(DType::kInt32, {1}), 0, 4)->wait();
                          late_work->wait();
                          check(real_at(late, 0) == 9, "the late message");
                        }),
            "");
}

std::vector<std::tuple<Mode, int>> cases() {
  std::vector<std::tuple<Mode, int>> out;
  for (int n : {1, 2, 3, 5, 8}) out.emplace_back(Mode::kThreads, n);
  for (int n : {2, 4}) out.emplace_back(Mode::kProcesses, n);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Worlds, P2P, ::testing::ValuesIn(cases()), [](const auto& p) {
  return std::string(mode_name(std::get<0>(p.param))) + "_" + std::to_string(std::get<1>(p.param));
});

}  // namespace
}  // namespace tdist::testing
