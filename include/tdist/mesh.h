#pragma once

/// @file mesh.h
/// A device mesh: an n-dimensional array of global ranks with named
/// dimensions (torch's DeviceMesh, paddle's ProcessMesh). This header is the
/// rank arithmetic only -- coordinates, the ranks along a dimension, slicing
/// to a sub-mesh -- so it is testable without processes. The process groups
/// of a mesh are created by the Python layer (tdist.device_mesh), lazily and
/// only for the slices the calling rank is in.
///
/// Layout: ranks are stored row-major, as numpy.array(mesh).flatten() would
/// give them; the coordinate of the rank at flat index i is i's row-major
/// multi-index.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tdist::mesh {

class DeviceMesh {
 public:
  /// `shape` of the mesh (each size >= 1), `ranks` row-major (distinct,
  /// non-negative, as many as the shape's product), optional `dim_names`
  /// (one distinct, non-empty name per dimension). DistInvalidArgument on
  /// any violation, naming it.
  DeviceMesh(std::vector<int64_t> shape, std::vector<int> ranks, std::vector<std::string> dim_names = {});

  int ndim() const { return static_cast<int>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  /// Size of dimension `dim` (DistInvalidArgument if out of range).
  int64_t size(int dim) const;
  /// Number of ranks in the mesh.
  int64_t size() const { return static_cast<int64_t>(ranks_.size()); }
  /// The ranks, row-major.
  const std::vector<int>& ranks() const { return ranks_; }
  const std::vector<std::string>& dim_names() const { return dim_names_; }

  /// Index of the dimension called `name`; DistInvalidArgument listing the
  /// names if there is none.
  int dim_index(const std::string& name) const;

  /// The coordinate of global rank `rank`, or nullopt if it is not in the mesh.
  std::optional<std::vector<int64_t>> coordinate_of(int rank) const;
  /// The rank at `coordinate` (DistInvalidArgument if out of range).
  int rank_at(const std::vector<int64_t>& coordinate) const;

  /// The ranks along dimension `dim` through `rank`'s coordinate, in mesh
  /// order: the members of the process group of that dimension that `rank`
  /// belongs to. DistInvalidArgument if `rank` is not in the mesh.
  std::vector<int> group_ranks(int dim, int rank) const;
  /// Every slice along `dim`: size()/size(dim) lists of size(dim) ranks, in
  /// row-major order of the other coordinates.
  std::vector<std::vector<int>> all_group_ranks(int dim) const;

  /// The sub-mesh through `rank`'s coordinate that keeps dimensions `dims`
  /// (strictly increasing indices) and fixes the others at `rank`'s
  /// coordinate, as torch's mesh["dp", "tp"] does for the calling rank.
  DeviceMesh slice(const std::vector<int>& dims, int rank) const;

  /// "DeviceMesh(shape=[2, 2], dims=[dp, tp], ranks=[0, 1, 2, 3])".
  std::string to_string() const;

 private:
  std::vector<int64_t> shape_;
  std::vector<int> ranks_;
  std::vector<std::string> dim_names_;
};

}  // namespace tdist::mesh
