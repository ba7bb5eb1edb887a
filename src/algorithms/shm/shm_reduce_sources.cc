#include "algorithms/shm/shm_reduce_sources.h"

#include <cstdint>
#include <cstring>

#include "common/reduce_kernels.h"

namespace tdist::algorithms::shm::detail {

namespace {

// Tiles of the reduction: the partial result of pairwise passes stays in L1.
constexpr size_t kTileBytes = size_t{16} << 10;

bool overlaps(const void* a, const void* b, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

// dst = the sources' elements [begin, begin + len) reduced, in rank order;
// dst overlaps none of them. float32 sums (AVG and PREMUL_SUM sum too) run
// in one pass over the sources (`one_pass`).
void reduce_tile(uint8_t* dst, const void* const* srcs, int n, size_t begin, size_t len, DType dtype,
                 const ReduceOp& op, bool one_pass) {
  const size_t off = begin * element_size(dtype);
  auto at = [&](int i) { return static_cast<const uint8_t*>(srcs[i]) + off; };
  if (one_pass) {
    const float* tile_srcs[8];
    for (int i = 0; i < n; ++i) tile_srcs[i] = reinterpret_cast<const float*>(at(i));
    sum_float32_sources(reinterpret_cast<float*>(dst), tile_srcs, n, len);
    return;
  }
  reduce_into(dst, at(0), at(1), len, dtype, op);
  for (int i = 2; i < n; ++i) reduce_into(dst, dst, at(i), len, dtype, op);
}

// The same through a scratch tile, for a result that overlaps a source:
// two-shot PREMUL_SUM reduces a rank's own premultiplied piece where its
// result goes, and pairwise passes straight into it overwrote that source
// before reading it (wrong sums on ranks 2 and up). Out of line: only this
// path needs the 16 KiB of stack.
[[gnu::noinline]] void reduce_tile_via_scratch(uint8_t* dst, const void* const* srcs, int n, size_t begin,
                                               size_t len, DType dtype, const ReduceOp& op, bool one_pass) {
  alignas(64) uint8_t scratch[kTileBytes];
  reduce_tile(scratch, srcs, n, begin, len, dtype, op, one_pass);
  std::memcpy(dst, scratch, len * element_size(dtype));
}

}  // namespace

void reduce_sources(void* dst, const void* const* srcs, int n, size_t count, DType dtype, const ReduceOp& op,
                    int world_size, void* copy_to) {
  const size_t eb = element_size(dtype);
  const size_t tile = std::max<size_t>(1, kTileBytes / eb);
  auto* out = static_cast<uint8_t*>(dst);
  const bool sum_kind =
      op.kind == ReduceOp::SUM || op.kind == ReduceOp::AVG || op.kind == ReduceOp::PREMUL_SUM;
  const bool one_pass = dtype == DType::kFloat32 && sum_kind && n >= 2 && n <= 8;
  bool overlap = false;
  for (int i = 0; n > 1 && i < n; ++i) overlap = overlap || overlaps(out, srcs[i], count * eb);
  for (size_t begin = 0; begin < count; begin += tile) {
    const size_t len = std::min(tile, count - begin);
    const size_t off = begin * eb;
    if (n == 1) {
      if (out != srcs[0]) std::memcpy(out + off, static_cast<const uint8_t*>(srcs[0]) + off, len * eb);
    } else if (overlap) {
      reduce_tile_via_scratch(out + off, srcs, n, begin, len, dtype, op, one_pass);
    } else {
      reduce_tile(out + off, srcs, n, begin, len, dtype, op, one_pass);
    }
    finalize_reduce(out + off, len, dtype, op, world_size);
    if (copy_to != nullptr) std::memcpy(static_cast<uint8_t*>(copy_to) + off, out + off, len * eb);
  }
}
}  // namespace tdist::algorithms::shm::detail
