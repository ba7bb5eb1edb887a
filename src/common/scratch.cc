#include "common/scratch.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace tdist::detail {
namespace {

// Per thread, at most this many blocks and bytes are kept for reuse; larger
// blocks go straight back to malloc (at that size the faults are a small
// part of moving the data).
constexpr size_t kMaxBlocks = 8;
constexpr size_t kMaxBytes = size_t{64} << 20;
// Sizes are rounded up to this, so that calls of nearly equal sizes share.
constexpr size_t kGranule = size_t{64} << 10;

struct Block {
  uint8_t* data;
  size_t capacity;
};

class Cache {
 public:
  Cache() = default;
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;
  ~Cache() {
    for (auto& b : blocks_) delete[] b.data;
  }

  Block take(size_t bytes) {
    auto best = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
      if (it->capacity >= bytes && (best == blocks_.end() || it->capacity < best->capacity)) best = it;
    }
    if (best == blocks_.end()) {
      const size_t capacity = std::max<size_t>(1, (bytes + kGranule - 1) / kGranule * kGranule);
      return Block{new uint8_t[capacity], capacity};
    }
    Block block = *best;
    bytes_ -= block.capacity;
    blocks_.erase(best);
    return block;
  }

  void give(Block block) {
    if (block.capacity > kMaxBytes) {
      delete[] block.data;
      return;
    }
    blocks_.push_back(block);
    bytes_ += block.capacity;
    // Over the limits: drop the smallest blocks first; the large ones are
    // the expensive ones to fault in again.
    while (blocks_.size() > kMaxBlocks || bytes_ > kMaxBytes) {
      auto smallest = std::min_element(blocks_.begin(), blocks_.end(), [](const Block& a, const Block& b) {
        return a.capacity < b.capacity;
      });
      bytes_ -= smallest->capacity;
      delete[] smallest->data;
      blocks_.erase(smallest);
    }
  }

 private:
  std::vector<Block> blocks_;
  size_t bytes_ = 0;
};

// Set once this thread's cache is destroyed (a trivially destructible
// thread_local stays readable after that): a Scratch that outlives it, say
// in an object with static lifetime destroyed at exit, frees its block
// directly.
thread_local bool t_cache_gone = false;

struct OwnedCache {
  Cache cache;
  OwnedCache() = default;
  OwnedCache(const OwnedCache&) = delete;
  OwnedCache& operator=(const OwnedCache&) = delete;
  ~OwnedCache() { t_cache_gone = true; }
};

Cache* cache() {
  if (t_cache_gone) return nullptr;
  thread_local OwnedCache c;
  return &c.cache;
}

}  // namespace

Scratch::Scratch(size_t bytes) {
  Cache* c = cache();
  Block block = c != nullptr ? c->take(bytes)
                             : Block{new uint8_t[std::max<size_t>(1, bytes)], std::max<size_t>(1, bytes)};
  data_ = block.data;
  capacity_ = block.capacity;
}

Scratch::~Scratch() {
  give_back();
}

Scratch::Scratch(Scratch&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}

Scratch& Scratch::operator=(Scratch&& other) noexcept {
  if (this != &other) {
    give_back();
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

void Scratch::give_back() noexcept {
  if (data_ == nullptr) return;
  try {
    if (Cache* c = cache()) {
      c->give(Block{data_, capacity_});
    } else {
      delete[] data_;
    }
  } catch (...) {
    delete[] data_;  // the cache could not grow; just free it
  }
  data_ = nullptr;
  capacity_ = 0;
}

}  // namespace tdist::detail
