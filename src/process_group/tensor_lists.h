#pragma once

// Lists of tensors as the collectives take them: one buffer standing for a
// list (Blocks), the offsets of a list in place (Scattered), and the
// arithmetic of staging a long list in slices. For the process group's ops
// (tdist_ops.cc).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/scratch.h"
#include "tdist/tensor.h"

namespace tdist::detail {

inline uint64_t count_of(const Tensor& t) {
  return static_cast<uint64_t>(t.numel());
}

inline uint64_t total_count(const std::vector<Tensor>& tensors) {
  uint64_t n = 0;
  for (const auto& t : tensors) n += count_of(t);
  return n;
}

inline size_t to_size(int64_t v) {
  return static_cast<size_t>(v);
}

// True if the tensors lie back to back in memory in list order, so a
// collective can write them as one buffer without staging.
inline bool back_to_back(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return true;
  const auto* base = static_cast<const uint8_t*>(tensors[0].data());
  size_t offset = 0;
  for (const auto& t : tensors) {
    if (t.nbytes() > 0 && static_cast<const uint8_t*>(t.data()) != base + offset) return false;
    offset += t.nbytes();
  }
  return true;
}

inline std::vector<size_t> nbytes_of(const std::vector<Tensor>& tensors) {
  std::vector<size_t> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(t.nbytes());
  return out;
}

// One contiguous buffer standing for a list of tensors: the tensors' own
// memory when they are back to back, else a staging buffer.
struct Blocks {
  std::vector<Tensor> tensors;
  Scratch staging;  // recycled memory: no page faults per call; empty when not staged
  uint8_t* base = nullptr;

  explicit Blocks(std::vector<Tensor> list) : tensors(std::move(list)) {
    if (back_to_back(tensors) && !tensors.empty()) {
      base = static_cast<uint8_t*>(tensors[0].data());
    } else {
      size_t total = 0;
      for (const auto& t : tensors) total += t.nbytes();
      staging = Scratch(total);
      base = staging.get();
    }
  }
  bool staged() const { return staging.get() != nullptr; }
  void copy_in() {
    if (!staged()) return;
    size_t offset = 0;
    for (const auto& t : tensors) {
      if (t.nbytes() > 0) std::memcpy(base + offset, t.data(), t.nbytes());
      offset += t.nbytes();
    }
  }
  void copy_out() {
    if (!staged()) return;
    size_t offset = 0;
    for (const auto& t : tensors) {
      if (t.nbytes() > 0) std::memcpy(t.data(), base + offset, t.nbytes());
      offset += t.nbytes();
    }
  }
};

// Where a list of tensors lies, as one base address and each tensor's
// offset from it (the lowest address among the non-empty tensors): the form
// in which the all_to_all algorithms take their blocks, so that a list in
// separate allocations is read and written in place instead of staged.
struct Scattered {
  uint8_t* base = nullptr;
  std::vector<size_t> offsets;

  explicit Scattered(const std::vector<Tensor>& tensors) : offsets(tensors.size(), 0) {
    uintptr_t low = UINTPTR_MAX;
    for (const auto& t : tensors) {
      if (t.nbytes() > 0) low = std::min(low, reinterpret_cast<uintptr_t>(t.data()));
    }
    if (low == UINTPTR_MAX) return;
    base = reinterpret_cast<uint8_t*>(low);
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].nbytes() > 0) offsets[i] = reinterpret_cast<uintptr_t>(tensors[i].data()) - low;
    }
  }
};

// A list collective whose staging buffer would outgrow the scratch cache
// runs as several calls of the same op, each over one slice of every block
// (slice k of a balanced partition of each block into n, chunking.h),
// through a staging buffer of at most about this size that the cache keeps:
// a fresh 256 MiB buffer per call cost more in page faults than the
// collective itself (a 4-rank list all_gather of 64 MiB blocks: 392 ms
// against 47 into one tensor, 2026-11-29, the 2-vCPU VM). The slices must
// be the same on every rank, so this is only for ops whose block sizes are
// the same on every rank (all_gather).
inline constexpr size_t kStagingSliceBytes = size_t{16} << 20;

inline size_t slices_for(size_t total) {
  return std::max<size_t>(1, (total + kStagingSliceBytes - 1) / kStagingSliceBytes);
}

inline std::vector<size_t> offsets_of(const std::vector<size_t>& bytes) {
  std::vector<size_t> offsets(bytes.size(), 0);
  for (size_t i = 1; i < bytes.size(); ++i) offsets[i] = offsets[i - 1] + bytes[i - 1];
  return offsets;
}

}  // namespace tdist::detail
