// DeviceMesh rank arithmetic, checked against coordinates worked out by hand
// and against a brute-force walk over the row-major array.

#include <gtest/gtest.h>

#include <numeric>

#include "tdist/errors.h"
#include "tdist/mesh.h"

namespace tdist::mesh {
namespace {

std::vector<int> iota_ranks(int n) {
  std::vector<int> ranks(static_cast<size_t>(n));
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

TEST(DeviceMesh, CoordinatesAreRowMajor) {
  DeviceMesh mesh({2, 3}, {5, 4, 3, 2, 1, 0}, {"dp", "tp"});
  EXPECT_EQ(mesh.ndim(), 2);
  EXPECT_EQ(mesh.size(), 6);
  EXPECT_EQ(mesh.size(1), 3);
  EXPECT_EQ(*mesh.coordinate_of(5), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(*mesh.coordinate_of(3), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(*mesh.coordinate_of(2), (std::vector<int64_t>{1, 0}));
  EXPECT_FALSE(mesh.coordinate_of(6).has_value());
  EXPECT_EQ(mesh.rank_at({1, 2}), 0);
  EXPECT_EQ(mesh.dim_index("tp"), 1);
}

TEST(DeviceMesh, GroupRanksFollowMeshOrderNotRankOrder) {
  DeviceMesh mesh({2, 3}, {5, 4, 3, 2, 1, 0}, {"dp", "tp"});
  EXPECT_EQ(mesh.group_ranks(1, 1), (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(mesh.group_ranks(0, 1), (std::vector<int>{4, 1}));
  EXPECT_EQ(mesh.all_group_ranks(0), (std::vector<std::vector<int>>{{5, 2}, {4, 1}, {3, 0}}));
  EXPECT_EQ(mesh.all_group_ranks(1), (std::vector<std::vector<int>>{{5, 4, 3}, {2, 1, 0}}));
}

TEST(DeviceMesh, EveryRankIsInExactlyOneGroupPerDimension) {
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{1}, {8}, {2, 4}, {3, 1}, {2, 3, 2}, {1, 1, 5}, {2, 2, 2}}) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    DeviceMesh mesh(shape, iota_ranks(static_cast<int>(n)));
    for (int d = 0; d < mesh.ndim(); ++d) {
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (const auto& group : mesh.all_group_ranks(d)) {
        ASSERT_EQ(static_cast<int64_t>(group.size()), shape[static_cast<size_t>(d)]);
        for (int r : group) {
          ++seen[static_cast<size_t>(r)];
          EXPECT_EQ(mesh.group_ranks(d, r), group);
          // Members differ from each other only in coordinate d.
          auto a = *mesh.coordinate_of(r);
          auto b = *mesh.coordinate_of(group[0]);
          a[static_cast<size_t>(d)] = b[static_cast<size_t>(d)] = 0;
          EXPECT_EQ(a, b);
        }
      }
      for (int count : seen) EXPECT_EQ(count, 1);
    }
  }
}

TEST(DeviceMesh, SliceKeepsTheCallersCoordinateInTheOtherDimensions) {
  DeviceMesh mesh({2, 2, 3}, iota_ranks(12), {"pp", "dp", "tp"});
  DeviceMesh tp = mesh.slice({2}, 7);  // rank 7 is at (1, 0, 1)
  EXPECT_EQ(tp.shape(), (std::vector<int64_t>{3}));
  EXPECT_EQ(tp.ranks(), (std::vector<int>{6, 7, 8}));
  EXPECT_EQ(tp.dim_names(), (std::vector<std::string>{"tp"}));
  DeviceMesh pp_tp = mesh.slice({0, 2}, 7);
  EXPECT_EQ(pp_tp.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(pp_tp.ranks(), (std::vector<int>{0, 1, 2, 6, 7, 8}));
  DeviceMesh whole = mesh.slice({0, 1, 2}, 7);
  EXPECT_EQ(whole.ranks(), mesh.ranks());
}

TEST(DeviceMesh, BadInputIsRefusedWithTheReason) {
  auto message = [](auto&& make) {
    try {
      make();
    } catch (const DistInvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { DeviceMesh({2, 2}, {0, 1, 2}); }).find("holds 4 ranks but 3"), std::string::npos);
  EXPECT_NE(message([] { DeviceMesh({2}, {1, 1}); }).find("appears twice"), std::string::npos);
  EXPECT_NE(message([] { DeviceMesh({0}, {}); }).find("size >= 1"), std::string::npos);
  EXPECT_NE(message([] {
              DeviceMesh({2}, {0, 1}, {"a", "b"});
            }).find("2 dimension names"),
            std::string::npos);
  EXPECT_NE(message([] {
              DeviceMesh({2, 1}, {0, 1}, {"a", "a"});
            }).find("'a' appears twice"),
            std::string::npos);
  DeviceMesh mesh({2, 2}, iota_ranks(4), {"dp", "tp"});
  EXPECT_NE(message([&] { mesh.dim_index("pp"); }).find("[dp, tp]"), std::string::npos);
  EXPECT_NE(message([&] { mesh.group_ranks(0, 9); }).find("rank 9 is not in"), std::string::npos);
  EXPECT_NE(message([&] { mesh.slice({1, 0}, 0); }).find("mesh's order"), std::string::npos);
  EXPECT_NE(message([&] { mesh.size(2); }).find("not in [0, 2)"), std::string::npos);
}

}  // namespace
}  // namespace tdist::mesh
