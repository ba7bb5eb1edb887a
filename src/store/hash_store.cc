#include <condition_variable>
#include <mutex>

#include "kv_map.h"
#include "tdist/errors.h"
#include "tdist/store.h"

namespace tdist {

struct HashStore::State {
  std::mutex mutex;
  std::condition_variable changed;  // notified on every write
  KvMap map;
};

HashStore::HashStore() : state_(std::make_unique<State>()) {}
HashStore::~HashStore() = default;

void HashStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->map.set(key, value);
  }
  state_->changed.notify_all();
}

Bytes HashStore::get(const std::string& key) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  Duration timeout = this->timeout();
  if (!state_->changed.wait_for(lock, timeout, [&] { return state_->map.contains(key); })) {
    throw DistStoreTimeoutError(wait_timeout_message("HashStore", "get", {key}, timeout));
  }
  return *state_->map.find(key);
}

int64_t HashStore::add(const std::string& key, int64_t amount) {
  std::optional<int64_t> result;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    result = state_->map.add(key, amount);
  }
  if (!result) throw DistStoreError(add_on_value_message("HashStore", key));
  state_->changed.notify_all();
  return *result;
}

Bytes HashStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Bytes result;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    result = state_->map.compare_set(key, expected, desired);
  }
  state_->changed.notify_all();
  return result;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->map.contains_all(keys);
}

void HashStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  check_wait_timeout("HashStore", timeout);
  std::unique_lock<std::mutex> lock(state_->mutex);
  if (!state_->changed.wait_for(lock, timeout, [&] { return state_->map.contains_all(keys); })) {
    throw DistStoreTimeoutError(
        wait_timeout_message("HashStore", "wait", state_->map.missing(keys), timeout));
  }
}

int64_t HashStore::num_keys() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->map.size();
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->map.erase(key);
}

}  // namespace tdist
