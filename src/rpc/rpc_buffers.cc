#include "rpc/rpc_buffers.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>

#include "common/env.h"
#include "tdist/rpc.h"

namespace tdist::rpc::detail {
namespace {

constexpr std::align_val_t kAlignment{64};
constexpr int64_t kDefaultCacheBytes = int64_t{512} << 20;

class BufferCache {
 public:
  BufferCache()
      : limit_(static_cast<size_t>(
            env_int("TDIST_RPC_BUFFER_CACHE_BYTES", 0, int64_t{1} << 50).value_or(kDefaultCacheBytes))) {}

  // A block of at least n bytes (and at most 2n, so a small tensor does not
  // pin a large block), from the cache or new.
  std::shared_ptr<void> take(size_t n) {
    void* block = nullptr;
    size_t size = n;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.lower_bound(n);
      if (it != free_.end() && it->first <= 2 * n) {
        size = it->first;
        block = it->second;
        held_ -= size;
        free_.erase(it);
      }
    }
    if (block == nullptr) block = ::operator new(size, kAlignment);
    return {block, [this, size](void* p) { give_back(p, size); }};
  }

  size_t held() {
    std::lock_guard<std::mutex> lock(mutex_);
    return held_;
  }

 private:
  void give_back(void* block, size_t size) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (held_ + size <= limit_) {
        held_ += size;
        free_.emplace(size, block);
        return;
      }
    }
    ::operator delete(block, kAlignment);
  }

  const size_t limit_;
  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  size_t held_ = 0;
};

BufferCache& cache() {
  // Never destroyed: tensors may die after static destructors ran.
  static auto* c = new BufferCache();  // NOLINT(cppcoreguidelines-owning-memory)
  return *c;
}

}  // namespace

Tensor receive_buffer(DType dtype, const Shape& shape, size_t nbytes) {
  if (nbytes < kCachedMinBytes) return Tensor::empty(dtype, shape);
  std::shared_ptr<void> block = cache().take(nbytes);
  void* data = block.get();
  return Tensor::wrap(data, dtype, shape, std::move(block));
}

size_t cached_buffer_bytes() {
  return cache().held();
}

}  // namespace tdist::rpc::detail

namespace tdist::rpc {

Tensor snapshot(const Tensor& t) {
  Tensor copy = detail::receive_buffer(t.dtype(), t.shape(), t.nbytes());
  if (t.nbytes() > 0) std::memcpy(copy.data(), t.data(), t.nbytes());
  return copy;
}

}  // namespace tdist::rpc
