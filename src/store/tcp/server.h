#pragma once

/// @file server.h
/// The TCPStore server: one background thread running an epoll event loop
/// over non-blocking sockets. GET, WAIT and WAIT_COUNT that cannot be answered
/// yet are parked as waiters indexed by key and answered when the key is
/// written, so clients never poll. A client that breaks the protocol is
/// disconnected with a warning; everyone else keeps being served.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tdist {

/// How a TCPServer listens and how much it lets one client cost.
struct TCPServerOptions {
  /// Port to listen on; 0 picks a free one (see TCPServer::port()).
  uint16_t port = 0;
  /// Address to bind; empty means every interface, IPv6 and IPv4.
  std::string host;
  /// A socket already bound to `port` to listen on instead of creating one;
  /// the server owns it from then on (also when start() fails). -1: none.
  int listen_fd = -1;
  int backlog = 4096;
  /// Largest frame accepted; 0 means tcpstore::max_frame_bytes_from_env().
  size_t max_frame_bytes = 0;
  /// While more than this many reply bytes of a client are unsent the server
  /// stops reading its requests (back-pressure).
  size_t output_soft_limit = size_t{4} << 20;
  /// A client with more unsent reply bytes than this is disconnected; 0
  /// means max_frame_bytes + 16 MiB, room for one largest reply.
  size_t output_hard_limit = 0;
};

/// Counters of a running server, for tests and tools.
struct TCPServerStats {
  uint64_t connections_accepted = 0;
  uint64_t connections_open = 0;
  uint64_t requests = 0;          ///< requests handled (all commands)
  uint64_t waiters_parked = 0;    ///< GET/WAIT/WAIT_COUNT that had to wait
  uint64_t clients_rejected = 0;  ///< disconnected for breaking the rules
  uint64_t keys = 0;
};

/// A TCPStore server. Construction starts the thread; destruction stops it
/// promptly, closes every connection and joins.
class TCPServer {
 public:
  /// Starts a server; raises DistStoreError if it cannot listen.
  static std::shared_ptr<TCPServer> start(const TCPServerOptions& options);
  /// The multi-tenant form: returns the server this process already runs on
  /// options.port (started by another start_shared() and still alive), or
  /// starts one and registers it. Port 0 always starts a new server.
  static std::shared_ptr<TCPServer> start_shared(const TCPServerOptions& options);

  ~TCPServer();
  TCPServer(const TCPServer&) = delete;
  TCPServer& operator=(const TCPServer&) = delete;

  /// The port the server listens on.
  uint16_t port() const;
  /// A snapshot of the counters.
  TCPServerStats stats() const;

  struct Impl;

 private:
  explicit TCPServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tdist
