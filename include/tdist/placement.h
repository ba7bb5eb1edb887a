#pragma once

/// @file placement.h
/// How a sharded tensor lies on a device mesh, and the plan that moves it
/// from one layout to another (the arithmetic behind tdist.tensor.DTensor).
///
/// A layout is one Placement per mesh dimension:
/// - Shard(d): the tensor is split along its dimension d over that mesh
///   dimension, in torch.chunk's way: chunks of ceil(n / k) elements, so the
///   last chunks may be shorter or empty. Several mesh dimensions may shard
///   the same tensor dimension; they split it in mesh-dimension order (the
///   first splits the whole, the next splits each chunk again).
/// - Replicate(): every rank along that mesh dimension holds the same data.
/// - Partial(op): every rank holds a partial value; the tensor is the
///   reduction with `op` over that mesh dimension.
///
/// plan_redistribute() turns (global shape, mesh, from, to) into a list of
/// steps, each one collective over one mesh dimension or one local
/// operation. It is pure arithmetic: the Python layer runs the steps.

#include <cstdint>
#include <string>
#include <vector>

#include "tdist/mesh.h"
#include "tdist/reduce_op.h"

namespace tdist::mesh {

struct Placement {
  enum Kind { kShard, kReplicate, kPartial };
  Kind kind = kReplicate;
  int dim = 0;                  ///< the tensor dimension of a Shard
  ReduceOp op = ReduceOp::SUM;  ///< the reduction of a Partial

  static Placement shard(int dim) { return {kShard, dim, ReduceOp::SUM}; }
  static Placement replicate() { return {kReplicate, 0, ReduceOp::SUM}; }
  static Placement partial(ReduceOp op = ReduceOp::SUM) { return {kPartial, 0, op}; }

  bool is_shard() const { return kind == kShard; }
  bool is_shard(int d) const { return kind == kShard && dim == d; }
  bool is_partial() const { return kind == kPartial; }
  bool is_replicate() const { return kind == kReplicate; }
  /// "Shard(0)", "Replicate()", "Partial(SUM)".
  std::string to_string() const;
  friend bool operator==(const Placement& a, const Placement& b) {
    return a.kind == b.kind && (a.kind != kShard || a.dim == b.dim) && (a.kind != kPartial || a.op == b.op);
  }
};

/// "[Shard(0), Replicate()]".
std::string layout_to_string(const std::vector<Placement>& layout);

/// The part of a dimension of `size` elements that chunk `index` of `chunks`
/// holds, as torch.chunk splits it: offset and length (possibly 0).
struct Extent {
  int64_t offset = 0;
  int64_t length = 0;
};
Extent chunk_extent(int64_t size, int64_t chunks, int64_t index);

/// Checks a layout: one placement per mesh dimension, shard dimensions in
/// [0, ndim of the tensor), Partial ops that can be reduced, and one op for
/// all the Partials (different ops over different mesh dimensions would
/// make the value depend on the order of reduction). Throws
/// DistInvalidArgument naming `op` and the offending placement.
void validate_placements(const char* op, const std::vector<Placement>& placements, int mesh_ndim,
                         int tensor_ndim);

/// The block of the global tensor that the rank at mesh `coordinate` holds:
/// per tensor dimension, its offset and length.
std::vector<Extent> local_block(const std::vector<int64_t>& global_shape,
                                const std::vector<int64_t>& mesh_shape,
                                const std::vector<int64_t>& coordinate,
                                const std::vector<Placement>& placements);

/// One step of a redistribution, over mesh dimension `mesh_dim`.
struct RedistributeStep {
  enum Kind {
    kAllGather,      ///< Shard(d) -> Replicate: uneven all_gather along d
    kAllReduce,      ///< Partial -> Replicate
    kReduceScatter,  ///< Partial -> Shard(d): uneven reduce_scatter along d
    kAllToAll,       ///< Shard(d) -> Shard(e): one uneven all_to_all
    kLocalSlice,     ///< Replicate -> Shard(d): keep this rank's chunk
    kLocalPartial,   ///< Replicate -> Partial: keep the value on the first rank
                     ///< of the dimension, the op's identity elsewhere (SUM:
                     ///< zero), so the reduction gives back the value exactly
    kRelabel,        ///< any change on a mesh dimension of size 1: the block
                     ///< stays as it is, only its placement changes
  };
  /// What kLocalPartial leaves on the ranks other than the first of the
  /// dimension: the value (MIN, MAX, AVG, BAND, BOR: reducing copies gives
  /// it back), zeros (SUM, BXOR) or ones (PRODUCT).
  enum Fill { kKeep, kZeros, kOnes };
  Kind kind = kAllGather;
  Fill fill = kKeep;
  int mesh_dim = 0;
  Placement from;
  Placement to;
  /// Along the group of `mesh_dim` (mesh order): each member's length of
  /// tensor dimension from.dim before the step (gather, all_to_all), and of
  /// to.dim after it (reduce_scatter, all_to_all, slice). Empty otherwise.
  std::vector<int64_t> from_lengths;
  std::vector<int64_t> to_lengths;
  /// This rank's block before and after the step (shape per tensor dim).
  std::vector<int64_t> shape_before;
  std::vector<int64_t> shape_after;
  /// Bytes this rank moves in the step, by nccl-tests' bus convention:
  /// all_gather receives what it lacks, reduce_scatter and all_to_all send
  /// what they do not keep, all_reduce 2 (k-1)/k of its block; local steps 0.
  int64_t bytes = 0;

  /// "all_gather over mesh dim 1 (tp): Shard(0) -> Replicate(), [2, 8] -> [4, 8], 96 B".
  std::string to_string(const DeviceMesh& mesh) const;
};

/// "all_gather", "all_reduce", "reduce_scatter", "all_to_all",
/// "local_slice", "local_partial" or "relabel".
const char* step_kind_name(RedistributeStep::Kind kind);

/// The steps that take a tensor of `global_shape` (elements of
/// `element_size` bytes) on `mesh` from layout `from` to layout `to`, seen
/// from the rank at `coordinate` (steps are the same on every rank; the
/// shapes and byte counts are this rank's).
///
/// Which steps are allowed: one that removes Shard(d) from a mesh dimension
/// needs it to be the last mesh dimension sharding d, and one that adds
/// Shard(d) needs no later mesh dimension sharding d (so nested chunks stay
/// nested); Shard -> Partial and Partial(a) -> Partial(b) go through
/// Replicate. The planner searches the layouts reachable by allowed steps
/// for the cheapest path (bytes a rank moves, from even chunks so that every
/// rank computes the same costs, plus a fixed charge per collective). After
/// `search_budget` layouts it stops and, unless it has already reached the
/// target, takes the plan through Replicate: gather and all_reduce innermost
/// first, then shard outermost first. Only meshes of five or more
/// dimensions come near the default budget.
struct RedistributePlan {
  std::vector<RedistributeStep> steps;
  int64_t total_bytes() const;
  /// A readable plan: one line per step, then the total.
  std::string explain(const DeviceMesh& mesh) const;
};
RedistributePlan plan_redistribute(const DeviceMesh& mesh, const std::vector<int64_t>& coordinate,
                                   const std::vector<int64_t>& global_shape, int64_t element_size,
                                   const std::vector<Placement>& from, const std::vector<Placement>& to,
                                   int64_t search_budget = 20000);

}  // namespace tdist::mesh
