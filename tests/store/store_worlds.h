#pragma once

// Factories that build a "world" of N handles onto one fresh store, for every
// store type, so the conformance suite is written once and run on all.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tdist/store.h"

namespace tdist::testing {

struct StoreKind {
  std::string name;
  /// N handles that all see the same keys (handle 0 is the server/creator).
  std::function<std::vector<std::shared_ptr<Store>>(int n)> make;
  bool supports_delete = true;
};

/// HashStore, FileStore, TCPStore and PrefixStore (over a HashStore).
std::vector<StoreKind> all_store_kinds();

}  // namespace tdist::testing
