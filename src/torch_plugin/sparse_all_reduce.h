#pragma once

// all_reduce of a sparse COO tensor (ReduceOp.SUM only), as torch's gloo
// backend does it: each rank coalesces its tensor, the ranks all_gather a
// small description of it (dtype, sparse and dense dims, sizes, nnz), then
// the indices and the values of every rank (all_gather_into_tensor_uneven,
// nnz rows per rank), and each rank sums them into one coalesced tensor,
// which replaces the input's contents (Tensor.copy_), as gloo's does.
// ProcessGroupTdist::sparse_allreduce issues these collectives; this file
// holds the arithmetic. Header-only: see work_tdist.h.

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "conversions.h"

namespace tdist::torch_plugin::sparse {

/// Sizes of at most this many dimensions travel in the description.
constexpr int64_t kMaxDims = 16;
/// The description's words: dtype, sparse dims, dense dims, nnz, number of
/// dimensions, then the sizes (zero-padded to kMaxDims).
constexpr int64_t kMetaWords = 5 + kMaxDims;

struct Meta {
  int64_t dtype, sparse_dim, dense_dim, nnz;
  std::vector<int64_t> sizes;
};

inline at::Tensor describe(const at::Tensor& coalesced) {
  at::Tensor meta = at::zeros({kMetaWords}, at::kLong);
  auto* w = meta.data_ptr<int64_t>();
  w[0] = static_cast<int64_t>(coalesced.scalar_type());
  w[1] = coalesced.sparse_dim();
  w[2] = coalesced.dense_dim();
  w[3] = coalesced._nnz();
  w[4] = coalesced.dim();
  for (int64_t d = 0; d < coalesced.dim(); ++d) w[5 + d] = coalesced.size(d);
  return meta;
}

inline Meta read(const at::Tensor& all, int64_t rank) {
  const auto* w = all.data_ptr<int64_t>() + rank * kMetaWords;
  return Meta{w[0], w[1], w[2], w[3], std::vector<int64_t>(w + 5, w + 5 + std::min(w[4], kMaxDims))};
}

inline std::string label(const Meta& m) {
  std::string out = dtype_label(static_cast<at::ScalarType>(m.dtype)) + "[";
  for (size_t i = 0; i < m.sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(m.sizes[i]);
  return out + "] (" + std::to_string(m.sparse_dim) + " sparse, " + std::to_string(m.dense_dim) +
         " dense dims)";
}

/// The error every rank raises when the ranks' tensors cannot be summed
/// (gloo's words, "Sparse dimensions do not match", then who passed what),
/// or empty. `all` holds every rank's description.
inline std::string mismatch(const at::Tensor& all, int size, const std::function<std::string(int)>& name) {
  Meta first = read(all, 0);
  for (int r = 1; r < size; ++r) {
    Meta m = read(all, r);
    if (m.dtype != first.dtype || m.sparse_dim != first.sparse_dim || m.dense_dim != first.dense_dim ||
        m.sizes != first.sizes) {
      std::string out =
          "all_reduce: Sparse dimensions do not match (every rank must pass a sparse tensor of "
          "the same dtype, sizes and sparse/dense dims): ";
      for (int k = 0; k < size; ++k)
        out += (k ? ", " : "") + std::string("rank ") + name(k) + " passed " + label(read(all, k));
      return out;
    }
  }
  return {};
}

/// The sum of every rank's entries: `indices` holds them as rows (total nnz x
/// sparse dims), `values` as total nnz x dense sizes, in rank order, as
/// gloo adds its per-rank tensors; coalescing sums the duplicates.
inline at::Tensor sum(const at::Tensor& indices, const at::Tensor& values, at::IntArrayRef sizes) {
  return at::sparse_coo_tensor(indices.t(), values, sizes, values.options().layout(at::kSparse)).coalesce();
}

}  // namespace tdist::torch_plugin::sparse
