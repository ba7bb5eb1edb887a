// Ranks that pass different calls to one collective (or a send and a recv
// that do not match) fail on every rank with an error naming the call and
// what each side passed; no rank returns data from the mismatched call, and
// nothing outside a caller's tensors is touched (this file also runs under
// AddressSanitizer). Runs over shared memory and, with the tcp. prefix,
// over TCP (tests/process_group/CMakeLists.txt).

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include <stdlib.h>
#include <unistd.h>

#include "pg_harness.h"
#include "process_group/tdist_backend.h"
#include "tdist/errors.h"
#include "tdist/file_store.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

struct Case {
  std::string name;
  /// The mismatched call on `rank` (group size n).
  std::function<void(ProcessGroup&, int rank, int n)> call;
  /// Every rank's error contains each of these.
  std::vector<std::string> needles;
};

Tensor ones(DType dtype, int64_t n) {
  return make_tensor(dtype, n, [](int64_t) { return 1.0; });
}

// Each rank runs the case's call, then an all_reduce: a rank that returned
// from the first (a broadcast's root waits for no reader) must fail at the
// second, so every rank raises, with every needle in its message; the
// tensors passed stay untouched where a rank returned.
void run_rank(ProcessGroup& pg, int rank, int n, const Case& c) {
  std::string got;
  try {
    c.call(pg, rank, n);
    Tensor t = ones(DType::kFloat32, 3);
    pg.all_reduce(t, ReduceOp::SUM)->wait();
  } catch (const DistError& e) {
    got = e.what();
  }
  check(!got.empty(), "rank " + std::to_string(rank) + " raised no error for " + c.name);
  for (const auto& needle : c.needles) {
    check(got.find(needle) != std::string::npos,
          "rank " + std::to_string(rank) + ": '" + got + "' does not contain '" + needle + "'");
  }
}

std::string run_case(Mode mode, int n, const Case& c) {
  return with_groups(
      mode, n, [&](ProcessGroup& pg, int rank) { run_rank(pg, rank, n, c); }, 20s);
}

std::vector<Case> cases() {
  return {
      {"count",
       [](ProcessGroup& pg, int rank, int) {
         Tensor t = ones(DType::kFloat32, rank == 0 ? 10 : 20);
         pg.all_reduce(t, ReduceOp::SUM)->wait();
       },
       {"all_reduce (call #0 in this group)", "rank 0 passed 10 float32 elements",
        "passed 20 float32 elements"}},
      {"large_count",
       [](ProcessGroup& pg, int rank, int) {
         Tensor t = ones(DType::kFloat32, rank == 0 ? 1 << 20 : 2 << 20);
         pg.all_reduce(t, ReduceOp::SUM)->wait();
       },
       {"rank 0 passed 1048576 float32 elements", "passed 2097152 float32 elements"}},
      {"zero_count",
       [](ProcessGroup& pg, int rank, int) {
         Tensor t = ones(DType::kFloat32, rank == 0 ? 0 : 7);
         pg.all_reduce(t, ReduceOp::SUM)->wait();
       },
       {"rank 0 passed 0 float32 elements", "passed 7 float32 elements"}},
      {"broadcast_count",
       [](ProcessGroup& pg, int rank, int) {
         Tensor t = ones(DType::kFloat32, rank == 0 ? 30000 : 10000);
         pg.broadcast(t, 0)->wait();
       },
       {"broadcast (call #0 in this group)", "rank 0 passed 30000 float32 elements",
        "passed 10000 float32 elements"}},
      {"op",
       [](ProcessGroup& pg, int rank, int) {
         Tensor t = ones(DType::kFloat32, 1 << 16);
         if (rank == 0) {
           pg.all_reduce(t, ReduceOp::SUM)->wait();
         } else {
           pg.broadcast(t, 1)->wait();
         }
       },
       {"rank 0 called all_reduce of 65536 float32 elements (SUM)",
        "called broadcast of 65536 float32 elements"}},
      {"small_op",
       [](ProcessGroup& pg, int rank, int) {
         Tensor t = ones(DType::kFloat32, 2);
         if (rank == 0) {
           pg.all_reduce(t, ReduceOp::SUM)->wait();
         } else {
           pg.broadcast(t, 1)->wait();
         }
       },
       {"all_reduce of 2 float32 elements"}},
      {"dtype",
       [](ProcessGroup& pg, int rank, int) {
         Tensor t = ones(rank == 0 ? DType::kFloat32 : DType::kInt32, 64);
         pg.all_reduce(t, ReduceOp::SUM)->wait();
       },
       {"rank 0 passed 64 float32 elements", "passed 64 int32 elements"}},
      {"root",
       [](ProcessGroup& pg, int rank, int) {
         Tensor t = ones(DType::kFloat32, 4);
         pg.broadcast(t, rank == 0 ? 0 : 1)->wait();
       },
       {"broadcast (call #0 in this group)", "rank 0 passed src 0", "passed src 1"}},
      {"swapped_roots",
       [](ProcessGroup& pg, int rank, int n) {
         // Every rank thinks the next one is the root: nobody sends
         // anything another rank could compare.
         Tensor t = ones(DType::kFloat32, 4);
         pg.broadcast(t, (rank + 1) % n)->wait();
       },
       {"broadcast (call #0 in this group)", "passed src"}},
      {"reduce_op",
       [](ProcessGroup& pg, int rank, int) {
         Tensor t = ones(DType::kFloat32, 100);
         pg.all_reduce(t, rank == 0 ? ReduceOp::SUM : ReduceOp::MAX)->wait();
       },
       {"rank 0 passed op SUM", "passed op MAX"}},
      {"uneven_split_sizes",
       [](ProcessGroup& pg, int rank, int n) {
         // Every rank passes 2 rows per rank, but rank 0 thinks the last
         // rank passes 3.
         std::vector<int64_t> splits(static_cast<size_t>(n), 2);
         if (rank == 0) splits.back() = 3;
         int64_t rows = 0;
         for (int64_t s : splits) rows += s;
         Tensor out = Tensor::zeros(DType::kFloat32, {rows});
         Tensor in = ones(DType::kFloat32, splits[static_cast<size_t>(rank)]);
         pg.all_gather_into_tensor_uneven(out, in, splits)->wait();
       },
       {"all_gather_into_tensor_uneven", "(call #0 in this group)", "float32 elements in all"}},
      {"list_sizes",
       [](ProcessGroup& pg, int rank, int n) {
         // tensor_list entries of 4 elements, but rank 0's last one has 5.
         std::vector<Tensor> outs;
         for (int r = 0; r < n; ++r)
           outs.push_back(Tensor::zeros(DType::kFloat32, {rank == 0 && r == n - 1 ? 5 : 4}));
         Tensor in = ones(DType::kFloat32, rank == 0 && rank == n - 1 ? 5 : 4);
         pg.all_gather(outs, in)->wait();
       },
       {"all_gather (call #0 in this group)", "elements in all"}},
      {"barrier_against_all_gather",
       [](ProcessGroup& pg, int rank, int n) {
         if (rank == 0) {
           pg.barrier()->wait();
         } else {
           std::vector<Tensor> outs;
           for (int r = 0; r < n; ++r) outs.push_back(Tensor::zeros(DType::kFloat32, {4}));
           pg.all_gather(outs, ones(DType::kFloat32, 4))->wait();
         }
       },
       {"rank 0 called barrier", "called all_gather of"}},
      {"all_to_all_splits",
       [](ProcessGroup& pg, int rank, int n) {
         // Rank 1 sends rank 0 three elements where rank 0 expects two.
         std::vector<int64_t> in_splits(static_cast<size_t>(n), 2);
         if (rank == 1) in_splits[0] = 3;
         int64_t in_rows = 0;
         for (int64_t s : in_splits) in_rows += s;
         std::vector<int64_t> out_splits(static_cast<size_t>(n), 2);
         Tensor in = ones(DType::kFloat32, in_rows);
         Tensor out = Tensor::zeros(DType::kFloat32, {2 * n});
         pg.all_to_all_single(out, in, out_splits, in_splits)->wait();
       },
       // Over shared memory "expected 8 bytes from rank 1 but it sent 12",
       // over TCP "receive from rank 1 ...: the message has 12 bytes".
       {"all_to_all_single", "rank 1", "12"}},
  };
}

class Mismatch : public ::testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(Mismatch, EveryKindFailsOnEveryRankNamingBothSides) {
  const auto [mode, n] = GetParam();
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(run_case(mode, n, c), "") << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, Mismatch,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(2, 3)),
                         [](const auto& p) {
                           return std::string(mode_name(std::get<0>(p.param))) + "_" +
                                  std::to_string(std::get<1>(p.param));
                         });

// Two "hosts" of two ranks each (TDIST_HOST_ID): all_reduce runs on shared
// memory inside each host and over TCP across, the other ops over TCP.
TEST(MismatchHierarchy, EveryKindFailsOnEveryRankAcrossHosts) {
  if (getenv("TDIST_TRANSPORT") != nullptr) GTEST_SKIP() << "runs its own hosts";
  const int n = 4;
  for (const auto& c : cases()) {
    const std::string path = temp_path("mismatch_hier");
    auto outcomes = run_forked(
        n,
        [&](int rank) {
          setenv("TDIST_HOST_ID", rank % 2 == 0 ? "a" : "b", 1);
          auto store = std::make_shared<FileStore>(path, n);
          ProcessGroupOptions options;
          options.timeout = 20s;
          auto pg = create_process_group("tdist", store, rank, n, options);
          check(dynamic_cast<ProcessGroupTdist&>(*pg).hierarchical(), "expected the hierarchy");
          run_rank(*pg, rank, n, c);
        },
        60s);
    EXPECT_EQ(describe_failures(outcomes), "") << c.name;
    unlink(path.c_str());
  }
}

// A view into a larger buffer: a peer that passes more elements must not
// write past the view (the elements around it keep their values). One test
// per mode, each in its own process: forked ranks started after thread
// ranks have run are outside what ThreadSanitizer supports.
class MismatchMemory : public ::testing::TestWithParam<Mode> {};

TEST_P(MismatchMemory, NothingOutsideTheCallersTensorChanges) {
  const Mode mode = GetParam();
  EXPECT_EQ(with_groups(
                mode, 2,
                [&](ProcessGroup& pg, int rank) {
                  Tensor whole =
                      make_tensor(DType::kFloat32, 300000, [](int64_t i) { return double(i % 1000); });
                  Tensor view = rank == 0 ? whole.view(100000, 352) : whole.view(0, 200000);
                  std::string got;
                  try {
                    pg.all_reduce(view, ReduceOp::SUM)->wait();
                  } catch (const DistError& e) {
                    got = e.what();
                  }
                  check(got.find("passed 352 float32 elements") != std::string::npos,
                        "rank " + std::to_string(rank) + ": " + got);
                  // Every element still holds its own value: the call
                  // returned no data from a mismatched peer.
                  check_elements(
                      whole, 0, 300000, [](int64_t i) { return double(i % 1000); },
                      "rank " + std::to_string(rank) + "'s buffer");
                },
                20s),
            "")
      << mode_name(mode);
}

INSTANTIATE_TEST_SUITE_P(Modes, MismatchMemory, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& p) { return std::string(mode_name(p.param)); });

// A send and a recv that do not match: the receiver fails naming both, and
// its buffer is not written.
TEST(MismatchP2p, ARecvOfAnotherDtypeOrCountFailsNamingBothSides) {
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    EXPECT_EQ(
        with_groups(
            mode, 2,
            [&](ProcessGroup& pg, int rank) {
              if (rank == 0) {
                pg.send(ones(DType::kInt64, 10), 1, 7)->wait();
                // Rank 1 refused it and said why, before its message on tag
                // 9 (one connection keeps order): the refusal fails this
                // recv if it came first, else the next send; once.
                std::string got;
                try {
                  pg.recv(Tensor::zeros(DType::kUInt8, {1}), 1, 9)->wait();
                  pg.send(Tensor::zeros(DType::kUInt8, {1}), 1, 10)->wait();
                } catch (const DistError& e) {
                  got = e.what();
                }
                check(got.find("a send of rank 0 was refused") != std::string::npos &&
                          got.find("rank 0 sent 10 int64 elements but rank 1 receives 10 float32") !=
                              std::string::npos,
                      "the sender's error: '" + got + "'");
                pg.send(ones(DType::kFloat32, 10), 1, 8)->wait();
                return;
              }
              for (auto [dtype, count, tag] : {std::tuple{DType::kFloat32, 10, 7}, {DType::kFloat32, 5, 8}}) {
                Tensor t = Tensor::zeros(dtype, {count});
                std::string got;
                try {
                  pg.recv(t, 0, tag)->wait();
                } catch (const DistError& e) {
                  got = e.what();
                }
                const std::string want =
                    tag == 7 ? "rank 0 sent 10 int64 elements but rank 1 receives 10 float32"
                             : "rank 0 sent 10 float32 elements but rank 1 receives 5 float32";
                check(got.find(want) != std::string::npos, "recv tag " + std::to_string(tag) + ": " + got);
                check(got.find("tag " + std::to_string(tag)) != std::string::npos, "no user tag in: " + got);
                check_elements(
                    t, 0, count, [](int64_t) { return 0.0; }, "the recv buffer");
                if (tag == 7) pg.send(Tensor::zeros(DType::kUInt8, {1}), 0, 9)->wait();
              }
            },
            20s),
        "")
        << mode_name(mode);
  }
}

}  // namespace
}  // namespace tdist::testing
