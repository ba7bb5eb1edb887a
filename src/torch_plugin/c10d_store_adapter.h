#pragma once

// tdist::Store over a c10d::Store, so that tdist's process group rendezvous
// through whatever store torch.distributed created (TCPStore, FileStore,
// HashStore, wrapped in the PrefixStore of the group). Header-only: its one
// user is process_group_tdist.cc, and torch's headers make every extra
// translation unit cost seconds to compile.

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>
#include <vector>

#include "tdist/errors.h"
#include "tdist/store.h"

namespace tdist::torch_plugin {

class C10dStoreAdapter final : public Store {
 public:
  explicit C10dStoreAdapter(c10::intrusive_ptr<c10d::Store> store);

  void set(const std::string& key, const Bytes& value) override;
  using Store::set;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t amount) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  int64_t num_keys() override;
  bool delete_key(const std::string& key) override;
  /// Sets the timeout of the c10d store too, since its get() uses its own.
  void set_timeout(Duration timeout) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

namespace detail {

// c10d stores fail with c10::Error; tdist's rendezvous and transport expect
// the tdist hierarchy (a timeout must stay recognisable as one).
template <typename F>
decltype(auto) forward(const char* op, const std::string& key, F&& body) {
  try {
    return body();
  } catch (const c10::Error& e) {
    std::string message = std::string("torch store ") + op + "('" + key + "'): " + e.what_without_backtrace();
    if (message.find("imeout") != std::string::npos || message.find("imed out") != std::string::npos) {
      throw DistStoreTimeoutError(message);
    }
    throw DistStoreError(message);
  }
}

inline std::string join(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : "', '") + k;
  return out;
}

}  // namespace detail

inline C10dStoreAdapter::C10dStoreAdapter(c10::intrusive_ptr<c10d::Store> store)
    : Store(store ? store->getTimeout() : kDefaultTimeout), store_(std::move(store)) {
  if (!store_) throw DistInvalidArgument("tdist torch plugin: the torch store is None");
}

inline void C10dStoreAdapter::set(const std::string& key, const Bytes& value) {
  detail::forward("set", key, [&] { store_->set(key, value); });
}

inline Bytes C10dStoreAdapter::get(const std::string& key) {
  return detail::forward("get", key, [&] { return store_->get(key); });
}

inline int64_t C10dStoreAdapter::add(const std::string& key, int64_t amount) {
  return detail::forward("add", key, [&] { return store_->add(key, amount); });
}

inline Bytes C10dStoreAdapter::compare_set(const std::string& key, const Bytes& expected,
                                           const Bytes& desired) {
  return detail::forward("compare_set", key, [&] {
    std::vector<uint8_t> result = store_->compareSet(key, expected, desired);
    // torch 1.13's TCPStore does not wake the clients waiting in get() or
    // wait() on a key that compareSet wrote: write the outcome again,
    // unchanged, with set(), which does (else they wait out their timeout).
    if (result == desired) store_->set(key, result);
    return result;
  });
}

inline bool C10dStoreAdapter::check(const std::vector<std::string>& keys) {
  return detail::forward("check", detail::join(keys), [&] { return store_->check(keys); });
}

inline void C10dStoreAdapter::wait(const std::vector<std::string>& keys, Duration timeout) {
  detail::forward("wait", detail::join(keys), [&] { store_->wait(keys, timeout); });
}

inline int64_t C10dStoreAdapter::num_keys() {
  return detail::forward("num_keys", "", [&] { return store_->getNumKeys(); });
}

inline bool C10dStoreAdapter::delete_key(const std::string& key) {
  return detail::forward("delete_key", key, [&] { return store_->deleteKey(key); });
}

inline void C10dStoreAdapter::set_timeout(Duration timeout) {
  Store::set_timeout(timeout);
  detail::forward("set_timeout", "", [&] { store_->setTimeout(timeout); });
}

}  // namespace tdist::torch_plugin
