// DeviceMesh: row-major rank arithmetic (include/tdist/mesh.h).

#include <algorithm>
#include <set>

#include "mesh/text.h"
#include "tdist/errors.h"
#include "tdist/mesh.h"

namespace tdist::mesh {

using text::join;

DeviceMesh::DeviceMesh(std::vector<int64_t> shape, std::vector<int> ranks, std::vector<std::string> dim_names)
    : shape_(std::move(shape)), ranks_(std::move(ranks)), dim_names_(std::move(dim_names)) {
  if (shape_.empty()) throw DistInvalidArgument("DeviceMesh: the mesh needs at least one dimension");
  int64_t count = 1;
  for (int64_t s : shape_) {
    if (s < 1)
      throw DistInvalidArgument("DeviceMesh: every dimension needs size >= 1, got shape " + join(shape_));
    count *= s;
  }
  if (count != static_cast<int64_t>(ranks_.size())) {
    throw DistInvalidArgument("DeviceMesh: shape " + join(shape_) + " holds " + std::to_string(count) +
                              " ranks but " + std::to_string(ranks_.size()) + " were given");
  }
  std::set<int> seen;
  for (int r : ranks_) {
    if (r < 0) throw DistInvalidArgument("DeviceMesh: rank " + std::to_string(r) + " is negative");
    if (!seen.insert(r).second) {
      throw DistInvalidArgument("DeviceMesh: rank " + std::to_string(r) + " appears twice in " +
                                join(ranks_));
    }
  }
  if (!dim_names_.empty()) {
    if (dim_names_.size() != shape_.size()) {
      throw DistInvalidArgument("DeviceMesh: " + std::to_string(dim_names_.size()) + " dimension names " +
                                join(dim_names_) + " for a mesh of " + std::to_string(shape_.size()) +
                                " dimensions");
    }
    std::set<std::string> names;
    for (const auto& n : dim_names_) {
      if (n.empty()) throw DistInvalidArgument("DeviceMesh: a dimension name is empty");
      if (!names.insert(n).second) {
        throw DistInvalidArgument("DeviceMesh: dimension name '" + n + "' appears twice in " +
                                  join(dim_names_));
      }
    }
  }
}

int64_t DeviceMesh::size(int dim) const {
  if (dim < 0 || dim >= ndim()) {
    throw DistInvalidArgument("DeviceMesh: dimension " + std::to_string(dim) + " is not in [0, " +
                              std::to_string(ndim()) + ")");
  }
  return shape_[static_cast<size_t>(dim)];
}

int DeviceMesh::dim_index(const std::string& name) const {
  auto it = std::find(dim_names_.begin(), dim_names_.end(), name);
  if (it == dim_names_.end()) {
    throw DistInvalidArgument("DeviceMesh: no dimension is called '" + name + "'; the dimensions are " +
                              (dim_names_.empty() ? std::string("unnamed") : join(dim_names_)));
  }
  return static_cast<int>(it - dim_names_.begin());
}

std::optional<std::vector<int64_t>> DeviceMesh::coordinate_of(int rank) const {
  auto it = std::find(ranks_.begin(), ranks_.end(), rank);
  if (it == ranks_.end()) return std::nullopt;
  auto flat = static_cast<int64_t>(it - ranks_.begin());
  std::vector<int64_t> coordinate(shape_.size());
  for (size_t d = shape_.size(); d-- > 0;) {
    coordinate[d] = flat % shape_[d];
    flat /= shape_[d];
  }
  return coordinate;
}

int DeviceMesh::rank_at(const std::vector<int64_t>& coordinate) const {
  if (coordinate.size() != shape_.size()) {
    throw DistInvalidArgument("DeviceMesh: coordinate " + join(coordinate) + " does not have " +
                              std::to_string(shape_.size()) + " entries");
  }
  int64_t flat = 0;
  for (size_t d = 0; d < shape_.size(); ++d) {
    if (coordinate[d] < 0 || coordinate[d] >= shape_[d]) {
      throw DistInvalidArgument("DeviceMesh: coordinate " + join(coordinate) + " is outside shape " +
                                join(shape_));
    }
    flat = flat * shape_[d] + coordinate[d];
  }
  return ranks_[static_cast<size_t>(flat)];
}

std::vector<int> DeviceMesh::group_ranks(int dim, int rank) const {
  auto coordinate = coordinate_of(rank);
  if (!coordinate) {
    throw DistInvalidArgument("DeviceMesh: rank " + std::to_string(rank) + " is not in " + to_string());
  }
  std::vector<int> members;
  for (int64_t i = 0; i < size(dim); ++i) {
    (*coordinate)[static_cast<size_t>(dim)] = i;
    members.push_back(rank_at(*coordinate));
  }
  return members;
}

std::vector<std::vector<int>> DeviceMesh::all_group_ranks(int dim) const {
  size(dim);  // range check
  std::vector<std::vector<int>> groups;
  // The slices start at the ranks whose coordinate along `dim` is 0.
  for (int rank : ranks_) {
    if ((*coordinate_of(rank))[static_cast<size_t>(dim)] == 0) groups.push_back(group_ranks(dim, rank));
  }
  return groups;
}

DeviceMesh DeviceMesh::slice(const std::vector<int>& dims, int rank) const {
  auto coordinate = coordinate_of(rank);
  if (!coordinate) {
    throw DistInvalidArgument("DeviceMesh: rank " + std::to_string(rank) + " is not in " + to_string());
  }
  if (dims.empty()) throw DistInvalidArgument("DeviceMesh: a slice keeps at least one dimension");
  for (size_t i = 0; i < dims.size(); ++i) {
    size(dims[i]);  // range check
    if (i > 0 && dims[i] <= dims[i - 1]) {
      throw DistInvalidArgument("DeviceMesh: a slice keeps dimensions in the mesh's order, got " +
                                join(dims));
    }
  }
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  for (int d : dims) {
    shape.push_back(size(d));
    if (!dim_names_.empty()) names.push_back(dim_names_[static_cast<size_t>(d)]);
  }
  // Walk the kept dimensions row-major with the others fixed at rank's coordinate.
  std::vector<int> ranks;
  std::vector<int64_t> index(dims.size(), 0);
  std::vector<int64_t> at = *coordinate;
  for (;;) {
    for (size_t i = 0; i < dims.size(); ++i) at[static_cast<size_t>(dims[i])] = index[i];
    ranks.push_back(rank_at(at));
    size_t i = dims.size();
    while (i-- > 0) {
      if (++index[i] < shape[i]) break;
      index[i] = 0;
    }
    if (i == static_cast<size_t>(-1)) break;
  }
  return DeviceMesh(std::move(shape), std::move(ranks), std::move(names));
}

std::string DeviceMesh::to_string() const {
  std::string s = "DeviceMesh(shape=" + join(shape_);
  if (!dim_names_.empty()) s += ", dims=" + join(dim_names_);
  return s + ", ranks=" + join(ranks_) + ")";
}

}  // namespace tdist::mesh
