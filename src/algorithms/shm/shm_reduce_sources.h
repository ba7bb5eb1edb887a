#pragma once

// A reduction over every rank's contribution in shared memory: the sources
// (Sources) and the tiled, rank-ordered reduction (reduce_sources) on the
// kernels of common/reduce_kernels.h.

#include <cstddef>
#include <vector>

#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::algorithms::shm::detail {

/// The sources of a reduction, one per rank: on the stack for groups of up
/// to 16 ranks (no allocation on a small collective's path).
class Sources {
 public:
  explicit Sources(int n) : n_(static_cast<size_t>(n)) {
    if (n_ > kInline) heap_.resize(n_);
  }
  const void*& operator[](size_t i) { return n_ > kInline ? heap_[i] : inline_[i]; }
  const void* const* data() const { return n_ > kInline ? heap_.data() : inline_; }

 private:
  static constexpr size_t kInline = 16;
  size_t n_;
  const void* inline_[kInline] = {};
  std::vector<const void*> heap_;
};

/// dst = srcs[0] op srcs[1] op ... (in that order), count elements; for AVG
/// also divides. Tiles the range so the partial result stays in L1. With
/// `copy_to`, each finished tile is also copied there while still in L1
/// (cheaper than a second pass over the whole result). dst may be one of the
/// sources (the same elements), not overlap one in any other way; so may
/// copy_to.
void reduce_sources(void* dst, const void* const* srcs, int n, size_t count, DType dtype, const ReduceOp& op,
                    int world_size, void* copy_to = nullptr);

}  // namespace tdist::algorithms::shm::detail
