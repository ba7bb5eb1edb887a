#include "check.h"

#include <algorithm>
#include <array>

namespace tdist::bench {
namespace {

// A well-mixed 64-bit hash (splitmix64's finaliser), so neighbouring
// elements and ranks get unrelated values and a misplaced block shows.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t hash(int64_t a, int64_t b) {
  return mix(mix(static_cast<uint64_t>(a)) ^ static_cast<uint64_t>(b));
}

// A value in [lo, hi].
int64_t in_range(uint64_t h, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(h % static_cast<uint64_t>(hi - lo + 1));
}

}  // namespace

int64_t exact_integer_bound(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return 1;
    case DType::kUInt8:
      return 255;
    case DType::kInt8:
      return 127;
    case DType::kInt16:
      return 32767;
    case DType::kInt32:
      return 2147483647;
    case DType::kInt64:
    case DType::kFloat64:
    case DType::kComplex128:
      return int64_t{1} << 53;
    case DType::kFloat16:
      return 2048;
    case DType::kBFloat16:
      return 256;
    case DType::kFloat32:
    case DType::kComplex64:
      return int64_t{1} << 24;
  }
  return 1;
}

ReducePattern::ReducePattern(DType dtype, const ReduceOp& op, int world_size)
    : dtype_(dtype), op_(op), world_size_(world_size) {
  // Every partial sum of up to p inputs stays within the exact range; small
  // values keep failures readable.
  max_ = std::clamp<int64_t>(exact_integer_bound(dtype) / world_size, 1, 100);
  is_unsigned_ = dtype == DType::kUInt8 || dtype == DType::kBool;
}

int64_t ReducePattern::input(int rank, int64_t index) const {
  const uint64_t h = hash(rank, index);
  if (dtype_ == DType::kBool) {
    // 0 or 1; with PRODUCT (logical and) a single rank may hold a 0.
    if (op_.kind == ReduceOp::PRODUCT || op_.kind == ReduceOp::MIN || op_.kind == ReduceOp::BAND) {
      return rank == index % world_size_ ? static_cast<int64_t>(h & 1) : 1;
    }
    return static_cast<int64_t>(h & 1);
  }
  switch (op_.kind) {
    case ReduceOp::PRODUCT: {
      // One rank per element contributes a factor, the rest 1: the product
      // is that factor, exact in every type, and shows which rank it came from.
      if (rank != index % world_size_) return 1;
      const uint64_t hi = hash(-1, index);
      return is_unsigned_ ? in_range(hi, 2, 3) : std::array<int64_t, 3>{-2, 2, 3}[hi % 3];
    }
    case ReduceOp::AVG: {
      // A per-element value every rank shares, plus per-rank offsets that
      // cancel in pairs (+1, -1, ..., 0 for an odd last rank): the sum is p
      // times the shared value, so the average is exact.
      const uint64_t hi = hash(-1, index);
      const int64_t shared = is_unsigned_ ? in_range(hi, 1, std::max<int64_t>(1, max_ - 1))
                                          : in_range(hi, -(max_ - 1), max_ - 1);
      const int position = static_cast<int>((rank + index) % world_size_);
      int64_t offset = position % 2 == 0 ? 1 : -1;
      if (position % 2 == 0 && position == world_size_ - 1) offset = 0;
      return shared + offset;
    }
    case ReduceOp::BAND:
    case ReduceOp::BOR:
    case ReduceOp::BXOR:
      // Bitwise results are exact for any bits; the conversion keeps the low ones.
      return static_cast<int64_t>(h);
    default:
      return is_unsigned_ ? in_range(h, 0, max_) : in_range(h, -max_, max_);
  }
}

int64_t ReducePattern::expected(int64_t index) const {
  int64_t acc = input(0, index);
  for (int rank = 1; rank < world_size_; ++rank) {
    const int64_t v = input(rank, index);
    switch (op_.kind) {
      case ReduceOp::SUM:
      case ReduceOp::AVG:
      case ReduceOp::PREMUL_SUM:
        acc += v;
        break;
      case ReduceOp::PRODUCT:
        acc *= v;
        break;
      case ReduceOp::MIN:
        acc = std::min(acc, v);
        break;
      case ReduceOp::MAX:
        acc = std::max(acc, v);
        break;
      case ReduceOp::BAND:
        acc &= v;
        break;
      case ReduceOp::BOR:
        acc |= v;
        break;
      case ReduceOp::BXOR:
        acc ^= v;
        break;
    }
  }
  if (op_.kind == ReduceOp::AVG) acc /= world_size_;
  return acc;
}

int64_t data_value(DType dtype, int64_t source, int64_t index) {
  if (dtype == DType::kBool) return static_cast<int64_t>(hash(source, index) & 1);
  const int64_t bound = std::min<int64_t>(exact_integer_bound(dtype), int64_t{1} << 20);
  return in_range(hash(source, index), 0, bound);
}

}  // namespace tdist::bench
