#pragma once

// The TCPStore server's internals, shared by its source files:
//   server.cc          listening, the event loop, timers, the public class
//   server_accept.cc   new connections: accepted, held by address, admitted in turn
//   server_io.cc       framing: reading requests, queueing and sending replies
//   server_kv.cc       the key-value core: one request at a time
//   server_waiters.cc  GET / WAIT / WAIT_COUNT that wait for keys
//   server_auth.cc     the token handshake of a new connection
//   server_limits.cc   the memory budget and the timeouts
//   server_peers.cc    connections per peer address and the descriptor reserve
// Everything here runs on the loop thread, except the atomic counters and
// the count of descriptors aside (recount_fds_when_due).

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/auth.h"
#include "common/socket.h"
#include "kv_map.h"
#include "store/tcp/memory_budget.h"
#include "store/tcp/protocol.h"
#include "store/tcp/server.h"

namespace tdist {

using ServerClock = std::chrono::steady_clock;

/// Bound of a frame's length field before a connection has authenticated:
/// the handshake's largest frame, AUTH_PROOF, has 73. A client without the
/// token can make the server buffer no more than this (docs/security.md).
inline constexpr size_t kMaxHandshakeFrameBytes = 256;

/// One reply frame: its own bytes, then (for GET and COMPARE_SET) the stored
/// value it shares with the table instead of copying.
struct OutFrame {
  std::vector<uint8_t> head;
  KvMap::Value body;
  size_t size() const { return head.size() + (body ? body->size() : 0); }
};

struct Connection {
  uint64_t id = 0;
  Socket sock;
  std::vector<uint8_t> in;   // received, not yet parsed
  size_t in_charged = 0;     // bytes of `in` charged to the budget
  size_t in_expected = 0;    // size of `in` once the partial frame at in[0] is whole (reserved in the budget)
  std::deque<OutFrame> out;  // replies not yet sent
  size_t out_offset = 0;     // bytes of out.front() already sent
  size_t out_bytes = 0;      // unsent bytes in all of out (shared values included)
  size_t out_charged = 0;    // unsent bytes of the heads (charged to the budget)
  uint32_t events = 0;       // the epoll mask registered
  bool dead = false;         // closed at the end of this loop turn
  bool dirty = false;        // in the flush list
  bool pending = false;      // whole requests left unprocessed this turn (in `ready`)
  // A rank of the job as far as the server can tell: it proved the token,
  // wrote or deleted a key, or waited for one. Never evicted to make room.
  bool member = false;
  std::string address;                             // the peer's host: the unit of the per-address cap
  std::unordered_map<uint64_t, uint64_t> waiters;  // request id -> waiter id

  // Timers (docs/stores.md, "Limits").
  ServerClock::time_point accepted;
  ServerClock::time_point frame_started;  // first byte of the frame in `in`
  ServerClock::time_point last_sent;      // last progress sending replies
  ServerClock::time_point last_active;    // last request or reply
  bool served = false;                    // completed a first request

  // A frame refused for the memory budget: its remaining bytes are read and
  // dropped, then the error is sent, and the connection goes on.
  uint64_t discard = 0;
  uint64_t discard_id = 0;
  std::string discard_why;

  // A large SET's value, read straight into the buffer that becomes the
  // stored value: no 200 MiB copy when it is stored, no regrowth while it
  // arrives. value_expected == 0: none on its way.
  Bytes value_in;
  size_t value_expected = 0;
  size_t value_charged = 0;  // reserved in the budget when its header came
  uint64_t value_id = 0;
  std::string value_key;

  // The handshake, when the server has a token.
  enum class Auth { kOpen, kExpectBegin, kExpectProof };
  Auth auth = Auth::kOpen;
  auth::Nonce server_nonce{};
};

struct Waiter {
  uint64_t connection = 0;
  uint64_t request = 0;
  tcpstore::Command command = tcpstore::Command::kGet;
  std::vector<std::string> keys;  // distinct; GET / WAIT_COUNT: one key
  size_t missing = 0;             // WAIT: how many of `keys` are absent
  int64_t target = 0;             // WAIT_COUNT
  size_t charged = 0;             // bytes charged to the budget
};

/// The waiters of one key. Most keys have one: it is held inline, so a WAIT
/// of 100,000 keys does not make 100,000 vectors.
struct WatchList {
  uint64_t first = 0;  // 0: empty (waiter ids start at 1)
  std::vector<uint64_t> rest;

  bool empty() const { return first == 0; }
  uint64_t back() const { return rest.empty() ? first : rest.back(); }
  void push(uint64_t id) {
    if (first == 0) {
      first = id;
    } else {
      rest.push_back(id);
    }
  }
  /// Removes `id` (order is not kept); O(waiters of the key).
  void remove(uint64_t id);
  /// Every id, leaving the list empty.
  std::vector<uint64_t> take();
};

struct TCPServer::Impl {
  explicit Impl(const TCPServerOptions& opts);
  ~Impl();

  // server.cc
  void open();
  void listen_everywhere_or_on_host();
  void run();
  void loop_once(epoll_event* events, int count);
  void serve_ready();
  void flush_dirty();
  /// Closes sockets of connections that went, at most kMaxClosesPerTurn
  /// in all per turn.
  void close_some();
  void close_now(Socket& sock);
  void check_timers();
  std::chrono::milliseconds tick() const;
  Connection* find(uint64_t id);

  // server_accept.cc
  /// Takes connections from the kernel's queue into `pending`, briefly.
  void accept_all(const Socket& listener);
  /// Admits pending connections, one address at a time, briefly.
  void admit_pending();
  void add_connection(Socket sock, std::string address);
  void shed_one_connection(const Socket& listener);
  void make_room_for_handshake();

  // server_peers.cc
  /// Whether a connection just accepted from `address` may stay; refuses it
  /// (error frame, close) if not. May evict another address's connection
  /// to keep the descriptor reserve.
  bool admit(Socket& sock, const std::string& address);
  void count_in(Connection& conn);
  void count_out(Connection& conn);
  void make_member(Connection& conn);
  /// Descriptors of ours: connections, those closing, those accepted and not yet admitted.
  size_t our_fds() const { return connections.size() + closing.size() + pending.count; }
  size_t fds_in_use() const { return fd_baseline + our_fds(); }
  /// Fewer than the reserve left after `more` descriptors.
  bool short_of_fds(size_t more = 0) const;
  void note_fd(int fd);
  void read_fd_limit();
  void take_fd_count(size_t open, size_t ours);
  void recount_fds();
  /// Every second: /proc/self/fd counted, on a thread aside when many are ours.
  void recount_fds_when_due();
  void grow_fd_table() const;
  /// Closes a non-member connection (the oldest idle one it finds soon, else
  /// the oldest) of the largest address holding more than `above`
  /// connections that has one; false if there is none.
  bool evict_one(size_t above, const std::string& why);
  /// Under descriptor pressure: closes non-member connections idle for a
  /// second, the largest addresses' first, until the reserve is back.
  void close_idle_under_pressure();

  // server_io.cc
  void on_connection_event(uint64_t id, uint32_t events);
  void read_from(Connection& conn);
  void process_input(Connection& conn);
  bool refuse_for_budget(Connection& conn, size_t pos);
  /// The largest frame `conn` may send now: the handshake's bound until it
  /// has authenticated, max_frame_bytes after.
  size_t frame_limit(const Connection& conn) const;
  void refuse_before_handshake(Connection& conn, uint64_t announced, const uint64_t* request_id);
  void charge_input(Connection& conn);
  /// The partial frame at in[0] is a SET with a large value: reads the
  /// value from now on straight into conn.value_in.
  void start_streaming_value(Connection& conn);
  void finish_streamed_value(Connection& conn);
  void flush(Connection& conn);
  void update_interest(Connection& conn);
  void enqueue(Connection& conn, std::vector<uint8_t> frame, KvMap::Value body = nullptr);
  void reject(Connection& conn, const std::string& why, const uint64_t* request_id);
  /// Drops a client that does not read its replies with a reset, so the
  /// kernel frees what it still buffers for it too.
  void drop_non_reader(Connection& conn, const std::string& why);
  void mark_dead(Connection& conn);
  void reap();

  // server_kv.cc
  void handle(Connection& conn, const tcpstore::FrameView& frame);
  void handle_request(Connection& conn, tcpstore::Request& request, size_t frame_bytes);
  void set(const std::string& key, Bytes value);
  void add(Connection& conn, const tcpstore::Request& request);
  void compare_set(Connection& conn, const tcpstore::Request& request);
  void erase(Connection& conn, const tcpstore::Request& request);
  size_t storage_growth(const tcpstore::Request& request) const;
  bool refuse_for_budget(Connection& conn, const tcpstore::Request& request, size_t frame_bytes);
  bool all_exist(const std::vector<std::string>& keys) const;
  void key_created(const std::string& key);

  // server_waiters.cc
  void start_waiting(Connection& conn, tcpstore::Request& request);
  bool ready(const Waiter& waiter) const;
  void answer(const Waiter& waiter);
  void park(Connection& conn, Waiter waiter);
  void written(const std::string& key, bool created);
  void deleted(const std::string& key);
  void remove_waiter(uint64_t waiter_id);
  void cancel(Connection& conn, const tcpstore::Request& request);

  // server_auth.cc
  /// Handles a request of a connection that has not proved the token yet
  /// (and AUTH_* of any connection); false if the request is not one of
  /// these and may be served.
  bool authenticate(Connection& conn, const tcpstore::Request& request);

  std::string where() const { return "TCPStore server on port " + std::to_string(port); }

  TCPServerOptions options;
  MemoryBudget budget;  // before everything charged to it
  std::vector<Socket> listeners;
  int epoll_fd = -1;
  int wake_fd = -1;
  int spare_fd = -1;  // /dev/null, given up to accept() once when out of fds
  uint16_t port = 0;
  std::thread thread;
  std::atomic<bool> stopping{false};

  // Owned by the loop thread.
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections;
  uint64_t next_connection_id = 0;
  std::vector<uint64_t> dirty;
  std::vector<uint64_t> dead;
  std::vector<uint8_t> scratch;
  KvMap table;
  std::unordered_map<uint64_t, Waiter> waiters;
  // key -> the waiters that hold it (WAIT: all its keys, present or not).
  std::unordered_map<std::string, WatchList> watchers;
  // With a token: the connections still in the handshake, oldest (lowest
  // id) first, at most options.max_unauthenticated.
  std::set<uint64_t> unauthenticated;
  // Connections accepted and not yet admitted, by peer address
  // (server_accept.cc); the addresses in the order they are admitted from.
  struct Pending {
    std::unordered_map<std::string, std::deque<Socket>> by_address;
    std::deque<std::string> turn;
    size_t count = 0;
  };
  Pending pending;
  // Connections with requests left over from their last turn.
  std::vector<uint64_t> ready_list;
  uint64_t next_waiter_id = 1;
  uint64_t fd_exhaustion_warnings = 0;

  // Peer addresses (server_peers.cc): how many connections each holds, and
  // its non-member connections (oldest first), the ones that may be
  // evicted when descriptors run short.
  struct Peer {
    size_t open = 0;
    std::set<uint64_t> evictable;
    uint64_t refused = 0;
  };
  std::unordered_map<std::string, Peer> peers;
  std::set<std::pair<size_t, std::string>> peers_by_open;  // (open, address)
  size_t fd_limit = 0;                                     // RLIMIT_NOFILE's soft limit (0: unlimited)
  size_t fd_reserve = 0;         // descriptors kept for other addresses and the ranks
  size_t fd_baseline = 0;        // descriptors of the process that are not our connections
  std::future<size_t> fd_count;  // /proc/self/fd being counted aside (recount_fds_when_due)
  size_t fd_count_ours = 0;      // our connections when that count started
  ServerClock::time_point next_fd_recount;
  // Sockets of connections that went, closed a batch per turn.
  std::deque<Socket> closing;
  uint64_t closed_this_turn = 0;
  // More timers passed than one check drops: the next turn checks again.
  bool timers_behind = false;
  ServerClock::time_point next_timer_check;

  std::atomic<uint64_t> stat_accepted{0};
  std::atomic<uint64_t> stat_open{0};
  std::atomic<uint64_t> stat_requests{0};
  std::atomic<uint64_t> stat_parked{0};
  std::atomic<uint64_t> stat_rejected{0};
  std::atomic<uint64_t> stat_keys{0};
  std::atomic<uint64_t> stat_budget_refusals{0};
  std::atomic<uint64_t> stat_timeouts{0};
  std::atomic<uint64_t> stat_auth_refusals{0};
  std::atomic<uint64_t> stat_longest_turn_us{0};
  std::atomic<uint64_t> stat_refused{0};
  std::atomic<uint64_t> stat_evicted{0};
  std::atomic<uint64_t> stat_most_closed{0};
};

}  // namespace tdist
