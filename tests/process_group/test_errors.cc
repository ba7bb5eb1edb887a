// Bad arguments are rejected before anything is sent; a killed peer or a
// rank that never arrives gives an error naming it, never a hang.

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>
#include <cstring>

#include "pg_harness.h"
#include "tdist/distributed.h"
#include "tdist/errors.h"
#include "tdist/file_store.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

void expect_invalid(const std::function<void()>& call, const std::string& needle) {
  try {
    call();
    throw std::runtime_error("accepted; expected an error containing '" + needle + "'");
  } catch (const DistInvalidArgument& e) {
    check(std::string(e.what()).find(needle) != std::string::npos,
          "error '" + std::string(e.what()) + "' does not contain '" + needle + "'");
  }
}

TEST(PgErrors, ArgumentsAreCheckedBeforeAnyCommunication) {
  // Every call below is invalid on rank 0 alone; rank 1 does nothing, so a
  // call that reached the network would hang until the deadline instead.
  EXPECT_EQ(
      with_groups(
          Mode::kThreads, 2,
          [&](ProcessGroup& pg, int rank) {
            if (rank != 0) return;
            Tensor f = Tensor::zeros(DType::kFloat32, {4});
            Tensor i = Tensor::zeros(DType::kInt32, {4});
            expect_invalid([&] { pg.all_reduce(f, ReduceOp::BAND); }, "BAND");
            expect_invalid([&] { pg.all_reduce(Tensor::zeros(DType::kComplex64, {2}), ReduceOp::MAX); },
                           "complex64");
            expect_invalid([&] { pg.broadcast(f, 2); }, "src 2 is not a rank of the group");
            expect_invalid([&] { pg.reduce(f, -1, ReduceOp::SUM); }, "dst -1");
            expect_invalid([&] { pg.send(f, 0, 0); }, "cannot send to itself");
            expect_invalid([&] { pg.send(f, 5, 0); }, "dst 5");
            expect_invalid([&] { pg.all_gather({f}, f); }, "tensor_list has 1 tensors but the group has 2");
            expect_invalid([&] { pg.all_gather({Tensor::zeros(DType::kFloat32, {4}), i}, f); }, "int32");
            expect_invalid(
                [&] {
                  pg.all_gather({Tensor::zeros(DType::kFloat32, {3}), f.view(0, 1)}, f);
                },
                "share memory");
            expect_invalid([&] { pg.all_gather_into_tensor(Tensor::zeros(DType::kFloat32, {7}), f); },
                           "concatenated along dim 0 or stacked");
            expect_invalid(
                [&] { pg.reduce_scatter_tensor(f, Tensor::zeros(DType::kFloat32, {9}), ReduceOp::SUM); },
                "concatenated along dim 0 or stacked");
            expect_invalid([&] { pg.gather({f, f}, f, 1); }, "gather_list must be empty");
            expect_invalid([&] { pg.scatter(f, {f}, 0); }, "scatter_list has 1 tensors");
            expect_invalid([&] { pg.all_to_all_single(f, Tensor::zeros(DType::kFloat32, {3}), {}, {}); },
                           "not divisible by the group size 2");
            expect_invalid([&] { pg.all_to_all_single(f, i, {}, {}); }, "int32");
            expect_invalid(
                [&] {
                  pg.all_gather_into_tensor_uneven(Tensor::zeros(DType::kFloat32, {5}), f, {1, 3});
                },
                "sum to 4 but the tensor has 5 rows");
            expect_invalid(
                [&] {
                  pg.reduce_scatter_tensor_uneven(f, Tensor::zeros(DType::kFloat32, {8}), {4, -4},
                                                  ReduceOp::SUM);
                },
                "is negative");
          }),
      "");
}

TEST(PgErrors, ARankThatNeverArrivesGivesATimeoutNamingOpSequenceAndPeer) {
  EXPECT_EQ(with_groups(
                Mode::kThreads, 3,
                [&](ProcessGroup& pg, int rank) {
                  Tensor t = Tensor::zeros(DType::kFloat32, {16});
                  pg.barrier()->wait();   // call #0 everywhere
                  if (rank == 2) return;  // rank 2 skips call #1
                  try {
                    pg.all_reduce(t, ReduceOp::SUM)->wait();
                    throw std::runtime_error("all_reduce completed without rank 2");
                  } catch (const DistTimeoutError& e) {
                    std::string what = e.what();
                    check(what.find("all_reduce") != std::string::npos, "op not named: " + what);
                    check(what.find("#1") != std::string::npos, "sequence number not named: " + what);
                    check(what.find("rank 2") != std::string::npos || rank == 0 || rank == 1,
                          "missing peer not named: " + what);
                  }
                },
                1500ms),
            "");
}

// A rank that is stuck before a call (frozen, as under SIGSTOP) is the one
// the timeout names, on every rank, even where a rank waits for another
// (a ring's neighbour that waits for the stuck one itself): ranks whose
// call runs long say so in the store, and a timeout lists those that never
// did. Rank 1 blocks on a pipe until ranks 0 and 2 have their errors.
TEST(PgErrors, ATimeoutNamesTheRankThatNeverReachedTheCall) {
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    int gate[2];
    ASSERT_EQ(pipe(gate), 0);
    EXPECT_EQ(with_groups(
                  mode, 3,
                  [&](ProcessGroup& pg, int rank) {
                    Tensor t = Tensor::zeros(DType::kFloat32, {1 << 20});
                    pg.barrier()->wait();  // call #0 everywhere
                    if (rank == 1) {
                      char c[2];
                      size_t got = 0;
                      while (got < 2) {
                        const ssize_t n = read(gate[0], c, 2 - got);
                        if (n <= 0) break;
                        got += static_cast<size_t>(n);
                      }
                      return;
                    }
                    std::string what;
                    try {
                      pg.all_reduce(t, ReduceOp::SUM)->wait();
                    } catch (const DistError& e) {
                      what = e.what();
                    }
                    const char one = 1;
                    (void)!write(gate[1], &one, 1);
                    check(what.find("rank 1 never said it reached this call") != std::string::npos,
                          "rank " + std::to_string(rank) + ": the stuck rank is not named: '" + what + "'");
                  },
                  1500ms),
              "")
        << mode_name(mode);
    close(gate[0]);
    close(gate[1]);
  }
}

// Runs `body` on 2 forked ranks of a tdist group (timeout `timeout`), once
// over each transport choice ("auto" is shared memory here, and "tcp"), and
// expects every rank to come out without an error.
void on_two_forked_ranks(const char* name, std::chrono::milliseconds timeout,
                         const std::function<void(int rank, Store& store, ProcessGroup& pg)>& body) {
  for (const char* transport : {"auto", "tcp"}) {
    std::string path = temp_path(name);
    auto outcomes = run_forked(
        2,
        [&](int rank) {
          setenv("TDIST_TRANSPORT", transport, 1);
          auto store = std::make_shared<FileStore>(path, 2);
          ProcessGroupOptions options;
          options.timeout = timeout;
          auto pg = create_process_group("tdist", store, rank, 2, options);
          body(rank, *store, *pg);
        },
        40s);
    for (const auto& outcome : outcomes)
      EXPECT_TRUE(outcome.ok) << transport << ": " << describe_failures(outcomes);
    unlink(path.c_str());
  }
}

// Rank 0 gives up on all_reduce #1 (rank 1 is late) and aborts the group;
// rank 1 then makes the same call, and the next one. Both must fail naming
// rank 0's abort: over shared memory rank 0's data and flags are already
// there, so without the check the late call would "succeed" alone.
TEST(PgErrors, ALateRankFailsOnAGroupItsPeerAbortedAfterATimeout) {
  on_two_forked_ranks("late", 1000ms, [](int rank, Store& store, ProcessGroup& pg) {
    Tensor t = Tensor::zeros(DType::kFloat32, {16});
    pg.barrier()->wait();  // call #0 everywhere
    if (rank == 0) {
      try {
        pg.all_reduce(t, ReduceOp::SUM)->wait();
        throw std::runtime_error("all_reduce #1 completed without rank 1");
      } catch (const DistTimeoutError&) {
      }
      store.set("rank0_gave_up", "1");
      return;
    }
    store.wait({"rank0_gave_up"}, 30s);
    for (int call = 1; call <= 2; ++call) {
      try {
        pg.all_reduce(t, ReduceOp::SUM)->wait();
        throw std::runtime_error("all_reduce #" + std::to_string(call) +
                                 " succeeded on a group rank 0 aborted");
      } catch (const DistError& e) {
        std::string what = e.what();
        check(what.find("all_reduce") != std::string::npos && what.find("rank 0") != std::string::npos,
              std::string("op or aborting rank not named: ") + what);
      }
    }
  });
}

// all_to_all_single with split sizes the ranks disagree on: rank 1 sends
// rank 0 two elements where rank 0 expects three. Rank 0 must say so (a
// shorter block read as a longer one would hand back bytes nobody wrote),
// over shared memory as over TCP, never hang. Rank 1's own part is
// consistent: it may complete, or fail because rank 0 gave up.
// Rank 1 sends rank 0 fewer elements than rank 0 expects: rank 0 must say
// so. `scale` elements per unit: 1 puts the blocks in the shared-memory flag
// line, 64 in the buffer.
void check_all_to_all_split_disagreement(int64_t scale) {
  on_two_forked_ranks("a2a", 20s, [scale](int rank, Store& /*store*/, ProcessGroup& pg) {
    // split[j]: elements sent to (in) or received from (out) rank j.
    std::vector<int64_t> in_split = rank == 0 ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{2, 2};
    std::vector<int64_t> out_split = rank == 0 ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{3, 2};
    for (auto* split : {&in_split, &out_split}) {
      for (auto& n : *split) n *= scale;
    }
    Tensor input = Tensor::zeros(DType::kFloat32, {4 * scale});
    Tensor output = Tensor::zeros(DType::kFloat32, {out_split[0] + out_split[1]});
    const std::string expected = "expected " + std::to_string(12 * scale) +
                                 " bytes from rank 1 but it sent " + std::to_string(8 * scale);
    try {
      pg.all_to_all_single(output, input, out_split, in_split)->wait();
    } catch (const DistError& e) {
      std::string what = e.what();
      check(rank == 1 || what.find(expected) != std::string::npos, "rank 0 does not name the sizes: " + what);
      return;
    }
    check(rank == 1, "rank 0 accepted a block shorter than it expected");
  });
}

TEST(PgErrors, AllToAllWithSplitSizesTheRanksDisagreeOnIsAnError) {
  check_all_to_all_split_disagreement(1);
}

TEST(PgErrors, AllToAllWithLargerSplitSizesTheRanksDisagreeOnIsAnError) {
  check_all_to_all_split_disagreement(64);
}

TEST(PgErrors, AKilledRankInALargeAllReduceIsReportedByEveryOtherRank) {
  EXPECT_EQ(kill_one_rank_in_all_reduce(4, "kill", size_t{16} << 20 /* 64 MiB */, 2), "");
}

// The sender of a message that a receive refused (another dtype) learns of
// it without receiving anything: its next send raises the refusal,
// although the receiver stays alive and sends it nothing. The receiver says
// through the store that it refused, after its transport has sent the
// refusal (into the ring on one host, into the socket over TCP: the suite's
// tcp.* copy of this test).
TEST(PgErrors, TheSenderOfARefusedMessageLearnsOfItAtItsNextSend) {
  for (size_t count : {size_t{10}, size_t{1} << 16 /* read from the sender's memory */}) {
    const std::string path = temp_path("refused");
    auto outcomes = run_forked(
        2,
        [&](int rank) {
          auto store = std::make_shared<FileStore>(path, 2);
          ProcessGroupOptions options;
          options.timeout = 20s;
          auto pg = create_process_group("tdist", store, rank, 2, options);
          const auto n = static_cast<int64_t>(count);
          if (rank == 1) {
            Tensor t = Tensor::zeros(DType::kFloat32, {n});
            try {
              pg->recv(t, 0, 7)->wait();
              throw std::runtime_error("a recv of another dtype succeeded");
            } catch (const DistBackendError&) {
            }
            store->set("refused", "1");
            store->wait({"sender_knows"});
            return;
          }
          std::string got;
          try {
            // On one host the large one is read from this rank's memory: the
            // send itself fails with the refusal. Otherwise the refusal is in
            // the ring or the socket by now, and the next send raises it.
            pg->send(Tensor::zeros(DType::kInt32, {n}), 1, 7)->wait();
            store->wait({"refused"});
            pg->send(Tensor::zeros(DType::kUInt8, {1}), 1, 8)->wait();
          } catch (const DistError& e) {
            got = e.what();
          }
          store->set("sender_knows", "1");
          check(got.find("a send of rank 0 was refused") != std::string::npos &&
                    got.find("rank 0 sent " + std::to_string(count) + " int32 elements but rank 1 receives " +
                             std::to_string(count) + " float32") != std::string::npos,
                "the sender's error: '" + got + "'");
        },
        40s);
    for (const auto& outcome : outcomes)
      EXPECT_TRUE(outcome.ok) << count << ": " << describe_failures(outcomes);
    unlink(path.c_str());
  }
}

// Two ranks pass a tensor to each other by send and recv (over shared
// memory: one host); rank 1 dies in the second exchange. Rank 0's receive
// fails naming it, for a message in the ring (8 B) and for one read
// straight from the dead rank's memory (16 MiB).
KillTestOp exchange_op() {
  return {"send/recv", [](int) { return 3.0f; },
          [](ProcessGroup& pg, Tensor& t) {
            // Sends a copy: the peer may read it while t is being received into.
            const Tensor copy = t.clone();
            const int peer = 1 - pg.rank();
            (void)pg.send(copy, peer, 5);
            return pg.recv(t, peer, 5);
          },
          [](int) { return 3.0f; }};
}

TEST(PgErrors, AKilledRankInASmallSendRecvIsReportedByItsPeer) {
  EXPECT_EQ(kill_one_rank_in(exchange_op(), 2, "kill_p2p_small", 2, 1), "");
}

TEST(PgErrors, AKilledRankInALargeSendRecvIsReportedByItsPeer) {
  EXPECT_EQ(kill_one_rank_in(exchange_op(), 2, "kill_p2p_large", size_t{4} << 20 /* 16 MiB */, 1), "");
}

// The same exchange with the blocking sendrecv, whose small messages move
// with no work: rank 0's call fails naming the dead rank, never hangs.
KillTestOp blocking_exchange_op() {
  return {"sendrecv", [](int) { return 3.0f; },
          [](ProcessGroup& pg, Tensor& t) {
            const Tensor copy = t.clone();
            const int peer = 1 - pg.rank();
            const int from = pg.sendrecv(&copy, peer, &t, peer, 5);
            return Work::finished("sendrecv", {}, nullptr, from);
          },
          [](int) { return 3.0f; }};
}

TEST(PgErrors, AKilledRankInASmallBlockingSendrecvIsReportedByItsPeer) {
  EXPECT_EQ(kill_one_rank_in(blocking_exchange_op(), 2, "kill_sendrecv_small", 2, 1), "");
}

TEST(PgErrors, AKilledRankInALargeBlockingSendrecvIsReportedByItsPeer) {
  EXPECT_EQ(
      kill_one_rank_in(blocking_exchange_op(), 2, "kill_sendrecv_large", size_t{4} << 20 /* 16 MiB */, 1),
      "");
}

// Three ranks broadcast 64 MiB from rank 0 through a ring of slots (its
// waits for a reader's release or a writer's chunk); rank 2 dies in it.
TEST(PgErrors, AKilledRankInARingBroadcastIsReportedByEveryOtherRank) {
  const KillTestOp broadcast{"broadcast", [](int rank) { return rank == 0 ? 7.0f : 0.0f; },
                             [](ProcessGroup& pg, Tensor& t) { return pg.broadcast(t, 0); },
                             [](int) { return 7.0f; }};
  EXPECT_EQ(kill_one_rank_in(broadcast, 3, "kill_ring", size_t{16} << 20 /* 64 MiB */, 2,
                             [](int) { setenv("TDIST_SHM_SINGLE_COPY", "0", 1); }),
            "");
}

// Two ranks with a core each reduce 16 MiB by single copy: each reads its
// piece from the other's tensor and writes the result into it. The killed
// rank's memory vanishes under the survivor's reads and writes. (Where the
// kernel's copy is slow the all_reduce would go through the buffers: the
// test says it is not.)
TEST(PgErrors, AKilledRankInASingleCopyAllReduceIsReportedByTheOther) {
  EXPECT_EQ(kill_one_rank_in_all_reduce(2, "kill_single_copy", size_t{4} << 20 /* 16 MiB */, 1,
                                        [](int) { setenv("TDIST_SHM_KERNEL_COPY_SLOW", "0", 1); }),
            "");
}

// `call` must raise `E` with `needle` in its message.
template <typename E>
void expect_error(const std::function<void()>& call, const std::string& needle) {
  try {
    call();
  } catch (const E& e) {
    check(std::string(e.what()).find(needle) != std::string::npos,
          "error '" + std::string(e.what()) + "' does not contain '" + needle + "'");
    return;
  }
  throw std::runtime_error("accepted; expected an error containing '" + needle + "'");
}

// A send and a recv of other dtypes: the error names the user's tag, never
// the tag on the wire (the backend sets its top bit: 9223372036854775808
// for tag 0). A group per tag: the receiver's refusal reaches the sender at
// its next send or recv of the group (or at this send's wait, if it comes
// first), which the sender here has none of.
TEST(PgErrors, AP2PMismatchNamesTheUsersTag) {
  for (int tag : {0, 2147483647}) {
    const auto names_the_users_tag = [tag](const std::string& what) {
      check(what.find("recv from rank 0 (tag " + std::to_string(tag) + ")") != std::string::npos,
            "the user's tag is not named: " + what);
      check(what.find("92233720") == std::string::npos, "the wire tag is named: " + what);
    };
    EXPECT_EQ(with_groups(
                  Mode::kThreads, 2,
                  [&](ProcessGroup& pg, int rank) {
                    try {
                      if (rank == 0) {
                        pg.send(Tensor::zeros(DType::kInt64, {3}), 1, tag)->wait();
                        return;  // the refusal came after the send was done
                      }
                      pg.recv(Tensor::zeros(DType::kFloat32, {3}), 0, tag)->wait();
                      throw std::runtime_error("recv of int64 data into float32 accepted");
                    } catch (const DistBackendError& e) {
                      names_the_users_tag(e.what());
                    }
                  },
                  20s),
              "")
        << "tag " << tag;
  }
}

// Negative tags (tdist's own) are refused by every point-to-point call of
// the functional API, naming it and the tag, before anything is sent.
TEST(PgErrors, NegativeP2PTagsAreRefusedBeforeAnyCommunication) {
  std::string path = temp_path("tags");
  EXPECT_EQ(describe_failures(run_forked(
                2,
                [&](int rank) {
                  init_process_group(
                      {.init_method = "file://" + path, .world_size = 2, .rank = rank, .timeout = 20s});
                  const int peer = 1 - rank;
                  Tensor t = Tensor::from_vector<float>({float(rank)});
                  expect_invalid([&] { send(t, peer, nullptr, -1); }, "send: tag -1 is invalid");
                  expect_invalid([&] { recv(t, peer, nullptr, -2); }, "recv: tag -2 is invalid");
                  expect_invalid([&] { isend(t, peer, nullptr, -3); }, "isend: tag -3 is invalid");
                  expect_invalid([&] { irecv(t, peer, nullptr, INT32_MIN); },
                                 "irecv: tag -2147483648 is invalid: tags must be non-negative");
                  // No operation of a batch is posted if one tag is bad: the
                  // valid isend on tag 3 must not have left.
                  Tensor seven = Tensor::from_vector<float>({7.0f});
                  expect_invalid(
                      [&] {
                        batch_isend_irecv({{P2POp::Kind::kIsend, seven, peer, nullptr, 3},
                                           {P2POp::Kind::kIrecv, t, peer, nullptr, -1}});
                      },
                      "batch_isend_irecv: tag -1 is invalid");
                  Tensor value = Tensor::from_vector<float>({42.0f});
                  if (rank == 0) {
                    send(value, 1, nullptr, 3);
                  } else {
                    recv(value, 0, nullptr, 3);
                    check(real_at(value, 0) == 42.0, "rank 1 received a send of the refused batch");
                  }
                  barrier();
                  destroy_process_group();
                },
                40s)),
            "");
  unlink(path.c_str());
}

// init_process_group: -1 means "not given" (from the URL or environment);
// other negative ranks and world sizes, and timeouts that are not
// positive, are refused naming the value. new_group checks its timeout too.
TEST(PgErrors, InitProcessGroupRefusesNegativeRanksAndTimeoutsThatAreNotPositive) {
  EXPECT_EQ(
      describe_failures(run_forked(
          1,
          [&](int) {
            auto store = std::make_shared<HashStore>();
            expect_invalid([&] { init_process_group({.store = store, .world_size = 1, .rank = -2}); },
                           "init_process_group: rank -2 is invalid: a rank is >= 0");
            expect_invalid(
                [&] {
                  init_process_group({.init_method = "tcp://127.0.0.1:1", .world_size = 2, .rank = -7});
                },
                "init_process_group: rank -7 is invalid");
            expect_invalid([&] { init_process_group({.store = store, .world_size = -2, .rank = 0}); },
                           "init_process_group: world_size -2 is invalid: it must be positive");
            expect_invalid([&] { init_process_group({.store = store, .world_size = 0, .rank = 0}); },
                           "init_process_group: world_size 0 is invalid");
            for (auto bad : {0ms, -5ms}) {
              expect_invalid(
                  [&] { init_process_group({.store = store, .world_size = 1, .rank = 0, .timeout = bad}); },
                  "init_process_group: timeout must be positive, got " + std::to_string(bad.count()) + " ms");
              ProcessGroupOptions options;
              options.timeout = bad;
              expect_invalid([&] { create_process_group("tdist", store, 0, 1, options); },
                             "create_process_group(tdist): timeout must be positive");
            }
            check(!is_initialized(), "initialized by a refused call");
            init_process_group({.store = store, .world_size = 1, .rank = 0, .timeout = 20s});
            expect_invalid([&] { new_group({0}, 0ms); }, "new_group: timeout must be positive, got 0 ms");
            expect_invalid([&] { new_group({0}, -1ms); }, "new_group: timeout must be positive, got -1 ms");
            destroy_process_group();
          },
          30s)),
      "");
}

// After destroy_process_group(), handles kept of the default group and of
// the groups made since refuse every call, naming it; destroying what is
// already destroyed (or never was initialized) is an error, as in torch.
TEST(PgErrors, AGroupUsedAfterDestroyProcessGroupIsAnError) {
  std::string path = temp_path("destroyed");
  EXPECT_EQ(
      describe_failures(run_forked(
          2,
          [&](int rank) {
            expect_error<DistError>([] { destroy_process_group(); }, "not initialized");
            init_process_group(
                {.init_method = "file://" + path, .world_size = 2, .rank = rank, .timeout = 20s});
            Tensor t = Tensor::from_vector<float>({1.0f});
            // A subgroup destroyed alone; the rest keeps working.
            Group alone = new_group({0, 1});
            destroy_process_group(alone);
            expect_error<DistError>([&] { all_reduce(t, ReduceOp::SUM, alone); },
                                    "all_reduce: the process group was destroyed by destroy_process_group()");
            expect_error<DistError>([&] { destroy_process_group(alone); },
                                    "Invalid process group specified (the group was already destroyed)");
            all_reduce(t);
            check(real_at(t, 0) == 2.0, "all_reduce on the default group after destroying a subgroup");
            Group sub = new_group({0, 1});
            Group world = default_group();
            barrier();
            destroy_process_group();
            for (const Group& g : {sub, world}) {
              expect_error<DistError>([&] { all_reduce(t, ReduceOp::SUM, g); },
                                      "all_reduce: the process group was destroyed");
              expect_error<DistError>([&] { broadcast(t, 0, g); },
                                      "broadcast: the process group was destroyed");
              expect_error<DistError>([&] { barrier(g); }, "barrier: the process group was destroyed");
              expect_error<DistError>([&] { send(t, 1 - rank, g); }, "send: the process group was destroyed");
              expect_error<DistError>([&] { recv(t, 1 - rank, g); }, "recv: the process group was destroyed");
              expect_error<DistError>([&] { get_rank(g); }, "get_rank: the process group was destroyed");
              std::vector<Bytes> objects;
              expect_error<DistError>([&] { all_gather_object(objects, Bytes{1}, g); },
                                      "all_gather_object: the process group was destroyed");
            }
            expect_error<DistError>([&] { all_reduce(t); }, "Default process group has not been initialized");
            expect_error<DistError>([] { destroy_process_group(); },
                                    "the default process group is not initialized");
            expect_error<DistError>([&] { destroy_process_group(sub); }, "Invalid process group specified");
            check(real_at(t, 0) == 2.0, "a call on a destroyed group ran");
          },
          40s)),
      "");
  unlink(path.c_str());
}

// TDIST_SHM_BUFFER_BYTES that is not a size: every rank raises the real
// reason, none "the store connection was lost" or a timeout. With the bad
// value on rank 0 only, the others get rank 0's reason through the store.
TEST(PgErrors, ABadShmBufferSizeIsReportedByEveryRank) {
  auto outcome_of = [](const std::vector<const char*>& values) {
    std::string path = temp_path("shm_env");
    auto outcomes = run_forked(
        3,
        [&](int rank) {
          setenv("TDIST_TRANSPORT", "auto", 1);
          if (values[static_cast<size_t>(rank)] != nullptr) {
            setenv("TDIST_SHM_BUFFER_BYTES", values[static_cast<size_t>(rank)], 1);
          } else {
            unsetenv("TDIST_SHM_BUFFER_BYTES");
          }
          auto store = std::make_shared<FileStore>(path, 3);
          ProcessGroupOptions options;
          options.timeout = 20s;
          try {
            create_process_group("tdist", store, rank, 3, options);
          } catch (const DistError& e) {
            // The type tells the bad input (own) from rank 0's abort.
            throw std::runtime_error(std::string(dynamic_cast<const DistInvalidArgument*>(&e) ? "invalid: "
                                                 : dynamic_cast<const DistBackendError*>(&e)  ? "backend: "
                                                                                              : "other: ") +
                                     e.what());
          }
        },
        40s);
    unlink(path.c_str());
    return outcomes;
  };
  for (const char* bad : {"abc", "0", "12x", "5000"}) {
    auto outcomes = outcome_of({bad, bad, bad});
    for (const auto& o : outcomes) {
      EXPECT_FALSE(o.ok || o.timed_out) << bad << ": rank " << o.rank << " " << describe_failures(outcomes);
      EXPECT_NE(o.error.find("invalid: "), std::string::npos)
          << bad << ": rank " << o.rank << ": " << o.error;
      EXPECT_NE(o.error.find("TDIST_SHM_BUFFER_BYTES"), std::string::npos) << o.error;
      EXPECT_NE(o.error.find(bad), std::string::npos) << o.error;
    }
  }
  auto outcomes = outcome_of({"12x", nullptr, nullptr});
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(outcomes[0].error,
            "invalid: environment variable TDIST_SHM_BUFFER_BYTES must be an integer, got '12x'");
  for (int r = 1; r < 3; ++r) {
    EXPECT_EQ(outcomes[static_cast<size_t>(r)].error,
              "backend: shared memory: rank 0 aborted the group while setting it up: environment variable "
              "TDIST_SHM_BUFFER_BYTES must be an integer, got '12x'")
        << describe_failures(outcomes);
  }
}

}  // namespace
}  // namespace tdist::testing
