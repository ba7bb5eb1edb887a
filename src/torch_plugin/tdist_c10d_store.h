#pragma once

// tdist.torch.TCPStore: a c10d::Store over tdist's own TCPStore, so that a
// torch program (any backend: tdist, gloo) can rendezvous through a store
// that listens only on the address it was given and authenticates its
// clients with the job's token (docs/security.md). torch's own TCPStore
// cannot: its server listens on every interface, and its protocol has no
// authentication. The reverse of C10dStoreAdapter. Header-only: module.cc
// is its one user, and torch's headers make every extra translation unit
// cost seconds to compile.

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "conversions.h"
#include "tdist/tcp_store.h"

namespace tdist::torch_plugin {

class TdistC10dStore final : public c10d::Store {
 public:
  /// `options` as tdist::TCPStore takes them; the token (auth_token) is the
  /// environment's unless set.
  TdistC10dStore(std::string host, TCPStoreOptions options)
      : c10d::Store(std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout)),
        host_(std::move(host)),
        options_(options),
        store_(translate_errors([&] { return std::make_shared<TCPStore>(host_, options); })) {}

  // A client of the same server (what torch asks for a second connection).
  c10::intrusive_ptr<c10d::Store> clone() override {
    TCPStoreOptions client = options_;
    client.is_master = false;
    client.port = store_->port();
    client.master_listen_fd = -1;
    client.world_size.reset();  // a clone does not join as a user of the store
    client.timeout = timeout_;
    return c10::make_intrusive<TdistC10dStore>(host_, client);
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    translate_errors([&] { store_->set(key, value); });
  }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    return translate_errors([&] { return store_->compare_set(key, expected, desired); });
  }
  std::vector<uint8_t> get(const std::string& key) override {
    return translate_errors([&] { return store_->get(key); });
  }
  int64_t add(const std::string& key, int64_t value) override {
    return translate_errors([&] { return store_->add(key, value); });
  }
  bool deleteKey(const std::string& key) override {
    return translate_errors([&] { return store_->delete_key(key); });
  }
  bool check(const std::vector<std::string>& keys) override {
    return translate_errors([&] { return store_->check(keys); });
  }
  int64_t getNumKeys() override {
    return translate_errors([&] { return store_->num_keys(); });
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    translate_errors([&] { store_->wait(keys, timeout); });
  }
  // torch sets the group's timeout on the store it rendezvoused through; get()
  // waits with the store's own.
  void setTimeout(const std::chrono::milliseconds& timeout) override {
    c10d::Store::setTimeout(timeout);
    store_->set_timeout(timeout);
  }

  const std::string& host() const { return host_; }
  uint16_t port() const { return store_->port(); }

 private:
  std::string host_;
  TCPStoreOptions options_;
  std::shared_ptr<TCPStore> store_;
};

}  // namespace tdist::torch_plugin
