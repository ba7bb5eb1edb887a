// Bad arguments are rejected before anything is sent; a killed peer or a
// rank that never arrives gives an error naming it, never a hang.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include "pg_harness.h"
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

}  // namespace
}  // namespace tdist::testing
