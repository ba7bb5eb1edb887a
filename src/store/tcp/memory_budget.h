#pragma once

// The TCPStore server's one memory budget: keys, values, parked waiters and
// buffered frames are charged to it, so no client (or many) can grow the
// server without bound. Values are charged for as long as anything holds
// them (the table, or a reply still being sent), through the deleter of the
// shared pointer that holds them.

#include <atomic>
#include <cstddef>
#include <memory>
#include <utility>

#include "tdist/store.h"

namespace tdist {

class MemoryBudget {
 public:
  explicit MemoryBudget(size_t limit) : limit_(limit), used_(std::make_shared<std::atomic<size_t>>(0)) {}

  size_t limit() const { return limit_; }
  size_t used() const { return used_->load(std::memory_order_relaxed); }
  /// The most ever charged at once: whether the budget held, not only now.
  size_t peak() const { return peak_.load(std::memory_order_relaxed); }
  /// Whether `more` bytes still fit.
  bool fits(size_t more) const { return more <= limit_ && used() <= limit_ - more; }

  void charge(size_t bytes) { note_peak(used_->fetch_add(bytes, std::memory_order_relaxed) + bytes); }
  void release(size_t bytes) { used_->fetch_sub(bytes, std::memory_order_relaxed); }
  /// Moves a charge from `from` to `to` bytes.
  void recharge(size_t from, size_t to) {
    if (to > from) charge(to - from);
    if (from > to) release(from - to);
  }

  /// An immutable value charged to the budget until its last reference goes.
  std::shared_ptr<const Bytes> make_value(Bytes bytes) {
    size_t size = bytes.size() + kValueOverhead;
    charge(size);
    auto used = used_;  // the counter outlives the budget if a value does
    return std::shared_ptr<const Bytes>(new Bytes(std::move(bytes)), [used, size](const Bytes* value) {
      used->fetch_sub(size, std::memory_order_relaxed);
      delete value;
    });
  }

  /// Bookkeeping bytes counted for each value and each key besides their
  /// contents (allocations, map nodes): keeps a flood of empty keys honest.
  static constexpr size_t kValueOverhead = 64;

 private:
  // Charges come from the loop thread only; the load-then-store is enough.
  void note_peak(size_t now) {
    if (now > peak_.load(std::memory_order_relaxed)) peak_.store(now, std::memory_order_relaxed);
  }

  size_t limit_;
  std::shared_ptr<std::atomic<size_t>> used_;
  std::atomic<size_t> peak_{0};
};

}  // namespace tdist
