#pragma once

/// @file client.h
/// The TCPStore client: blocking connections to a TCPServer. One client is
/// usable from many threads: each call takes an idle connection from a small
/// pool (opening another when all are busy), so a thread parked in get() or
/// wait() never blocks the others, nor the set() that would wake it. Every
/// request carries an id that the reply echoes; replies to requests the
/// client already gave up on are discarded. A GET or WAIT that times out is
/// cancelled on the server (CANCEL_WAIT) before DistStoreTimeoutError is
/// raised.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/socket.h"
#include "store/tcp/protocol.h"
#include "tdist/store.h"

namespace tdist {

class TCPStoreClient {
 public:
  using Duration = std::chrono::milliseconds;

  /// Connects to host:port, retrying with backoff until `connect_timeout`
  /// (DistStoreTimeoutError naming host, port and the time waited), and
  /// checks that the peer speaks this protocol version. With a `token`,
  /// every connection first runs the handshake of src/common/auth.h and
  /// refuses a server that cannot prove it holds the same token (also one
  /// that does not authenticate at all); DistStoreError says which.
  TCPStoreClient(std::string host, uint16_t port, Duration connect_timeout,
                 std::optional<std::string> token = std::nullopt);
  ~TCPStoreClient();
  TCPStoreClient(const TCPStoreClient&) = delete;
  TCPStoreClient& operator=(const TCPStoreClient&) = delete;

  /// The store operations; `timeout` bounds the whole call. Raise
  /// DistStoreTimeoutError at the timeout and DistStoreError if the server
  /// answers with an error or the connection is lost.
  void set(const std::string& key, const Bytes& value, Duration timeout);
  Bytes get(const std::string& key, Duration timeout);
  int64_t add(const std::string& key, int64_t amount, Duration timeout);
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired, Duration timeout);
  bool check(const std::vector<std::string>& keys, Duration timeout);
  void wait(const std::vector<std::string>& keys, Duration timeout);
  int64_t num_keys(Duration timeout);
  bool delete_key(const std::string& key, Duration timeout);
  void ping(Duration timeout);

  /// Waits until the counter `key` reaches `target`. Returns true then;
  /// false at the timeout, with the counter's value at that moment in
  /// *count (0 if it does not exist).
  bool wait_count(const std::string& key, int64_t target, Duration timeout, int64_t* count);

  /// "host:port" of the server.
  const std::string& address() const { return address_; }
  /// Requests sent so far (a waiting GET is one request: no polling).
  uint64_t requests_sent() const { return requests_sent_.load(); }
  /// Connections this client holds open now, idle or in use.
  int open_connections() const { return open_.load(); }

 private:
  struct Reply {
    tcpstore::Status status = tcpstore::Status::kOk;
    std::vector<uint8_t> frame;  // the whole frame
    tcpstore::PayloadReader payload() const;
  };
  struct Outcome {
    bool timed_out = false;
    Reply reply;
    std::vector<std::string> missing;  // after a cancelled wait
    int64_t count = 0;                 // after a cancelled WAIT_COUNT
  };

  /// One connection (made once connected, as the server counts it) and its
  /// request-id counter; counted in `open` while it lives.
  struct Connection {
    Connection(std::atomic<int>& counter, Socket connected) : socket(std::move(connected)), open(counter) {
      open.fetch_add(1);
    }
    ~Connection() { open.fetch_sub(1); }
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;
    Socket socket;
    uint64_t next_id = 0;
    std::atomic<int>& open;
  };

  /// A new connection, authenticated when there is a token.
  std::unique_ptr<Connection> open_connection(Deadline deadline);
  void authenticate(Connection& c, Deadline deadline);
  /// One request and its reply on a fresh connection, for the handshake.
  Reply exchange(Connection& c, const tcpstore::Request& request, Deadline deadline);
  /// An idle connection, or a new one when all are busy.
  std::unique_ptr<Connection> acquire(Deadline deadline);
  void release(std::unique_ptr<Connection> connection);

  /// Sends one request and waits for its reply until the timeout; a
  /// waiting request (GET, WAIT, WAIT_COUNT) is cancelled at the timeout and
  /// reported as timed out. Raises on lost connections and error replies.
  Outcome call(tcpstore::Request request, Duration timeout, const std::string& op);
  /// Reads one whole frame; raises DistNetworkError on EOF or garbage.
  Reply read_frame(Connection& c, Deadline deadline, uint64_t* id);
  /// Reads frames until the one with `id` or the deadline (false).
  bool read_reply(Connection& c, uint64_t id, Deadline deadline, Duration timeout, Reply* reply);
  [[noreturn]] void fail(const std::string& op, const std::string& why);

  std::string host_;
  uint16_t port_;
  std::string address_;
  size_t max_frame_bytes_;
  std::optional<std::string> token_;
  std::atomic<int> open_{0};  // declared before idle_: outlives the connections
  std::mutex mutex_;          // guards idle_ and broken_
  std::vector<std::unique_ptr<Connection>> idle_;
  std::string broken_;  // why the server can no longer be used
  std::atomic<uint64_t> requests_sent_{0};
};

}  // namespace tdist
