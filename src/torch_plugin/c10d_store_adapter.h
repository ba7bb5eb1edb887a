#pragma once

// tdist::Store over a c10d::Store, so that tdist's process group rendezvous
// through whatever store torch.distributed created (TCPStore, FileStore,
// HashStore, wrapped in the PrefixStore of the group).

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>
#include <vector>

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

}  // namespace tdist::torch_plugin
