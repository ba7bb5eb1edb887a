#pragma once

/// @file server.h
/// The TCPStore server: one background thread running an epoll event loop
/// over non-blocking sockets. GET, WAIT and WAIT_COUNT that cannot be answered
/// yet are parked as waiters indexed by key and answered when the key is
/// written, so clients never poll. A client that breaks the protocol is
/// disconnected with a warning; everyone else keeps being served.
///
/// No client can stall or exhaust it (docs/security.md, "The store"): every
/// request costs time linear in its size, keys + values + waiters + buffered
/// frames share one memory budget, partial frames and silent new
/// connections time out, and a reply to a GET shares the stored value instead
/// of copying it. One peer address may hold a bounded number of connections,
/// and descriptors are kept in reserve so that one address cannot lock the
/// others out. With a token, every connection must pass the handshake of
/// src/common/auth.h before anything else.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tdist {

/// How a TCPServer listens and how much it lets one client cost.
struct TCPServerOptions {
  /// Port to listen on; 0 picks a free one (see TCPServer::port()).
  uint16_t port = 0;
  /// Address to listen on: every address `host` resolves to (so "localhost"
  /// serves both ::1 and 127.0.0.1). Empty, "0.0.0.0" or "::" mean every
  /// interface ("::" and "" dual-stack, IPv6 and IPv4).
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
  /// Memory for keys, values, parked waiters and buffered frames together;
  /// a request that would pass it gets an error and nothing else changes.
  /// 0 means memory_budget_from_env().
  size_t memory_budget = 0;
  /// A frame must arrive whole within this of its first byte; a slower one
  /// is dropped with its connection (it pinned memory meanwhile).
  std::chrono::milliseconds frame_timeout{60000};
  /// A new connection must complete its first request (with a token: the
  /// handshake) within this.
  std::chrono::milliseconds first_request_timeout{30000};
  /// A connection with replies pending that takes none of them for this
  /// long is dropped.
  std::chrono::milliseconds send_timeout{60000};
  /// Drop a connection with nothing pending after this long; 0 (the
  /// default): never, as ranks keep their connection idle for hours between
  /// rendezvous and the end of training.
  std::chrono::milliseconds idle_timeout{0};
  /// The job's secret: when set, every connection must prove it holds it
  /// (auth.h's handshake) before any request is served.
  std::optional<std::string> auth_token;
  /// With a token: how many connections may be in the handshake at once. A
  /// new connection past it closes the oldest of them, so clients without
  /// the token can neither lock the job's clients out nor hold more than
  /// this many handshake frames (256 bytes each) of memory.
  size_t max_unauthenticated = 1024;
  /// How many connections one peer address may hold open; a new one past it
  /// is refused with an error frame naming the address and the limit. 0
  /// means max_connections_per_address_from_env(). Whatever the cap, when
  /// the process nears RLIMIT_NOFILE the server keeps descriptors in reserve
  /// for other addresses (docs/stores.md, "Limits").
  size_t max_connections_per_address = 0;
};

/// Default of TCPServerOptions::max_connections_per_address: far above the
/// ranks a host runs (or a NAT gateway fronts), far below a descriptor limit
/// of tens of thousands.
inline constexpr size_t kDefaultMaxConnectionsPerAddress = 1024;
/// TDIST_STORE_MAX_CONNECTIONS_PER_ADDRESS if set (1 to 2^20), else
/// kDefaultMaxConnectionsPerAddress; raises DistInvalidArgument otherwise.
size_t max_connections_per_address_from_env();
/// The most sockets the server closes in one event-loop turn (beyond the
/// ones it closes to admit a new client): 19,000 clients leaving at once cost
/// every other client one batch per turn, not one long turn.
inline constexpr uint64_t kMaxClosesPerTurn = 128;

/// Default of TCPServerOptions::memory_budget: 1 GiB.
inline constexpr size_t kDefaultStoreMemoryBudget = size_t{1} << 30;
/// TDIST_STORE_MEMORY_BYTES if set (1 MiB to 2^50), else
/// kDefaultStoreMemoryBudget; raises DistInvalidArgument otherwise.
size_t memory_budget_from_env();

/// Counters of a running server, for tests and tools.
struct TCPServerStats {
  uint64_t connections_accepted = 0;
  uint64_t connections_open = 0;
  uint64_t requests = 0;          ///< requests handled (all commands)
  uint64_t waiters_parked = 0;    ///< GET/WAIT/WAIT_COUNT that had to wait
  uint64_t clients_rejected = 0;  ///< disconnected for breaking the rules
  uint64_t keys = 0;
  uint64_t memory_used = 0;            ///< bytes charged to the memory budget now
  uint64_t memory_budget = 0;          ///< the budget in force
  uint64_t budget_refusals = 0;        ///< requests refused for the budget
  uint64_t timeouts = 0;               ///< connections dropped by a timeout
  uint64_t auth_refusals = 0;          ///< connections refused by authentication
  uint64_t longest_turn_us = 0;        ///< CPU time of the longest event-loop turn so far:
                                       ///< what one client's requests delay the others by
  uint64_t memory_peak = 0;            ///< the most ever charged to the memory budget at once
  uint64_t connections_refused = 0;    ///< refused on arrival: per-address cap or short of descriptors
  uint64_t connections_evicted = 0;    ///< closed to make room for other addresses' clients
  uint64_t most_closed_in_a_turn = 0;  ///< sockets closed in the busiest loop turn
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
  /// The addresses it listens on ("127.0.0.1:29500", "[::]:29500").
  std::vector<std::string> listen_addresses() const;
  /// A snapshot of the counters.
  TCPServerStats stats() const;

  struct Impl;

 private:
  explicit TCPServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tdist
