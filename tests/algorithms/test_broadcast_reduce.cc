// broadcast and reduce with every algorithm forced in turn, from every root.

#include "algorithms/tuning/tcp_model.h"
#include "test_harness.h"

namespace tdist::testing {
namespace {

using algorithms::BroadcastAlgo;
using algorithms::ReduceAlgo;

constexpr BroadcastAlgo kBroadcastAlgos[] = {BroadcastAlgo::kBinomial, BroadcastAlgo::kScatterAllGather};
constexpr ReduceAlgo kReduceAlgos[] = {ReduceAlgo::kBinomial, ReduceAlgo::kReduceScatterGather};

void check_broadcast(Group& g, BroadcastAlgo algo, int root, size_t nbytes) {
  // Non-roots start with garbage that must be overwritten.
  std::vector<uint8_t> data =
      g.rank() == root ? pattern_block(root, nbytes) : pattern_block(g.rank() + 100, nbytes);
  algorithms::broadcast(g.call("broadcast"), data.data(), nbytes, root, algo);
  check(data == pattern_block(root, nbytes), std::string("broadcast ") + algorithms::algo_name(algo) +
                                                 " root " + std::to_string(root) + " bytes " +
                                                 std::to_string(nbytes) + ": " +
                                                 first_difference(data, pattern_block(root, nbytes), 1));
}

void check_reduce(Group& g, ReduceAlgo algo, int root, DType dtype, const ReduceOp& op, size_t count) {
  std::vector<uint8_t> data = contribution(dtype, op, g.rank(), g.size(), count);
  algorithms::reduce(g.call("reduce"), data.data(), count, dtype, op, root, algo);
  if (g.rank() != root) return;  // other buffers are scratch
  const std::string diff =
      first_difference(data, reference_reduce(dtype, op, g.size(), count), element_size(dtype));
  check(diff.empty(), std::string("reduce ") + algorithms::algo_name(algo) + " root " + std::to_string(root) +
                          " " + describe(dtype, op) + " count " + std::to_string(count) + ": " + diff);
}

using BroadcastTest = GroupTest;

TEST_P(BroadcastTest, EveryRootAndSizeWithEveryAlgorithm) {
  EXPECT_EQ(with_group(mode(), n(),
                       [](Group& g) {
                         for (BroadcastAlgo algo : kBroadcastAlgos) {
                           for (int root = 0; root < g.size(); ++root) {
                             for (size_t count : small_counts(g.size()))
                               check_broadcast(g, algo, root, count);
                             check_broadcast(g, algo, root, 4099);  // not a multiple of anything
                           }
                         }
                       }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Groups, BroadcastTest, ::testing::ValuesIn(group_params()), group_param_name);

using ReduceTest = GroupTest;

TEST_P(ReduceTest, EveryRootCountAndOpWithEveryAlgorithm) {
  EXPECT_EQ(with_group(mode(), n(),
                       [](Group& g) {
                         for (ReduceAlgo algo : kReduceAlgos) {
                           for (int root = 0; root < g.size(); ++root) {
                             for (size_t count : small_counts(g.size())) {
                               check_reduce(g, algo, root, DType::kFloat32, ReduceOp::SUM, count);
                             }
                             check_reduce(g, algo, root, DType::kInt32, ReduceOp::PRODUCT, 9);
                             check_reduce(g, algo, root, DType::kBFloat16, ReduceOp::AVG, 9);
                             check_reduce(g, algo, root, DType::kComplex128, ReduceOp::premul_sum(3.0), 9);
                             check_reduce(g, algo, root, DType::kBool, ReduceOp::BXOR, 9);
                             check_reduce(g, algo, root, DType::kUInt8, ReduceOp::MIN, 9);
                           }
                         }
                       }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Groups, ReduceTest, ::testing::ValuesIn(group_params()), group_param_name);

class RootedLargeTest : public GroupTest {};

TEST_P(RootedLargeTest, OverAMillionElementsWithEveryAlgorithm) {
  EXPECT_EQ(with_group(mode(), n(),
                       [](Group& g) {
                         const int last = g.size() - 1;
                         for (BroadcastAlgo algo : kBroadcastAlgos) {
                           check_broadcast(g, algo, last, kLargeCount * sizeof(float));
                         }
                         for (ReduceAlgo algo : kReduceAlgos) {
                           check_reduce(g, algo, 0, DType::kFloat32, ReduceOp::SUM, kLargeCount);
                           check_reduce(g, algo, last, DType::kFloat32, ReduceOp::SUM, kLargeCount);
                         }
                       }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Groups, RootedLargeTest,
                         ::testing::Values(GroupParam{Mode::kThreads, 2}, GroupParam{Mode::kThreads, 3},
                                           GroupParam{Mode::kThreads, 5}),
                         group_param_name);

}  // namespace
}  // namespace tdist::testing
