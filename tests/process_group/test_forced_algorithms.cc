// Every algorithm, forced through TDIST_ALGO_<OP>, gives the same results
// through the process group as the automatic choice, for group sizes that
// are and are not powers of two and for empty, odd and larger messages.

#include <gtest/gtest.h>

#include <cstdlib>

#include "pg_harness.h"

namespace tdist::testing {
namespace {

struct Forced {
  const char* env;
  const char* algo;
};

// Runs the collective the variable governs and checks its result.
void exercise(const std::string& env, ProcessGroup& pg, int rank) {
  const int p = pg.size();
  for (int64_t count : {0, 1, 13, 40000}) {
    auto value = [&](int r, int64_t i) { return static_cast<double>((r + 1) * (i % 11 + 1)); };
    auto total = [&](int64_t i) {
      double s = 0;
      for (int r = 0; r < p; ++r) s += value(r, i);
      return s;
    };
    std::string what = env + " count " + std::to_string(count);
    if (env == "TDIST_ALGO_ALL_REDUCE") {
      Tensor t = make_tensor(DType::kFloat32, count, [&](int64_t i) { return value(rank, i); });
      pg.all_reduce(t, ReduceOp::SUM)->wait();
      for (int64_t i = 0; i < count; ++i) check(real_at(t, i) == total(i), what);
    } else if (env == "TDIST_ALGO_BROADCAST") {
      Tensor t =
          make_tensor(DType::kInt32, count, [&](int64_t i) { return rank == p - 1 ? value(rank, i) : 0; });
      pg.broadcast(t, p - 1)->wait();
      for (int64_t i = 0; i < count; ++i) check(real_at(t, i) == value(p - 1, i), what);
    } else if (env == "TDIST_ALGO_REDUCE") {
      Tensor t = make_tensor(DType::kFloat64, count, [&](int64_t i) { return value(rank, i); });
      pg.reduce(t, p / 2, ReduceOp::SUM)->wait();
      if (rank == p / 2) {
        for (int64_t i = 0; i < count; ++i) check(real_at(t, i) == total(i), what);
      }
    } else if (env == "TDIST_ALGO_ALL_GATHER") {
      Tensor in = make_tensor(DType::kInt64, count, [&](int64_t i) { return value(rank, i); });
      Tensor out = Tensor::zeros(DType::kInt64, {p * count});
      pg.all_gather_into_tensor(out, in)->wait();
      for (int r = 0; r < p; ++r) {
        for (int64_t i = 0; i < count; ++i) check(real_at(out, r * count + i) == value(r, i), what);
      }
    } else if (env == "TDIST_ALGO_GATHER" || env == "TDIST_ALGO_SCATTER") {
      Tensor in = make_tensor(DType::kInt16, count, [&](int64_t i) { return value(rank, i); });
      std::vector<Tensor> list;
      if (rank == 0) {
        for (int r = 0; r < p; ++r) list.push_back(Tensor::zeros(DType::kInt16, {count}));
      }
      pg.gather(list, in, 0)->wait();
      if (rank == 0) {
        for (int r = 0; r < p; ++r) {
          for (int64_t i = 0; i < count; ++i)
            check(real_at(list[static_cast<size_t>(r)], i) == value(r, i), what);
        }
      }
      Tensor out = Tensor::zeros(DType::kInt16, {count});
      pg.scatter(out, list, 0)->wait();
      for (int64_t i = 0; i < count; ++i) check(real_at(out, i) == value(rank, i), what + " scatter");
    } else if (env == "TDIST_ALGO_REDUCE_SCATTER") {
      Tensor in = make_tensor(DType::kFloat32, p * count, [&](int64_t i) { return value(rank, i); });
      Tensor out = Tensor::zeros(DType::kFloat32, {count});
      pg.reduce_scatter_tensor(out, in, ReduceOp::SUM)->wait();
      for (int64_t i = 0; i < count; ++i) check(real_at(out, i) == total(rank * count + i), what);
    } else if (env == "TDIST_ALGO_ALL_TO_ALL") {
      Tensor in = make_tensor(DType::kInt32, p * count, [&](int64_t i) { return rank * 100000 + i; });
      Tensor out = Tensor::zeros(DType::kInt32, {p * count});
      pg.all_to_all_single(out, in, {}, {})->wait();
      for (int s = 0; s < p; ++s) {
        for (int64_t i = 0; i < count; ++i)
          check(real_at(out, s * count + i) == s * 100000 + rank * count + i, what);
      }
    } else if (env == "TDIST_ALGO_BARRIER") {
      pg.barrier()->wait();
    }
  }
}

class ForcedAlgorithm : public ::testing::TestWithParam<Forced> {};

TEST_P(ForcedAlgorithm, GivesTheReferenceResult) {
  setenv(GetParam().env, GetParam().algo, 1);
  for (int n : {1, 3, 4, 5}) {
    EXPECT_EQ(with_groups(Mode::kThreads, n,
                          [&](ProcessGroup& pg, int rank) { exercise(GetParam().env, pg, rank); }),
              "")
        << n << " ranks";
  }
  EXPECT_EQ(with_groups(Mode::kProcesses, 3,
                        [&](ProcessGroup& pg, int rank) { exercise(GetParam().env, pg, rank); }),
            "");
  unsetenv(GetParam().env);
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, ForcedAlgorithm,
    ::testing::Values(
        Forced{"TDIST_ALGO_ALL_REDUCE", "recursive_doubling"}, Forced{"TDIST_ALGO_ALL_REDUCE", "ring"},
        Forced{"TDIST_ALGO_ALL_REDUCE", "rabenseifner"}, Forced{"TDIST_ALGO_BROADCAST", "binomial"},
        Forced{"TDIST_ALGO_BROADCAST", "scatter_allgather"}, Forced{"TDIST_ALGO_REDUCE", "binomial"},
        Forced{"TDIST_ALGO_REDUCE", "reduce_scatter_gather"}, Forced{"TDIST_ALGO_ALL_GATHER", "ring"},
        Forced{"TDIST_ALGO_ALL_GATHER", "recursive_doubling"}, Forced{"TDIST_ALGO_ALL_GATHER", "bruck"},
        Forced{"TDIST_ALGO_GATHER", "binomial"}, Forced{"TDIST_ALGO_GATHER", "linear"},
        Forced{"TDIST_ALGO_SCATTER", "binomial"}, Forced{"TDIST_ALGO_SCATTER", "linear"},
        Forced{"TDIST_ALGO_REDUCE_SCATTER", "ring"}, Forced{"TDIST_ALGO_REDUCE_SCATTER", "recursive_halving"},
        Forced{"TDIST_ALGO_ALL_TO_ALL", "pairwise"}, Forced{"TDIST_ALGO_ALL_TO_ALL", "linear"},
        Forced{"TDIST_ALGO_BARRIER", "dissemination"}),
    [](const auto& p) { return std::string(p.param.env + 11) + "_" + p.param.algo; });

}  // namespace
}  // namespace tdist::testing
