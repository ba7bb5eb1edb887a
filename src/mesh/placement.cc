// Placements and the chunk arithmetic of sharded tensors (include/tdist/placement.h).

#include <algorithm>

#include "tdist/errors.h"
#include "tdist/placement.h"

namespace tdist::mesh {

std::string Placement::to_string() const {
  switch (kind) {
    case kShard:
      return "Shard(" + std::to_string(dim) + ")";
    case kReplicate:
      return "Replicate()";
    case kPartial:
      return std::string("Partial(") + reduce_op_name(op) + ")";
  }
  return "Placement(?)";
}

std::string layout_to_string(const std::vector<Placement>& layout) {
  std::string s = "[";
  for (size_t i = 0; i < layout.size(); ++i) s += (i ? ", " : "") + layout[i].to_string();
  return s + "]";
}

Extent chunk_extent(int64_t size, int64_t chunks, int64_t index) {
  if (size < 0 || chunks < 1 || index < 0 || index >= chunks) {
    throw DistInvalidArgument("chunk_extent: chunk " + std::to_string(index) + " of " +
                              std::to_string(chunks) + " of a dimension of " + std::to_string(size) +
                              " elements does not exist");
  }
  // torch.chunk: chunks of ceil(size / chunks); the last ones short or empty.
  const int64_t chunk = (size + chunks - 1) / chunks;
  const int64_t offset = std::min(index * chunk, size);
  return {offset, std::min(chunk, size - offset)};
}

void validate_placements(const char* op, const std::vector<Placement>& placements, int mesh_ndim,
                         int tensor_ndim) {
  if (static_cast<int>(placements.size()) != mesh_ndim) {
    throw DistInvalidArgument(std::string(op) + ": " + std::to_string(placements.size()) +
                              " placements for a mesh of " + std::to_string(mesh_ndim) +
                              " dimensions (one placement per mesh dimension)");
  }
  for (size_t m = 0; m < placements.size(); ++m) {
    const Placement& p = placements[m];
    if (p.is_shard() && (p.dim < 0 || p.dim >= tensor_ndim)) {
      throw DistInvalidArgument(std::string(op) + ": placement " + p.to_string() + " of mesh dimension " +
                                std::to_string(m) + " names a tensor dimension outside [0, " +
                                std::to_string(tensor_ndim) + ")");
    }
    if (p.is_partial() &&
        (p.op.kind == ReduceOp::PREMUL_SUM || p.op.kind < ReduceOp::SUM || p.op.kind > ReduceOp::AVG)) {
      throw DistInvalidArgument(
          std::string(op) + ": placement " + p.to_string() + " of mesh dimension " + std::to_string(m) +
          " cannot be used: Partial takes SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR or BXOR");
    }
    // Partials of different ops over different mesh dims have no single
    // value: max over one dim of sums over another is not the sum of maxes.
    for (size_t o = 0; o < m; ++o) {
      if (p.is_partial() && placements[o].is_partial() && !(placements[o].op == p.op)) {
        throw DistInvalidArgument(std::string(op) + ": mesh dimensions " + std::to_string(o) + " and " +
                                  std::to_string(m) + " are " + placements[o].to_string() + " and " +
                                  p.to_string() +
                                  "; partial values over several mesh dimensions must share one reduce op");
      }
    }
    if (p.kind != Placement::kShard && p.kind != Placement::kReplicate && p.kind != Placement::kPartial) {
      throw DistInvalidArgument(std::string(op) + ": mesh dimension " + std::to_string(m) +
                                " has an unknown placement kind " + std::to_string(static_cast<int>(p.kind)));
    }
  }
}

std::vector<Extent> local_block(const std::vector<int64_t>& global_shape,
                                const std::vector<int64_t>& mesh_shape,
                                const std::vector<int64_t>& coordinate,
                                const std::vector<Placement>& placements) {
  if (coordinate.size() != mesh_shape.size() || placements.size() != mesh_shape.size()) {
    throw DistInvalidArgument(
        "local_block: the coordinate, the placements and the mesh shape differ in length");
  }
  std::vector<Extent> block;
  block.reserve(global_shape.size());
  for (int64_t n : global_shape) block.push_back({0, n});
  // Mesh dimensions split in order: each Shard(d) splits the chunk the
  // earlier ones left.
  for (size_t m = 0; m < placements.size(); ++m) {
    if (!placements[m].is_shard()) continue;
    auto& extent = block.at(static_cast<size_t>(placements[m].dim));
    const Extent part = chunk_extent(extent.length, mesh_shape[m], coordinate[m]);
    extent = {extent.offset + part.offset, part.length};
  }
  return block;
}

}  // namespace tdist::mesh
