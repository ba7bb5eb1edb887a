#include "store_worlds.h"

#include "multirank.h"
#include "tdist/file_store.h"
#include "tdist/tcp_store.h"

namespace tdist::testing {

std::vector<StoreKind> all_store_kinds() {
  std::vector<StoreKind> kinds;
  kinds.push_back({"HashStore", [](int n) {
                     auto store = std::make_shared<HashStore>();
                     return std::vector<std::shared_ptr<Store>>(static_cast<size_t>(n), store);
                   }});
  kinds.push_back({"FileStore",
                   [](int n) {
                     std::string path = temp_path("filestore");
                     std::vector<std::shared_ptr<Store>> handles;
                     for (int i = 0; i < n; ++i) handles.push_back(std::make_shared<FileStore>(path, n));
                     return handles;
                   },
                   /*supports_delete=*/false});
  kinds.push_back({"TCPStore", [](int n) {
                     std::vector<std::shared_ptr<Store>> handles;
                     TCPStoreOptions options;
                     options.is_master = true;
                     options.port = 0;
                     options.timeout = std::chrono::seconds(30);
                     auto master = std::make_shared<TCPStore>("127.0.0.1", options);
                     handles.push_back(master);
                     options.is_master = false;
                     options.port = master->port();
                     for (int i = 1; i < n; ++i)
                       handles.push_back(std::make_shared<TCPStore>("127.0.0.1", options));
                     return handles;
                   }});
  kinds.push_back({"PrefixStore", [](int n) {
                     auto base = std::make_shared<HashStore>();
                     std::vector<std::shared_ptr<Store>> handles;
                     for (int i = 0; i < n; ++i)
                       handles.push_back(std::make_shared<PrefixStore>("job", base));
                     return handles;
                   }});
  return kinds;
}

}  // namespace tdist::testing
