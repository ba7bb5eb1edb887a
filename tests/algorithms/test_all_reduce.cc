// all_reduce with every algorithm forced in turn: every dtype with every
// valid op, counts around the group size, the pipelined path, and bitwise
// identity of the result across ranks for order-sensitive float32 values.

#include <cstring>
#include <limits>

#include "algorithms/tuning/tcp_model.h"
#include "test_harness.h"

namespace tdist::testing {
namespace {

using algorithms::AllReduceAlgo;

constexpr AllReduceAlgo kAlgos[] = {AllReduceAlgo::kRecursiveDoubling, AllReduceAlgo::kRing,
                                    AllReduceAlgo::kRabenseifner};

void check_all_reduce(Group& g, AllReduceAlgo algo, DType dtype, const ReduceOp& op, size_t count) {
  std::vector<uint8_t> data = contribution(dtype, op, g.rank(), g.size(), count);
  algorithms::all_reduce(g.call("all_reduce"), data.data(), count, dtype, op, algo);
  const std::string diff =
      first_difference(data, reference_reduce(dtype, op, g.size(), count), element_size(dtype));
  check(diff.empty(), std::string("all_reduce ") + algorithms::algo_name(algo) + " " + describe(dtype, op) +
                          " count " + std::to_string(count) + ": " + diff);
}

using AllReduceTest = GroupTest;

TEST_P(AllReduceTest, EveryDTypeAndOpWithEveryAlgorithm) {
  EXPECT_EQ(with_group(mode(), n(),
                       [](Group& g) {
                         for (AllReduceAlgo algo : kAlgos) {
                           for (DType dtype : kAllDTypes) {
                             for (const ReduceOp& op : ops_for(dtype))
                               check_all_reduce(g, algo, dtype, op, 7);
                           }
                         }
                       }),
            "");
}

TEST_P(AllReduceTest, CountsAroundTheGroupSizeWithEveryAlgorithm) {
  EXPECT_EQ(with_group(mode(), n(),
                       [](Group& g) {
                         for (AllReduceAlgo algo : kAlgos) {
                           for (size_t count : small_counts(g.size())) {
                             check_all_reduce(g, algo, DType::kFloat32, ReduceOp::SUM, count);
                             check_all_reduce(g, algo, DType::kInt64, ReduceOp::MAX, count);
                             check_all_reduce(g, algo, DType::kFloat16, ReduceOp::AVG, count);
                             check_all_reduce(g, algo, DType::kInt8, ReduceOp::premul_sum(2.75), count);
                           }
                         }
                       }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Groups, AllReduceTest, ::testing::ValuesIn(group_params()), group_param_name);

// ---- The large-message (pipelined) path ----

class AllReduceLargeTest : public GroupTest {};

TEST_P(AllReduceLargeTest, Float32SumOverAMillionElementsWithEveryAlgorithm) {
  EXPECT_EQ(with_group(mode(), n(),
                       [](Group& g) {
                         for (AllReduceAlgo algo : kAlgos) {
                           check_all_reduce(g, algo, DType::kFloat32, ReduceOp::SUM, kLargeCount);
                         }
                       }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Groups, AllReduceLargeTest,
                         ::testing::Values(GroupParam{Mode::kThreads, 2}, GroupParam{Mode::kThreads, 3},
                                           GroupParam{Mode::kThreads, 5}),
                         group_param_name);

// ---- Bitwise identity across ranks ----

// Values whose sum depends on the order of addition (1e8 + 1 - 1e8), NaNs
// with different payloads and signed zeros (which MAX keeps depends on the
// operand order).
float sensitive_value(ReduceOp::Kind kind, int rank, size_t i) {
  static const float kSum[] = {1e8f, 1.0f, -1e8f, 0.3f, 3.3e7f, -1.7f, 7e-3f, -2.5e-4f};
  if (kind != ReduceOp::MAX) return kSum[(static_cast<size_t>(rank) * 3 + i) % 8] * (1.0f + 0.1f * rank);
  switch ((static_cast<size_t>(rank) + i) % 4) {
    case 0: {
      const uint32_t nan_bits = 0x7fc00000u | static_cast<uint32_t>(rank + 1);
      float nan;
      std::memcpy(&nan, &nan_bits, sizeof(nan));
      return nan;
    }
    case 1:
      return 0.0f;
    case 2:
      return -0.0f;
    default:
      return static_cast<float>(i % 5);
  }
}

class AllReduceIdentityTest : public GroupTest {};

TEST_P(AllReduceIdentityTest, Float32ResultIsBitwiseIdenticalOnEveryRank) {
  const int p = n();
  // Counts below, at and well above one pipeline segment (65536 floats).
  const std::vector<size_t> counts{1, 7, static_cast<size_t>(p) + 1, 70001};
  const std::vector<ReduceOp> ops{ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MAX, ReduceOp::premul_sum(0.1)};
  // results[case][rank]
  std::vector<std::vector<std::vector<uint8_t>>> results;
  for (size_t c = 0; c < std::size(kAlgos) * counts.size() * ops.size(); ++c) {
    results.emplace_back(static_cast<size_t>(p));
  }
  EXPECT_EQ(with_group(Mode::kThreads, p,
                       [&](Group& g) {
                         size_t c = 0;
                         for (AllReduceAlgo algo : kAlgos) {
                           for (size_t count : counts) {
                             for (const ReduceOp& op : ops) {
                               std::vector<float> data(count);
                               for (size_t i = 0; i < count; ++i)
                                 data[i] = sensitive_value(op.kind, g.rank(), i);
                               algorithms::all_reduce(g.call("all_reduce"), data.data(), count,
                                                      DType::kFloat32, op, algo);
                               auto& slot = results[c++][static_cast<size_t>(g.rank())];
                               slot.resize(count * sizeof(float));
                               std::memcpy(slot.data(), data.data(), slot.size());
                             }
                           }
                         }
                       }),
            "");
  size_t c = 0;
  for (AllReduceAlgo algo : kAlgos) {
    for (size_t count : counts) {
      for (const ReduceOp& op : ops) {
        for (int r = 1; r < p; ++r) {
          EXPECT_EQ(first_difference(results[c][static_cast<size_t>(r)], results[c][0], sizeof(float)), "")
              << algorithms::algo_name(algo) << " " << reduce_op_name(op) << " count " << count << ": rank "
              << r << " vs rank 0";
        }
        ++c;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, AllReduceIdentityTest,
                         ::testing::Values(GroupParam{Mode::kThreads, 1}, GroupParam{Mode::kThreads, 2},
                                           GroupParam{Mode::kThreads, 3}, GroupParam{Mode::kThreads, 4},
                                           GroupParam{Mode::kThreads, 5}, GroupParam{Mode::kThreads, 8}),
                         group_param_name);

}  // namespace
}  // namespace tdist::testing
