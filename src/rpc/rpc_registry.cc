#include "rpc/rpc_registry.h"

#include <map>
#include <mutex>

namespace tdist::rpc {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, Function> functions;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: agents may serve during exit
  return *r;
}

}  // namespace

void register_function(const std::string& name, Function fn) {
  if (name.empty()) throw DistInvalidArgument("rpc: register_function needs a name");
  if (!fn) throw DistInvalidArgument("rpc: register_function('" + name + "') got no function");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.functions.emplace(name, std::move(fn)).second) {
    throw DistInvalidArgument("rpc: a function named '" + name + "' is registered already");
  }
}

bool unregister_function(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.functions.erase(name) > 0;
}

namespace detail {

std::optional<Function> find_function(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.functions.find(name);
  if (it == r.functions.end()) return std::nullopt;
  return it->second;
}

}  // namespace detail
}  // namespace tdist::rpc
