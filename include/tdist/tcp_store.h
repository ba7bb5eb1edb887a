#pragma once

/// @file tcp_store.h
/// TCPStore: a key-value store served over TCP. One process (the master) runs
/// the server, an epoll event loop on a background thread; every process,
/// the master included, talks to it through a client connection. get() and
/// wait() are answered by the server when the key arrives, so clients never
/// poll.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tdist/store.h"

namespace tdist {

/// Constructor arguments of TCPStore, named as in the spec.
struct TCPStoreOptions {
  /// Port to listen on (master) or connect to (client); 0 on the master picks
  /// a free port, reported by TCPStore::port().
  uint16_t port = 0;
  /// Number of store users (clients + the server's own); nullopt means not
  /// fixed.
  std::optional<int> world_size;
  /// True in the one process that runs the server.
  bool is_master = false;
  /// Timeout of construction (connecting, waiting for workers) and of
  /// get()/wait().
  Store::Duration timeout = Store::kDefaultTimeout;
  /// The master waits in its constructor until world_size users have joined.
  bool wait_for_workers = true;
  /// All masters of this process with the same port share one server.
  bool multi_tenant = false;
  /// A socket already bound to `port` for the server to listen on (avoids
  /// port races); -1 to create one. The store takes ownership of the fd (as
  /// after Python's socket.detach()) and closes it, also if construction
  /// fails. Only for the master.
  int master_listen_fd = -1;
  /// Master only: the address the server listens on. nullopt: the
  /// TDIST_STORE_LISTEN_HOST variable if set, else host_name itself (every
  /// address it resolves to on this host, so MASTER_ADDR=127.0.0.1 listens on
  /// loopback only). "0.0.0.0" or "::" listen on every interface.
  std::optional<std::string> listen_host;
  /// The job's shared secret (docs/security.md). nullopt: the variables
  /// TDIST_AUTH_TOKEN / TDIST_AUTH_TOKEN_FILE, if set; "": no
  /// authentication. With a token the server refuses clients that cannot
  /// prove they hold it, and the client refuses a server that cannot.
  std::optional<std::string> auth_token;
};

class TCPServer;
class TCPStoreClient;

/// A store backed by a TCP server.
class TCPStore final : public Store {
 public:
  /// Starts the server (if options.is_master) and connects to
  /// host_name:port. Accepts IPv4 and IPv6 literals and host names. Clients
  /// retry with backoff while the server comes up and raise
  /// DistStoreTimeoutError naming host, port and time waited at the timeout.
  /// The master's server listens on the addresses host_name resolves to
  /// (see TCPStoreOptions::listen_host); a port already in use raises
  /// DistStoreError naming it. With world_size set,
  /// every instance adds 1 to kInitKey and the master (if wait_for_workers)
  /// waits for world_size of them, raising DistStoreTimeoutError that says
  /// how many joined. Invalid options raise DistInvalidArgument.
  ///
  /// Operations raise DistStoreError when the server is gone (naming its
  /// address) and DistStoreTimeoutError when get()/wait() time out (naming
  /// the keys still missing, the timeout and the address). Values are limited
  /// to TDIST_STORE_MAX_FRAME_BYTES (default 256 MiB) per request.
  TCPStore(std::string host_name, const TCPStoreOptions& options);
  /// The spec's positional form: TCPStore(host, port, world_size, is_master,
  /// timeout).
  TCPStore(std::string host_name, uint16_t port, std::optional<int> world_size = std::nullopt,
           bool is_master = false, Duration timeout = kDefaultTimeout, bool wait_for_workers = true,
           bool multi_tenant = false, int master_listen_fd = -1);
  /// Closes the connection; the master also stops its server (unless other
  /// multi-tenant stores share it), and clients still using it get errors.
  ~TCPStore() override;

  void set(const std::string& key, const Bytes& value) override;
  using Store::set;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t amount) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  /// Includes the key the store uses to count its users when world_size is
  /// set, as the spec says ("usually one more").
  int64_t num_keys() override;
  bool delete_key(const std::string& key) override;

  /// The host this store connects to.
  const std::string& host() const { return host_; }
  /// The port the server listens on (the one picked when 0 was asked for).
  uint16_t port() const { return port_; }
  /// The number of users, if fixed.
  std::optional<int> world_size() const { return world_size_; }
  bool is_master() const { return server_ != nullptr; }
  /// On the master: the connections its server holds open for other users
  /// than this store (other processes' stores, and this process's other
  /// stores sharing the server: multi_tenant); 0 once every other user has
  /// closed its store or exited. -1 on a client. A user's store opens
  /// connections as its requests need them, so a live one may hold none for
  /// a moment (after a request of its timed out), and a connection being
  /// opened or closed may be counted on one side only.
  int64_t others_connected() const;

  /// The key every user adds 1 to on joining, when world_size is set.
  static constexpr const char* kInitKey = "init/";

 private:
  void wait_for_all_workers(Duration timeout);

  std::string host_;
  uint16_t port_ = 0;
  std::optional<int> world_size_;
  std::shared_ptr<TCPServer> server_;
  std::unique_ptr<TCPStoreClient> client_;
};

}  // namespace tdist
