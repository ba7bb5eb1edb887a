#pragma once

// The store of one connect of a group's generation (connect_generation in
// tdist_backend.cc): its blocking reads wait in slices and ask between them
// whether a later generation began, so that a connect that can never
// complete is given up for that one.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "store/kv_map.h"
#include "tdist/errors.h"
#include "tdist/store.h"

namespace tdist::detail {

// Thrown inside the connect of generation g once a member has entered
// g + 1: g can then never complete, and connect_generation moves on.
class GenerationSuperseded : public std::runtime_error {
 public:
  GenerationSuperseded() : std::runtime_error("a later generation of the group began") {}
};

// How often a connect that waits for its peers asks whether its generation
// was superseded.
constexpr std::chrono::milliseconds kWatchSlice{100};

// The store of one connect: while armed, its blocking reads (get, wait)
// wait in slices of kWatchSlice and run `watch` between them, which throws
// GenerationSuperseded to give the connect up. disarm() ends that once the
// connect is made: the group keeps the store for its call notes.
class WatchedStore final : public Store {
 public:
  WatchedStore(std::shared_ptr<Store> store, std::function<void()> watch)
      : Store(store->timeout()), store_(std::move(store)), watch_(std::move(watch)) {}

  void set(const std::string& key, const Bytes& value) override { store_->set(key, value); }
  using Store::set;
  Bytes get(const std::string& key) override {
    if (armed_.load(std::memory_order_acquire)) wait_watching("get", {key}, timeout());
    return store_->get(key);
  }
  int64_t add(const std::string& key, int64_t amount) override { return store_->add(key, amount); }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    return store_->compare_set(key, expected, desired);
  }
  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    if (!armed_.load(std::memory_order_acquire)) return store_->wait(keys, timeout);
    wait_watching("wait", keys, timeout);
  }
  int64_t num_keys() override { return store_->num_keys(); }
  bool delete_key(const std::string& key) override { return store_->delete_key(key); }
  void set_timeout(Duration timeout) override {
    Store::set_timeout(timeout);
    store_->set_timeout(timeout);
  }

  void disarm() { armed_.store(false, std::memory_order_release); }

 private:
  void wait_watching(const std::string& op, const std::vector<std::string>& keys, Duration timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::ceil<Duration>(deadline - std::chrono::steady_clock::now());
      try {
        store_->wait(keys, std::clamp(left, Duration(1), kWatchSlice));
        return;
      } catch (const DistTimeoutError&) {
        if (left <= kWatchSlice) {
          std::vector<std::string> missing;
          for (const auto& key : keys) {
            if (!store_->check({key})) missing.push_back(key);
          }
          throw DistStoreTimeoutError(
              wait_timeout_message("store", op, missing, timeout, "(the group's connect)"));
        }
      }
      watch_();
    }
  }

  std::shared_ptr<Store> store_;
  std::function<void()> watch_;
  std::atomic<bool> armed_{true};
};

}  // namespace tdist::detail
