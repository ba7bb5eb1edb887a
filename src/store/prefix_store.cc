#include "tdist/errors.h"
#include "tdist/store.h"

namespace tdist {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : Store(store ? store->timeout() : kDefaultTimeout),
      prefix_(std::move(prefix)),
      store_(std::move(store)) {
  if (!store_) throw DistInvalidArgument("PrefixStore: the underlying store is null");
}

std::string PrefixStore::prefixed(const std::string& key) const {
  return prefix_ + "/" + key;
}

void PrefixStore::set(const std::string& key, const Bytes& value) {
  store_->set(prefixed(key), value);
}

Bytes PrefixStore::get(const std::string& key) {
  return store_->get(prefixed(key));
}

int64_t PrefixStore::add(const std::string& key, int64_t amount) {
  return store_->add(prefixed(key), amount);
}

Bytes PrefixStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return store_->compare_set(prefixed(key), expected, desired);
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& key : keys) full.push_back(prefixed(key));
  return store_->check(full);
}

void PrefixStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& key : keys) full.push_back(prefixed(key));
  store_->wait(full, timeout);
}

int64_t PrefixStore::num_keys() {
  return store_->num_keys();
}

bool PrefixStore::delete_key(const std::string& key) {
  return store_->delete_key(prefixed(key));
}

void PrefixStore::set_timeout(Duration timeout) {
  Store::set_timeout(timeout);
  store_->set_timeout(timeout);
}

}  // namespace tdist
