// The redistribution planner, checked by simulating every plan on every
// rank: each rank's block is tracked as a region of the global tensor (an
// extent per dimension, plus the mesh dimensions over which it is partial),
// each step is applied the way the collective would apply it -- from the
// members' regions, not from local_block -- and the end state must be the
// target layout's. The chunk arithmetic itself is checked against torch.chunk's
// rule written out independently.

#include <gtest/gtest.h>

#include <numeric>
#include <optional>
#include <random>
#include <set>

#include "tdist/errors.h"
#include "tdist/placement.h"

namespace tdist::mesh {
namespace {

using Layout = std::vector<Placement>;
using Kind = RedistributeStep::Kind;
Placement S(int d) {
  return Placement::shard(d);
}
Placement R() {
  return Placement::replicate();
}
Placement P(ReduceOp op = ReduceOp::SUM) {
  return Placement::partial(op);
}

// torch.chunk by enumeration: hand out ceil(n/k) elements per chunk in order.
std::vector<int64_t> chunk_lengths_by_enumeration(int64_t n, int64_t k) {
  const int64_t size = n == 0 ? 0 : (n + k - 1) / k;
  std::vector<int64_t> lengths;
  int64_t left = n;
  for (int64_t i = 0; i < k; ++i) {
    lengths.push_back(std::min(size, left));
    left -= lengths.back();
  }
  return lengths;
}

TEST(ChunkExtent, MatchesTorchChunk) {
  for (int64_t n = 0; n <= 17; ++n) {
    for (int64_t k = 1; k <= 9; ++k) {
      auto expected = chunk_lengths_by_enumeration(n, k);
      int64_t offset = 0;
      for (int64_t i = 0; i < k; ++i) {
        Extent e = chunk_extent(n, k, i);
        EXPECT_EQ(e.offset, offset) << n << "/" << k << " #" << i;
        EXPECT_EQ(e.length, expected[static_cast<size_t>(i)]) << n << "/" << k << " #" << i;
        offset += e.length;
      }
    }
  }
  // 5 over 4: 2, 2, 1, 0 (torch.chunk returns 3 chunks; the 4th is empty).
  EXPECT_EQ(chunk_extent(5, 4, 3).length, 0);
  EXPECT_EQ(chunk_extent(5, 4, 2).length, 1);
  EXPECT_THROW(chunk_extent(5, 4, 4), DistInvalidArgument);
}

TEST(LocalBlock, NestedShardsSplitInMeshOrder) {
  // 10 rows over [Shard(0), Shard(0)] on a 2x3 mesh: 5 rows per outer chunk,
  // then 2, 2, 1 inside it.
  auto block = local_block({10, 4}, {2, 3}, {1, 2}, {S(0), S(0)});
  EXPECT_EQ(block[0].offset, 9);
  EXPECT_EQ(block[0].length, 1);
  EXPECT_EQ(block[1].length, 4);
}

// A rank's view of its block during a simulated plan.
struct Region {
  std::vector<Extent> block;
  std::set<int> partial_over;  // mesh dims over which the values are partial
};

bool same(const std::vector<Extent>& a, const std::vector<Extent>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].length != b[i].length || (a[i].length > 0 && a[i].offset != b[i].offset)) return false;
  }
  return true;
}

std::vector<int64_t> coordinate_at(const std::vector<int64_t>& shape, int64_t flat) {
  std::vector<int64_t> c(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    c[d] = flat % shape[d];
    flat /= shape[d];
  }
  return c;
}

int64_t flat_of(const std::vector<int64_t>& shape, const std::vector<int64_t>& c) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + c[d];
  return flat;
}

// A problem found while simulating a plan.
struct Broken {
  std::string what;
};

void check(bool ok, const std::string& what) {
  if (!ok) throw Broken{what};
}

std::string text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::vector<int64_t> lengths_of(const std::vector<Extent>& block) {
  std::vector<int64_t> v;
  v.reserve(block.size());
  for (const Extent& e : block) v.push_back(e.length);
  return v;
}

// Concatenates the members' extents of one dimension in mesh order; they
// must follow each other without gaps (empty ones may sit anywhere).
Extent concatenate(const std::vector<Extent>& parts, const std::string& where) {
  Extent whole{-1, 0};
  for (const Extent& e : parts) {
    if (e.length == 0) continue;
    if (whole.offset < 0) {
      whole.offset = e.offset;
    } else {
      check(e.offset == whole.offset + whole.length, where + ": members' chunks are not contiguous");
    }
    whole.length += e.length;
  }
  return {std::max<int64_t>(whole.offset, 0), whole.length};
}

// Applies step s of every rank's plan to the regions, the way the
// collective would: from the members' regions.
std::vector<Region> apply(const DeviceMesh& mesh, const std::vector<RedistributePlan>& plans, size_t s,
                          const std::vector<Region>& regions, const std::string& what) {
  std::vector<Region> next = regions;
  for (size_t r = 0; r < regions.size(); ++r) {
    const RedistributeStep& step = plans[r].steps.at(s);
    const std::string where = what + ", step " + std::to_string(s + 1) + ", rank " + std::to_string(r);
    check(step.kind == plans[0].steps[s].kind && step.mesh_dim == plans[0].steps[s].mesh_dim,
          where + ": ranks disagree on the plan");
    const auto m = static_cast<size_t>(step.mesh_dim);
    const auto me = coordinate_at(mesh.shape(), static_cast<int64_t>(r));
    const auto k = mesh.shape()[m];
    std::vector<const Region*> members;
    for (int64_t i = 0; i < k; ++i) {
      auto c = me;
      c[m] = i;
      members.push_back(&regions[static_cast<size_t>(flat_of(mesh.shape(), c))]);
    }
    Region& out = next[r];
    check(step.shape_before == lengths_of(regions[r].block), where + ": shape_before is wrong");
    check(step.kind == Kind::kRelabel || k > 1, where + ": a collective over one rank");
    auto split_mine = [&](int d) {
      const int64_t whole = out.block[static_cast<size_t>(d)].length;
      std::vector<int64_t> lengths;
      for (int64_t i = 0; i < k; ++i) lengths.push_back(chunk_extent(whole, k, i).length);
      check(step.to_lengths == lengths,
            where + ": to_lengths " + text(step.to_lengths) + ", expected " + text(lengths));
      Extent& e = out.block[static_cast<size_t>(d)];
      const Extent part = chunk_extent(e.length, k, me[m]);
      e = {e.offset + part.offset, part.length};
    };
    auto gather = [&](int d) {
      std::vector<Extent> parts;
      std::vector<int64_t> lengths;
      for (const Region* g : members) {
        parts.push_back(g->block[static_cast<size_t>(d)]);
        lengths.push_back(g->block[static_cast<size_t>(d)].length);
        for (size_t o = 0; o < g->block.size(); ++o) {
          check(static_cast<int>(o) == d || same({g->block[o]}, {regions[r].block[o]}),
                where + ": members' blocks differ in dim " + std::to_string(o));
        }
      }
      check(step.from_lengths == lengths,
            where + ": from_lengths " + text(step.from_lengths) + ", expected " + text(lengths));
      out.block[static_cast<size_t>(d)] = concatenate(parts, where);
    };
    const int mi = step.mesh_dim;
    switch (step.kind) {
      case Kind::kAllGather:
        check(out.partial_over.count(mi) == 0, where + ": all_gather of partial data");
        gather(step.from.dim);
        break;
      case Kind::kAllToAll:
        gather(step.from.dim);
        split_mine(step.to.dim);
        break;
      case Kind::kLocalSlice:
        split_mine(step.to.dim);
        break;
      case Kind::kReduceScatter:
        check(out.partial_over.erase(mi) == 1, where + ": reduce_scatter of data that is not partial");
        split_mine(step.to.dim);
        break;
      case Kind::kAllReduce:
        check(out.partial_over.erase(mi) == 1, where + ": all_reduce of data that is not partial");
        break;
      case Kind::kLocalPartial:
        check(out.partial_over.insert(mi).second, where + ": already partial");
        break;
      case Kind::kRelabel:
        check(k == 1, where + ": a relabel over more than one rank");
        if (step.from.is_partial()) out.partial_over.erase(mi);
        if (step.to.is_partial()) out.partial_over.insert(mi);
        break;
    }
    check(step.shape_after == lengths_of(out.block), where + ": shape_after is wrong");
  }
  return next;
}

// Runs `plans` (one per rank, row-major) on regions: "" if every rank ends
// with the target layout's block, else the first problem.
std::string simulate(const DeviceMesh& mesh, const std::vector<int64_t>& shape, const Layout& from,
                     const Layout& to, const std::vector<RedistributePlan>& plans, const std::string& what) {
  try {
    const auto n = static_cast<size_t>(mesh.size());
    std::vector<Region> regions(n);
    for (size_t r = 0; r < n; ++r) {
      regions[r].block =
          local_block(shape, mesh.shape(), coordinate_at(mesh.shape(), static_cast<int64_t>(r)), from);
      for (size_t m = 0; m < from.size(); ++m) {
        if (from[m].is_partial()) regions[r].partial_over.insert(static_cast<int>(m));
      }
      check(plans[r].steps.size() == plans[0].steps.size(), what + ": ranks plan different numbers of steps");
    }
    for (size_t s = 0; s < plans[0].steps.size(); ++s) regions = apply(mesh, plans, s, regions, what);
    for (size_t r = 0; r < n; ++r) {
      auto expected =
          local_block(shape, mesh.shape(), coordinate_at(mesh.shape(), static_cast<int64_t>(r)), to);
      check(same(regions[r].block, expected),
            what + ": rank " + std::to_string(r) + " ends with the wrong block");
      std::set<int> partial;
      for (size_t m = 0; m < to.size(); ++m) {
        if (to[m].is_partial()) partial.insert(static_cast<int>(m));
      }
      check(regions[r].partial_over == partial,
            what + ": rank " + std::to_string(r) + " ends partial over other dims");
    }
  } catch (const Broken& broken) {
    return broken.what;
  }
  return "";
}

std::vector<RedistributePlan> plan_everywhere(const DeviceMesh& mesh, const std::vector<int64_t>& shape,
                                              const Layout& from, const Layout& to, int64_t budget = 20000) {
  std::vector<RedistributePlan> plans;
  for (int64_t r = 0; r < mesh.size(); ++r) {
    plans.push_back(plan_redistribute(mesh, coordinate_at(mesh.shape(), r), shape, 4, from, to, budget));
  }
  return plans;
}

std::vector<int> iota_ranks(int64_t n) {
  std::vector<int> ranks(static_cast<size_t>(n));
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

std::vector<Kind> kinds(const RedistributePlan& plan) {
  std::vector<Kind> k;
  for (const auto& s : plan.steps) k.push_back(s.kind);
  return k;
}

TEST(RedistributePlan, OneDimensionalTransitionsUseOneCollective) {
  DeviceMesh mesh({4}, iota_ranks(4));
  auto plan = [&](const Layout& from, const Layout& to) {
    return kinds(plan_everywhere(mesh, {7, 5}, from, to)[1]);
  };
  EXPECT_EQ(plan({S(0)}, {R()}), (std::vector<Kind>{Kind::kAllGather}));
  EXPECT_EQ(plan({P()}, {R()}), (std::vector<Kind>{Kind::kAllReduce}));
  EXPECT_EQ(plan({P()}, {S(1)}), (std::vector<Kind>{Kind::kReduceScatter}));
  EXPECT_EQ(plan({S(0)}, {S(1)}), (std::vector<Kind>{Kind::kAllToAll}));
  EXPECT_EQ(plan({R()}, {S(1)}), (std::vector<Kind>{Kind::kLocalSlice}));
  EXPECT_EQ(plan({R()}, {P()}), (std::vector<Kind>{Kind::kLocalPartial}));
  EXPECT_EQ(plan({S(0)}, {S(0)}), (std::vector<Kind>{}));
  EXPECT_EQ(plan({S(0)}, {P()}), (std::vector<Kind>{Kind::kAllGather, Kind::kLocalPartial}));
  EXPECT_EQ(plan({P(ReduceOp::MAX)}, {P()}), (std::vector<Kind>{Kind::kAllReduce, Kind::kLocalPartial}));
}

TEST(RedistributePlan, NestedShardsAreUndoneInnermostFirst) {
  DeviceMesh mesh({2, 3}, iota_ranks(6), {"dp", "tp"});
  // [Shard(0), Shard(0)] -> [Replicate, Shard(0)]: the outer chunk cannot be
  // gathered while the inner mesh dim still splits it.
  auto plans = plan_everywhere(mesh, {10, 3}, {S(0), S(0)}, {R(), S(0)});
  EXPECT_EQ("", simulate(mesh, {10, 3}, {S(0), S(0)}, {R(), S(0)}, plans, "nested"));
  ASSERT_FALSE(plans[0].steps.empty());
  EXPECT_EQ(plans[0].steps[0].mesh_dim, 1);
  EXPECT_EQ(plans[0].steps[0].kind, Kind::kAllGather);
  // Swapping shard dims: the cheapest plan found is three steps, not four.
  auto swap = plan_everywhere(mesh, {6, 6}, {S(0), S(1)}, {S(1), S(0)});
  EXPECT_EQ("", simulate(mesh, {6, 6}, {S(0), S(1)}, {S(1), S(0)}, swap, "swap"));
  EXPECT_LE(swap[0].steps.size(), 3u);
}

TEST(RedistributePlan, BytesFollowTheBusConvention) {
  DeviceMesh mesh({4}, iota_ranks(4));
  // 8x4 floats = 128 B; all_gather of Shard(0) receives the 3 blocks it lacks.
  auto gather = plan_everywhere(mesh, {8, 4}, {S(0)}, {R()})[0];
  EXPECT_EQ(gather.total_bytes(), 96);
  auto reduce = plan_everywhere(mesh, {8, 4}, {P()}, {R()})[0];
  EXPECT_EQ(reduce.total_bytes(), 2 * 3 * 128 / 4);
  auto scatter = plan_everywhere(mesh, {8, 4}, {P()}, {S(0)})[0];
  EXPECT_EQ(scatter.total_bytes(), 96);
  auto a2a = plan_everywhere(mesh, {8, 4}, {S(0)}, {S(1)})[0];
  EXPECT_EQ(a2a.total_bytes(), 24);
  std::string text = gather.explain(mesh);
  EXPECT_NE(text.find("all_gather over mesh dim 0: Shard(0) -> Replicate(), [2, 4] -> [8, 4], 96 B"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("total: 96 B"), std::string::npos) << text;
}

TEST(RedistributePlan, RandomLayoutsEndWhereTheTargetSaysOnEveryRank) {
  std::mt19937 rng(20261127);
  const std::vector<std::vector<int64_t>> meshes{
      {1}, {2}, {3}, {5}, {8}, {2, 2}, {2, 3}, {3, 2}, {1, 4}, {4, 2}, {2, 2, 2}, {3, 1, 2}, {2, 3, 1}, {6}};
  int checked = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const auto& mesh_shape = meshes[static_cast<size_t>(trial) % meshes.size()];
    int64_t n = 1;
    for (int64_t s : mesh_shape) n *= s;
    DeviceMesh mesh(mesh_shape, iota_ranks(n));
    const int tensor_ndim = 1 + static_cast<int>(rng() % 3);
    std::vector<int64_t> shape(static_cast<size_t>(tensor_ndim));
    for (auto& s : shape) s = static_cast<int64_t>(rng() % 10);
    auto random_layout = [&] {
      Layout layout;
      for (size_t m = 0; m < mesh_shape.size(); ++m) {
        switch (rng() % 4) {
          case 0:
            layout.push_back(R());
            break;
          case 1:
            layout.push_back(P(rng() % 2 ? ReduceOp::SUM : ReduceOp::MAX));
            break;
          default:
            layout.push_back(S(static_cast<int>(rng() % static_cast<unsigned>(tensor_ndim))));
        }
      }
      return layout;
    };
    Layout from = random_layout();
    Layout to = random_layout();
    // One reduce op per layout (mixing them is refused; tested below).
    for (Layout* layout : {&from, &to}) {
      std::optional<ReduceOp> first;
      for (Placement& p : *layout) {
        if (!p.is_partial()) continue;
        if (!first) first = p.op;
        p.op = *first;
      }
    }
    const std::string what = layout_to_string(from) + " -> " + layout_to_string(to);
    // The search, and (budget 1) the plan through Replicate it falls back to.
    EXPECT_EQ("", simulate(mesh, shape, from, to, plan_everywhere(mesh, shape, from, to), what));
    EXPECT_EQ("", simulate(mesh, shape, from, to, plan_everywhere(mesh, shape, from, to, 1),
                           what + " through Replicate"));
    if (::testing::Test::HasFailure()) return;
    ++checked;
  }
  EXPECT_EQ(checked, 600);
}

TEST(RedistributePlan, ManyMeshDimensionsFallBackToAPlanThroughReplicate) {
  // 6 mesh dims with 9 placements each is past the search's budget.
  DeviceMesh mesh({2, 2, 2, 2, 2, 2}, iota_ranks(64));
  Layout from{S(0), S(1), P(), S(2), S(3), P()};
  Layout to{S(3), P(ReduceOp::MAX), S(1), S(0), P(ReduceOp::MAX), S(2)};
  std::vector<int64_t> shape{9, 5, 4, 3};
  auto plans = plan_everywhere(mesh, shape, from, to);
  EXPECT_EQ("", simulate(mesh, shape, from, to, plans, "six dims"));
}

TEST(RedistributePlan, TheSimulatorCatchesAPlanThatBreaksTheNesting) {
  // Gathering the outer mesh dim while the inner one still splits the same
  // tensor dim concatenates chunks that are not neighbours.
  DeviceMesh mesh({2, 2}, iota_ranks(4));
  auto plans = plan_everywhere(mesh, {8}, {S(0), S(0)}, {R(), S(0)});
  for (auto& plan : plans) {
    for (auto& step : plan.steps) step.mesh_dim = 1 - step.mesh_dim;
  }
  EXPECT_NE(simulate(mesh, {8}, {S(0), S(0)}, {R(), S(0)}, plans, "swapped").find("not contiguous"),
            std::string::npos);
}

TEST(RedistributePlan, BadLayoutsAreRefused) {
  DeviceMesh mesh({2, 2}, iota_ranks(4));
  EXPECT_THROW(plan_redistribute(mesh, {0, 0}, {4}, 4, {S(0)}, {R(), R()}), DistInvalidArgument);
  EXPECT_THROW(plan_redistribute(mesh, {0, 0}, {4}, 4, {S(1), R()}, {R(), R()}), DistInvalidArgument);
  EXPECT_THROW(plan_redistribute(mesh, {0, 0}, {4}, 4, {P(ReduceOp::premul_sum(2.0)), R()}, {R(), R()}),
               DistInvalidArgument);
  EXPECT_THROW(plan_redistribute(mesh, {2, 0}, {4}, 4, {R(), R()}, {R(), R()}), DistInvalidArgument);
  // Partial(SUM) over one dim and Partial(PRODUCT) over another has no single value.
  EXPECT_THROW(plan_redistribute(mesh, {0, 0}, {4}, 4, {P(), R()}, {P(), P(ReduceOp::PRODUCT)}),
               DistInvalidArgument);
}

TEST(RedistributePlan, NoIntermediateLayoutMixesReduceOps) {
  DeviceMesh mesh({2, 2}, iota_ranks(4));
  for (const auto& [from, to] :
       std::vector<std::pair<Layout, Layout>>{{{P(), R()}, {R(), P(ReduceOp::PRODUCT)}},
                                              {{P(ReduceOp::MAX), P(ReduceOp::MAX)}, {P(), S(0)}},
                                              {{S(0), P(ReduceOp::MIN)}, {P(), P()}}}) {
    auto plans = plan_everywhere(mesh, {6}, from, to);
    EXPECT_EQ("", simulate(mesh, {6}, from, to, plans, layout_to_string(from)));
    Layout layout = from;
    for (const auto& step : plans[0].steps) {
      layout[static_cast<size_t>(step.mesh_dim)] = step.to;
      EXPECT_NO_THROW(validate_placements("test", layout, 2, 1)) << layout_to_string(layout);
    }
  }
}

}  // namespace
}  // namespace tdist::mesh
