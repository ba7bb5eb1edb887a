// all_gather, gather and scatter with every algorithm forced in turn, with
// equal, uneven and empty per-rank blocks, from every root, in place and not.

#include <numeric>

#include "algorithms/tuning/tcp_model.h"
#include "test_harness.h"

namespace tdist::testing {
namespace {

using algorithms::AllGatherAlgo;
using algorithms::GatherAlgo;
using algorithms::ScatterAlgo;

constexpr AllGatherAlgo kAllGatherAlgos[] = {AllGatherAlgo::kRing, AllGatherAlgo::kRecursiveDoubling,
                                             AllGatherAlgo::kBruck};
constexpr GatherAlgo kGatherAlgos[] = {GatherAlgo::kBinomial, GatherAlgo::kLinear};
constexpr ScatterAlgo kScatterAlgos[] = {ScatterAlgo::kBinomial, ScatterAlgo::kLinear};

// Block sizes per rank: equal ones for every small count, uneven ones with
// empty blocks, and one block several pipeline segments long among small
// ones.
std::vector<std::vector<size_t>> layouts(int p) {
  std::vector<std::vector<size_t>> out;
  for (size_t count : small_counts(p)) out.emplace_back(static_cast<size_t>(p), count);
  std::vector<size_t> uneven(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r)
    uneven[static_cast<size_t>(r)] = r % 3 == 1 ? 0 : static_cast<size_t>(r + 1) * 5 + 3;
  out.push_back(uneven);
  std::vector<size_t> skewed(static_cast<size_t>(p), 3);
  skewed[static_cast<size_t>(p / 2)] = 600'001;
  out.push_back(skewed);
  return out;
}

// Over a million float32 elements in all, split unevenly.
std::vector<size_t> large_layout(int p) {
  std::vector<size_t> bytes(static_cast<size_t>(p));
  const size_t share = kLargeCount / static_cast<size_t>(p);
  for (int r = 0; r < p; ++r)
    bytes[static_cast<size_t>(r)] = (share + static_cast<size_t>(r) * 13) * sizeof(float);
  return bytes;
}

std::vector<uint8_t> concatenation(const std::vector<size_t>& bytes) {
  std::vector<uint8_t> all;
  for (size_t r = 0; r < bytes.size(); ++r) {
    const std::vector<uint8_t> block = pattern_block(static_cast<int>(r), bytes[r]);
    all.insert(all.end(), block.begin(), block.end());
  }
  return all;
}

std::string sizes_text(const std::vector<size_t>& bytes) {
  std::string text;
  for (size_t b : bytes) text += (text.empty() ? "" : ",") + std::to_string(b);
  return "[" + text + "]";
}

void check_all_gather(Group& g, AllGatherAlgo algo, const std::vector<size_t>& bytes, bool in_place) {
  const size_t total = std::accumulate(bytes.begin(), bytes.end(), size_t{0});
  const auto me = static_cast<size_t>(g.rank());
  const size_t offset =
      std::accumulate(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(me), size_t{0});
  std::vector<uint8_t> out(total, 0xee);
  std::vector<uint8_t> in = pattern_block(g.rank(), bytes[me]);
  const void* src = in.data();
  if (in_place) {
    std::copy(in.begin(), in.end(), out.begin() + static_cast<std::ptrdiff_t>(offset));
    src = out.data() + offset;
  }
  algorithms::all_gather(g.call("all_gather"), src, out.data(), bytes, algo);
  check(out == concatenation(bytes), std::string("all_gather ") + algorithms::algo_name(algo) +
                                         (in_place ? " in place" : "") + " sizes " + sizes_text(bytes) +
                                         ": " + first_difference(out, concatenation(bytes), 1));
}

void check_gather(Group& g, GatherAlgo algo, int root, const std::vector<size_t>& bytes) {
  const size_t total = std::accumulate(bytes.begin(), bytes.end(), size_t{0});
  std::vector<uint8_t> in = pattern_block(g.rank(), bytes[static_cast<size_t>(g.rank())]);
  std::vector<uint8_t> out(g.rank() == root ? total : 0, 0xee);
  algorithms::gather(g.call("gather"), in.data(), g.rank() == root ? out.data() : nullptr, bytes, root, algo);
  if (g.rank() != root) return;
  check(out == concatenation(bytes), std::string("gather ") + algorithms::algo_name(algo) + " root " +
                                         std::to_string(root) + " sizes " + sizes_text(bytes) + ": " +
                                         first_difference(out, concatenation(bytes), 1));
}

void check_scatter(Group& g, ScatterAlgo algo, int root, const std::vector<size_t>& bytes) {
  const std::vector<uint8_t> in = g.rank() == root ? concatenation(bytes) : std::vector<uint8_t>{};
  std::vector<uint8_t> out(bytes[static_cast<size_t>(g.rank())], 0xee);
  algorithms::scatter(g.call("scatter"), g.rank() == root ? in.data() : nullptr, out.data(), bytes, root,
                      algo);
  const std::vector<uint8_t> want = pattern_block(g.rank(), out.size());
  check(out == want, std::string("scatter ") + algorithms::algo_name(algo) + " root " + std::to_string(root) +
                         " sizes " + sizes_text(bytes) + ": " + first_difference(out, want, 1));
}

using AllGatherTest = GroupTest;

TEST_P(AllGatherTest, EveryLayoutWithEveryAlgorithm) {
  EXPECT_EQ(with_group(mode(), n(),
                       [](Group& g) {
                         for (AllGatherAlgo algo : kAllGatherAlgos) {
                           for (const auto& bytes : layouts(g.size())) {
                             check_all_gather(g, algo, bytes, /*in_place=*/false);
                             check_all_gather(g, algo, bytes, /*in_place=*/true);
                           }
                         }
                       }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Groups, AllGatherTest, ::testing::ValuesIn(group_params()), group_param_name);

using GatherScatterTest = GroupTest;

TEST_P(GatherScatterTest, EveryRootAndLayoutWithEveryAlgorithm) {
  EXPECT_EQ(with_group(mode(), n(),
                       [](Group& g) {
                         for (int root = 0; root < g.size(); ++root) {
                           for (const auto& bytes : layouts(g.size())) {
                             for (GatherAlgo algo : kGatherAlgos) check_gather(g, algo, root, bytes);
                             for (ScatterAlgo algo : kScatterAlgos) check_scatter(g, algo, root, bytes);
                           }
                         }
                       }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Groups, GatherScatterTest, ::testing::ValuesIn(group_params()), group_param_name);

class GatherFamilyLargeTest : public GroupTest {};

TEST_P(GatherFamilyLargeTest, OverAMillionElementsWithEveryAlgorithm) {
  EXPECT_EQ(with_group(mode(), n(),
                       [](Group& g) {
                         const std::vector<size_t> bytes = large_layout(g.size());
                         for (AllGatherAlgo algo : kAllGatherAlgos) check_all_gather(g, algo, bytes, false);
                         for (GatherAlgo algo : kGatherAlgos) check_gather(g, algo, g.size() - 1, bytes);
                         for (ScatterAlgo algo : kScatterAlgos) check_scatter(g, algo, g.size() - 1, bytes);
                       }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Groups, GatherFamilyLargeTest,
                         ::testing::Values(GroupParam{Mode::kThreads, 2}, GroupParam{Mode::kThreads, 3},
                                           GroupParam{Mode::kThreads, 5}),
                         group_param_name);

}  // namespace
}  // namespace tdist::testing
