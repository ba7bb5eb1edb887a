// The redistribution planner (include/tdist/placement.h): the cheapest
// sequence of allowed steps from one layout to another, found by a
// shortest-path search over layouts, with costs every rank computes alike.

#include <queue>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "mesh/text.h"
#include "tdist/errors.h"
#include "tdist/placement.h"

namespace tdist::mesh {

namespace {

using Layout = std::vector<Placement>;
using Kind = RedistributeStep::Kind;

// The last mesh dimension that shards tensor dimension `d`, or -1.
int innermost_sharder(const Layout& layout, int d) {
  for (int m = static_cast<int>(layout.size()) - 1; m >= 0; --m) {
    if (layout[static_cast<size_t>(m)].is_shard(d)) return m;
  }
  return -1;
}

// Whether mesh dimension `m` may start sharding tensor dimension `d`: no
// later mesh dimension shards it (chunks nest in mesh-dimension order).
bool may_add_shard(const Layout& layout, int m, int d) {
  return innermost_sharder(layout, d) < m;
}

// The step that changes mesh dimension m from `from` to `to` directly, or
// false when there is none or the nesting of chunks forbids it now.
bool direct_step(const Layout& layout, int m, const Placement& to, Kind* kind) {
  const Placement& from = layout[static_cast<size_t>(m)];
  if (from == to) return false;
  const bool may_remove = !from.is_shard() || innermost_sharder(layout, from.dim) == m;
  switch (from.kind) {
    case Placement::kShard:
      if (!may_remove) return false;
      if (to.is_replicate()) return *kind = Kind::kAllGather, true;
      if (to.is_shard() && may_add_shard(layout, m, to.dim)) return *kind = Kind::kAllToAll, true;
      return false;  // Shard -> Partial goes through Replicate
    case Placement::kReplicate:
      if (to.is_partial()) {
        // Never two different partial ops at once (validate_placements).
        for (const Placement& other : layout) {
          if (other.is_partial() && !(other.op == to.op)) return false;
        }
        return *kind = Kind::kLocalPartial, true;
      }
      if (to.is_shard() && may_add_shard(layout, m, to.dim)) return *kind = Kind::kLocalSlice, true;
      return false;
    case Placement::kPartial:
      if (to.is_replicate()) return *kind = Kind::kAllReduce, true;
      if (to.is_shard() && may_add_shard(layout, m, to.dim)) return *kind = Kind::kReduceScatter, true;
      return false;  // Partial(a) -> Partial(b) goes through Replicate
  }
  return false;
}

// Nominal bytes of a rank's block under `layout` (even chunks): the same
// number on every rank, so every rank picks the same plan.
double nominal_block_bytes(const DeviceMesh& mesh, const Layout& layout, double total_bytes) {
  double bytes = total_bytes;
  for (size_t m = 0; m < layout.size(); ++m) {
    if (layout[m].is_shard()) bytes /= static_cast<double>(mesh.shape()[m]);
  }
  return bytes;
}

// What a step costs in the search: the bytes a rank moves plus a fixed
// charge per collective (its latency, as bytes at a few GB/s) so that fewer
// steps win among equal volumes; local steps cost almost nothing.
double step_cost(Kind kind, double block_bytes, double k) {
  constexpr double kCollectiveCharge = 64.0 * 1024;
  if (k == 1) return 1;  // a relabel
  switch (kind) {
    case Kind::kAllGather:
      return block_bytes * (k - 1) + kCollectiveCharge;
    case Kind::kAllReduce:
      return 2 * block_bytes * (k - 1) / k + kCollectiveCharge;
    case Kind::kReduceScatter:
    case Kind::kAllToAll:
      return block_bytes * (k - 1) / k + kCollectiveCharge;
    case Kind::kLocalSlice:
    case Kind::kLocalPartial:
    case Kind::kRelabel:
      return 1;
  }
  return kCollectiveCharge;
}

// The placements a search may pass through: Replicate, and every Shard and
// Partial that the two layouts name.
std::vector<Placement> alphabet_of(const Layout& from, const Layout& to) {
  std::vector<Placement> alphabet{Placement::replicate()};
  for (const Layout* layout : {&from, &to}) {
    for (const Placement& p : *layout) {
      bool known = false;
      for (const Placement& q : alphabet) known = known || q == p;
      if (!known) alphabet.push_back(p);
    }
  }
  return alphabet;
}

struct Edge {
  int64_t previous = -1;
  int mesh_dim = -1;
  Kind kind = Kind::kAllGather;
};

// The path through Replicate: every shard gathered and every Partial that
// changes reduced, innermost first (so each shard removed is the innermost
// of its tensor dim), then the target's placements added outermost first
// (so no inner shard is in the way). Always allowed, rarely the cheapest.
std::vector<std::pair<int, Kind>> path_through_replicate(Layout layout, const Layout& to,
                                                         std::vector<Layout>* layouts) {
  std::vector<std::pair<int, Kind>> path;
  const int n = static_cast<int>(layout.size());
  for (int m = n - 1; m >= 0; --m) {
    Placement& p = layout[static_cast<size_t>(m)];
    if (p.is_replicate() || (p.is_partial() && p == to[static_cast<size_t>(m)])) continue;
    path.emplace_back(m, p.is_shard() ? Kind::kAllGather : Kind::kAllReduce);
    p = Placement::replicate();
    layouts->push_back(layout);
  }
  for (int m = 0; m < n; ++m) {
    Kind kind{};
    if (!direct_step(layout, m, to[static_cast<size_t>(m)], &kind)) continue;  // already there
    path.emplace_back(m, kind);
    layout[static_cast<size_t>(m)] = to[static_cast<size_t>(m)];
    layouts->push_back(layout);
  }
  return path;
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::vector<int64_t> lengths(const std::vector<Extent>& block) {
  std::vector<int64_t> shape;
  shape.reserve(block.size());
  for (const Extent& e : block) shape.push_back(e.length);
  return shape;
}

// Fills in a step's shapes, member lengths and bytes for the rank at `coordinate`.
RedistributeStep describe(const DeviceMesh& mesh, const std::vector<int64_t>& coordinate,
                          const std::vector<int64_t>& global_shape, int64_t element_size,
                          const Layout& before, const Layout& after, int m, Kind kind) {
  RedistributeStep step;
  // Over one rank every placement is the same block: nothing to do.
  if (mesh.size(m) == 1) kind = Kind::kRelabel;
  step.kind = kind;
  step.mesh_dim = m;
  step.from = before[static_cast<size_t>(m)];
  step.to = after[static_cast<size_t>(m)];
  step.shape_before = lengths(local_block(global_shape, mesh.shape(), coordinate, before));
  step.shape_after = lengths(local_block(global_shape, mesh.shape(), coordinate, after));
  std::vector<int64_t> member = coordinate;
  for (int64_t i = 0; i < mesh.size(m); ++i) {
    member[static_cast<size_t>(m)] = i;
    if (step.from.is_shard()) {
      step.from_lengths.push_back(
          local_block(global_shape, mesh.shape(), member, before)[static_cast<size_t>(step.from.dim)].length);
    }
    if (step.to.is_shard()) {
      step.to_lengths.push_back(
          local_block(global_shape, mesh.shape(), member, after)[static_cast<size_t>(step.to.dim)].length);
    }
  }
  const int64_t k = mesh.size(m);
  const int64_t in = product(step.shape_before) * element_size;
  const int64_t out = product(step.shape_after) * element_size;
  switch (kind) {
    case Kind::kAllGather:
      step.bytes = out - in;
      break;
    case Kind::kAllReduce:
      step.bytes = 2 * (k - 1) * in / k;
      break;
    case Kind::kReduceScatter:
      step.bytes = in - out;
      break;
    case Kind::kAllToAll: {
      // This rank keeps its own piece of the new dimension.
      std::vector<int64_t> kept = step.shape_before;
      kept[static_cast<size_t>(step.to.dim)] =
          step.to_lengths[static_cast<size_t>(coordinate[static_cast<size_t>(m)])];
      step.bytes = in - product(kept) * element_size;
      break;
    }
    case Kind::kLocalSlice:
    case Kind::kLocalPartial:
    case Kind::kRelabel:
      step.bytes = 0;
      break;
  }
  if (kind == Kind::kLocalPartial) {
    switch (step.to.op.kind) {
      case ReduceOp::SUM:
      case ReduceOp::BXOR:
        step.fill = RedistributeStep::kZeros;
        break;
      case ReduceOp::PRODUCT:
        step.fill = RedistributeStep::kOnes;
        break;
      default:
        step.fill = RedistributeStep::kKeep;
    }
  }
  return step;
}

using text::join;

}  // namespace

const char* step_kind_name(RedistributeStep::Kind kind) {
  switch (kind) {
    case Kind::kAllGather:
      return "all_gather";
    case Kind::kAllReduce:
      return "all_reduce";
    case Kind::kReduceScatter:
      return "reduce_scatter";
    case Kind::kAllToAll:
      return "all_to_all";
    case Kind::kLocalSlice:
      return "local_slice";
    case Kind::kLocalPartial:
      return "local_partial";
    case Kind::kRelabel:
      return "relabel";
  }
  return "?";
}

std::string RedistributeStep::to_string(const DeviceMesh& mesh) const {
  std::ostringstream out;
  out << step_kind_name(kind) << " over mesh dim " << mesh_dim;
  if (!mesh.dim_names().empty()) out << " (" << mesh.dim_names()[static_cast<size_t>(mesh_dim)] << ")";
  out << ": " << from.to_string() << " -> " << to.to_string() << ", " << join(shape_before) << " -> "
      << join(shape_after) << ", " << bytes << " B";
  return out.str();
}

int64_t RedistributePlan::total_bytes() const {
  int64_t total = 0;
  for (const auto& step : steps) total += step.bytes;
  return total;
}

std::string RedistributePlan::explain(const DeviceMesh& mesh) const {
  std::ostringstream out;
  if (steps.empty()) out << "nothing to do: the layouts are the same\n";
  for (size_t i = 0; i < steps.size(); ++i) out << (i + 1) << ". " << steps[i].to_string(mesh) << "\n";
  out << "total: " << total_bytes() << " B moved by this rank in " << steps.size() << " step"
      << (steps.size() == 1 ? "" : "s") << "\n";
  return out.str();
}

RedistributePlan plan_redistribute(const DeviceMesh& mesh, const std::vector<int64_t>& coordinate,
                                   const std::vector<int64_t>& global_shape, int64_t element_size,
                                   const Layout& from, const Layout& to, int64_t search_budget) {
  const int tensor_ndim = static_cast<int>(global_shape.size());
  validate_placements("redistribute", from, mesh.ndim(), tensor_ndim);
  validate_placements("redistribute", to, mesh.ndim(), tensor_ndim);
  for (int64_t n : global_shape) {
    if (n < 0) throw DistInvalidArgument("redistribute: negative size in shape " + join(global_shape));
  }
  if (element_size < 1) throw DistInvalidArgument("redistribute: element size must be >= 1");
  mesh.rank_at(coordinate);  // range check

  const std::vector<Placement> alphabet = alphabet_of(from, to);
  const auto base = static_cast<int64_t>(alphabet.size());
  auto encode = [&](const Layout& layout) {
    int64_t id = 0;
    for (const Placement& p : layout) {
      int64_t index = 0;
      while (!(alphabet[static_cast<size_t>(index)] == p)) ++index;
      id = id * base + index;
    }
    return id;
  };
  auto decode = [&](int64_t id) {
    Layout layout(static_cast<size_t>(mesh.ndim()));
    for (int m = mesh.ndim() - 1; m >= 0; --m) {
      layout[static_cast<size_t>(m)] = alphabet[static_cast<size_t>(id % base)];
      id /= base;
    }
    return layout;
  };
  const double total_bytes = static_cast<double>(product(global_shape)) * static_cast<double>(element_size);

  // Dijkstra over layouts; ties broken by layout id, so every rank agrees.
  const int64_t start = encode(from);
  const int64_t goal = encode(to);
  std::unordered_map<int64_t, double> best{{start, 0.0}};
  std::unordered_map<int64_t, Edge> came_from;
  using Entry = std::tuple<double, int64_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  queue.emplace(0.0, start);
  bool found = start == goal;
  while (!queue.empty() && !found && static_cast<int64_t>(best.size()) < search_budget) {
    auto [cost, id] = queue.top();
    queue.pop();
    if (cost > best[id]) continue;
    if (id == goal) {
      found = true;
      break;
    }
    const Layout layout = decode(id);
    const double block = nominal_block_bytes(mesh, layout, total_bytes);
    for (int m = 0; m < mesh.ndim(); ++m) {
      for (const Placement& p : alphabet) {
        Kind kind{};
        if (!direct_step(layout, m, p, &kind)) continue;
        Layout next = layout;
        next[static_cast<size_t>(m)] = p;
        const int64_t next_id = encode(next);
        const double next_cost = cost + step_cost(kind, block, static_cast<double>(mesh.size(m)));
        auto known = best.find(next_id);
        if (known != best.end() && known->second <= next_cost) continue;
        best[next_id] = next_cost;
        came_from[next_id] = {id, m, kind};
        queue.emplace(next_cost, next_id);
      }
    }
  }
  found = found || best.count(goal) > 0;

  std::vector<std::pair<int, Kind>> path;
  std::vector<Layout> layouts{from};
  if (found) {
    std::vector<int64_t> ids;
    for (int64_t id = goal; id != start; id = came_from.at(id).previous) ids.push_back(id);
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
      path.emplace_back(came_from.at(*it).mesh_dim, came_from.at(*it).kind);
      layouts.push_back(decode(*it));
    }
  } else {
    path = path_through_replicate(from, to, &layouts);
  }

  RedistributePlan plan;
  for (size_t i = 0; i < path.size(); ++i) {
    plan.steps.push_back(describe(mesh, coordinate, global_shape, element_size, layouts[i], layouts[i + 1],
                                  path[i].first, path[i].second));
  }
  return plan;
}

}  // namespace tdist::mesh
