#include "c10d_store_adapter.h"

#include <c10/util/Exception.h>

#include "tdist/errors.h"

namespace tdist::torch_plugin {
namespace {

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

std::string join(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : "', '") + k;
  return out;
}

}  // namespace

C10dStoreAdapter::C10dStoreAdapter(c10::intrusive_ptr<c10d::Store> store)
    : Store(store ? store->getTimeout() : kDefaultTimeout), store_(std::move(store)) {
  if (!store_) throw DistInvalidArgument("tdist torch plugin: the torch store is None");
}

void C10dStoreAdapter::set(const std::string& key, const Bytes& value) {
  forward("set", key, [&] { store_->set(key, value); });
}

Bytes C10dStoreAdapter::get(const std::string& key) {
  return forward("get", key, [&] { return store_->get(key); });
}

int64_t C10dStoreAdapter::add(const std::string& key, int64_t amount) {
  return forward("add", key, [&] { return store_->add(key, amount); });
}

Bytes C10dStoreAdapter::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return forward("compare_set", key, [&] { return store_->compareSet(key, expected, desired); });
}

bool C10dStoreAdapter::check(const std::vector<std::string>& keys) {
  return forward("check", join(keys), [&] { return store_->check(keys); });
}

void C10dStoreAdapter::wait(const std::vector<std::string>& keys, Duration timeout) {
  forward("wait", join(keys), [&] { store_->wait(keys, timeout); });
}

int64_t C10dStoreAdapter::num_keys() {
  return forward("num_keys", "", [&] { return store_->getNumKeys(); });
}

bool C10dStoreAdapter::delete_key(const std::string& key) {
  return forward("delete_key", key, [&] { return store_->deleteKey(key); });
}

void C10dStoreAdapter::set_timeout(Duration timeout) {
  Store::set_timeout(timeout);
  forward("set_timeout", "", [&] { store_->setTimeout(timeout); });
}

}  // namespace tdist::torch_plugin
