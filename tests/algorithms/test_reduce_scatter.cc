// reduce_scatter with every algorithm forced in turn: equal, uneven and
// empty blocks, several dtypes and ops, in place and not (the input must stay
// untouched), and the pipelined path.

#include <numeric>

#include "algorithms/tuning/tcp_model.h"
#include "test_harness.h"

namespace tdist::testing {
namespace {

using algorithms::ReduceScatterAlgo;

constexpr ReduceScatterAlgo kAlgos[] = {ReduceScatterAlgo::kRing, ReduceScatterAlgo::kRecursiveHalving};

std::vector<std::vector<size_t>> layouts(int p) {
  std::vector<std::vector<size_t>> out;
  for (size_t count : small_counts(p)) out.emplace_back(static_cast<size_t>(p), count);
  std::vector<size_t> uneven(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r)
    uneven[static_cast<size_t>(r)] = r % 3 == 2 ? 0 : static_cast<size_t>(r) * 3 + 1;
  out.push_back(uneven);
  return out;
}

void check_reduce_scatter(Group& g, ReduceScatterAlgo algo, DType dtype, const ReduceOp& op,
                          const std::vector<size_t>& counts, bool in_place) {
  const size_t eb = element_size(dtype);
  const auto me = static_cast<size_t>(g.rank());
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t offset =
      std::accumulate(counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(me), size_t{0});
  std::vector<uint8_t> in = contribution(dtype, op, g.rank(), g.size(), total);
  const std::vector<uint8_t> original = in;
  std::vector<uint8_t> separate(counts[me] * eb, 0xee);
  uint8_t* out = in_place ? in.data() + offset * eb : separate.data();
  algorithms::reduce_scatter(g.call("reduce_scatter"), in.data(), out, counts, dtype, op, algo);

  const std::vector<uint8_t> all = reference_reduce(dtype, op, g.size(), total);
  const std::vector<uint8_t> want(all.begin() + static_cast<std::ptrdiff_t>(offset * eb),
                                  all.begin() + static_cast<std::ptrdiff_t>((offset + counts[me]) * eb));
  const std::vector<uint8_t> got(out, out + counts[me] * eb);
  std::string what = std::string("reduce_scatter ") + algorithms::algo_name(algo) +
                     (in_place ? " in place " : " ") + describe(dtype, op) + " counts";
  for (size_t c : counts) what += " " + std::to_string(c);
  check(got == want, what + ": " + first_difference(got, want, eb));
  if (!in_place) check(in == original, what + ": the input was modified");
}

using ReduceScatterTest = GroupTest;

TEST_P(ReduceScatterTest, EveryLayoutAndSeveralOpsWithEveryAlgorithm) {
  EXPECT_EQ(with_group(
                mode(), n(),
                [](Group& g) {
                  for (ReduceScatterAlgo algo : kAlgos) {
                    for (const auto& counts : layouts(g.size())) {
                      for (bool in_place : {false, true}) {
                        check_reduce_scatter(g, algo, DType::kFloat32, ReduceOp::SUM, counts, in_place);
                        check_reduce_scatter(g, algo, DType::kComplex64, ReduceOp::premul_sum(3.0), counts,
                                             in_place);
                      }
                      check_reduce_scatter(g, algo, DType::kInt16, ReduceOp::MAX, counts, false);
                      check_reduce_scatter(g, algo, DType::kFloat16, ReduceOp::AVG, counts, false);
                      check_reduce_scatter(g, algo, DType::kInt64, ReduceOp::BXOR, counts, false);
                      check_reduce_scatter(g, algo, DType::kInt32, ReduceOp::premul_sum(2.75), counts, false);
                    }
                  }
                }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Groups, ReduceScatterTest, ::testing::ValuesIn(group_params()), group_param_name);

class ReduceScatterLargeTest : public GroupTest {};

TEST_P(ReduceScatterLargeTest, OverAMillionElementsWithEveryAlgorithm) {
  EXPECT_EQ(with_group(mode(), n(),
                       [](Group& g) {
                         const auto p = static_cast<size_t>(g.size());
                         std::vector<size_t> counts(p);
                         for (size_t r = 0; r < p; ++r) counts[r] = kLargeCount / p + r * 1001;
                         for (ReduceScatterAlgo algo : kAlgos) {
                           check_reduce_scatter(g, algo, DType::kFloat32, ReduceOp::SUM, counts, false);
                         }
                         // PREMUL_SUM premultiplies segment by segment into scratch.
                         check_reduce_scatter(g, ReduceScatterAlgo::kRing, DType::kFloat32,
                                              ReduceOp::premul_sum(3.0), counts, true);
                       }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Groups, ReduceScatterLargeTest,
                         ::testing::Values(GroupParam{Mode::kThreads, 2}, GroupParam{Mode::kThreads, 3},
                                           GroupParam{Mode::kThreads, 5}),
                         group_param_name);

}  // namespace
}  // namespace tdist::testing
