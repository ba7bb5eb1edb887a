#pragma once

// The TCP transport: one connection per pair of ranks, non-blocking sockets.
// Messages are a 48-byte header (tag, size, the call's 32-byte signature)
// and the payload, written with sendmsg straight from the sender's buffer
// and read straight into the posted receive's buffer when one is waiting,
// so large messages cross without extra copies.
//
// Who moves the bytes: a thread that waits for a request through wait()
// becomes the transport's driver and polls the sockets itself, so a message
// reaches its waiter with no hand-off between threads (the hand-off, two
// futex wake-ups per message, used to cost more than the message itself on
// loopback). One driver at a time; it keeps the role to the end of its
// collective call (CallScope), or to the end of its wait outside a call (a
// point-to-point work's wait drives too). The loop thread makes progress
// when nobody drives: asynchronous sends and receives, and watching for dead
// peers while shared-memory collectives wait. It sleeps in epoll_wait on
// what update_polling says: hang-ups always, data only while nobody drives
// and something is to be read. So a message a driver reads wakes nobody
// else, and a loop of collectives costs the loop thread no wake-ups.

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/scratch.h"
#include "common/socket.h"
#include "common/spin_wait.h"
#include "tdist/store.h"
#include "transport/transport.h"
#include "transport/unexpected_messages.h"

namespace tdist::transport {

/// How a TCP transport finds and reaches its peers.
struct TcpOptions {
  /// Bound on connection setup.
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  /// The timeout a failed setup's message names, when `timeout` is what is
  /// left of a longer one the user set (a group's, part of which its
  /// rendezvous took); unset: `timeout`.
  std::optional<std::chrono::milliseconds> timeout_in_messages;
  /// Network interfaces to use, a comma-separated list (each gets a
  /// listener; a pair's connections are spread over the accepting rank's
  /// list); empty: TDIST_SOCKET_IFNAME, then GLOO_SOCKET_IFNAME, then the
  /// interface that reaches `reach_host`.
  std::string ifname;
  /// A host every rank can reach (the TCPStore master); the local address
  /// used to reach it is the one advertised. Empty: loopback.
  std::string reach_host;
  /// Connections per pair of ranks; messages of tcp::kStripeMinBytes or more
  /// (tcp::kMultiInterfaceStripeMinBytes when the accepting rank listens on
  /// several interfaces) are cut into one stripe per connection. 0:
  /// TDIST_TCP_SOCKETS, else kDefaultSocketsPerPeer. The rank that connects
  /// decides for its pair.
  int sockets_per_peer = 0;
  /// The job's shared secret: when there is one, every connection proves
  /// it both ways (tcp_handshake.h), and a peer without it is refused.
  /// nullopt: auth::token_from_env() (TDIST_AUTH_TOKEN, else
  /// TDIST_AUTH_TOKEN_FILE); an empty string: none.
  std::optional<std::string> token;
  /// A peer that dies breaks the whole group (every pending and later
  /// operation fails, naming it), as collectives need. false: only what
  /// involves that peer fails, and the others go on talking (RPC).
  bool crash_breaks_group = true;
  /// How long the event-loop thread polls its sockets without sleeping
  /// before it waits in epoll: 0 for groups (their callers drive the
  /// sockets themselves while they wait), more for RPC, whose every
  /// message the loop thread takes (src/rpc/rpc_spin.h).
  std::chrono::microseconds loop_spin{0};
  /// Called on the connecting thread at least every 100 ms while
  /// connect_tcp waits for its peers (to accept their connections, or
  /// between attempts to reach one that refuses); may throw, which gives
  /// the connect up with that exception. A group uses it to leave a
  /// generation that a later one has superseded (ProcessGroupTdist::
  /// connect_generation). Empty: none.
  std::function<void()> while_waiting;
};

/// Measured on loopback, 2 ranks on 2 cores, 2026-11-23: a 64 MiB
/// all_reduce took 37.5-43.6 ms over 4 connections per pair, 45.5-55.0 ms
/// over one (three runs each).
inline constexpr int kDefaultSocketsPerPeer = 4;
inline constexpr int kMaxSocketsPerPeer = 16;

/// Publishes this rank's address and a fresh identity in `store` (keys
/// "tcp/addr/<rank>"), connects to every other rank and returns the
/// transport. A connection that is not from a rank of this generation of the
/// group (another job, an earlier generation, a wrong or duplicate rank, a
/// wrong or missing token) is refused and named in a warning, and the wait
/// for the real rank goes on. Raises DistNetworkError naming the rank it could
/// not reach, or that refused this rank or could not prove the token.
std::unique_ptr<Transport> connect_tcp(Store& store, int rank, int size, const TcpOptions& options);

/// The addresses this rank listens on and advertises, one per listed
/// interface in the list's order, following TcpOptions' rules. Raises
/// DistInvalidArgument naming an unknown interface (and listing the host's)
/// or an empty name in the list.
std::vector<std::string> choose_tcp_addresses(const TcpOptions& options);
/// The first of them.
std::string choose_tcp_address(const TcpOptions& options);

namespace tcp {

struct Header {
  uint64_t tag;
  uint64_t size;
  // What the sender passed to the call the message belongs to: a receive
  // with a signature accepts only the same (transport.h).
  tdist::detail::CallSignature sig;
};
static_assert(sizeof(Header) == 48, "the header's size is part of the wire format (and of the comments)");

// A receive posted before its message arrived.
struct RecvOp {
  int src;
  uint64_t tag;
  void* data;
  size_t capacity;
  std::shared_ptr<std::vector<uint8_t>> bytes;  // set for irecv_bytes
  RequestPtr request;
  tdist::detail::CallSignature sig{};  // empty: accepts any message
};

// A message that arrived (or is arriving) before its receive was posted.
struct Incoming {
  int src;
  uint64_t tag;
  detail::Scratch data;  // recycled: see common/scratch.h
  size_t size = 0;
  bool complete = false;
  std::optional<RecvOp> claimed;       // a receive posted while it was arriving
  tdist::detail::CallSignature sig{};  // the sender's, from the header
};

// Messages this large or larger travel in stripes, one per connection of
// the pair: the header and stripe 0 on the first, stripe i on connection i.
constexpr size_t kStripeMinBytes = size_t{1} << 20;

// The same for a pair whose connections reach the accepting rank over
// several interfaces: a message that is not striped travels on the first
// connection only, so one interface would carry every message below the
// threshold while the others idle. The hierarchical collectives' messages
// across hosts are 512 KiB at their default chunk (2 MiB, split over the
// host's ranks and then halved by a two-host exchange). With two NICs of
// 5 Gbit/s per host, 2 hosts x 2 ranks, a 64 MiB all_reduce sent all its
// bytes through the first NIC at the 1 MiB threshold (3/4 of them at 8 MiB
// chunks), and half through each at this one (115 ms -> 82 ms).
constexpr size_t kMultiInterfaceStripeMinBytes = size_t{64} << 10;

/// The stripe threshold of a pair whose accepting rank listens on
/// `interfaces` interfaces (both ends know it: the accepting rank its own
/// count, the connecting one the advertisement's).
size_t stripe_min_bytes(size_t interfaces);

/// Where stripe i of a message of `size` bytes cut into `parts` begins
/// (i == parts: the end); stripes start on 4 KiB boundaries.
size_t stripe_begin(size_t size, int parts, int i);

// A striped send: done when every connection has written its stripe.
struct StripedSend {
  RequestPtr request;
  size_t size;
  int parts_left;
};

struct SendOp {
  RequestPtr request;
  Header header;
  const uint8_t* data;
  size_t size;                           // payload bytes on this connection
  size_t sent = 0;                       // counts header bytes first, then payload
  std::shared_ptr<StripedSend> striped;  // set for the stripes of one message
  bool raw = false;                      // a stripe: no header
  size_t header_bytes() const { return raw ? 0 : sizeof(Header); }
};

// An extra connection to a peer: it carries only stripes, in message order.
struct Lane {
  Socket socket;
  std::deque<SendOp> sends;
  // The stripe of the pair's current message still to read here.
  bool expecting = false;
  size_t offset = 0;
  size_t length = 0;
  size_t got = 0;
  uint32_t polling = 0;  // events registered with epoll
};

// Bytes read from a socket at a time into a pair's stage (headers, small
// payloads): one system call brings in several small messages.
constexpr size_t kStageBytes = 4096;

// One peer: its socket, queued sends and the state of the message being read.
struct Pair {
  int peer = -1;
  Socket socket;
  std::string address;
  bool closed = false;        // no more traffic either way
  bool said_goodbye = false;  // closed on purpose, not crashed
  bool crashed = false;       // closed without a goodbye (peer_crashed)
  std::exception_ptr error;   // why it closed
  std::deque<SendOp> sends;
  uint32_t polling = 0;                 // events registered with epoll
  std::vector<Lane> lanes;              // connections 1.. (see kStripeMinBytes)
  size_t stripe_min = kStripeMinBytes;  // messages this large or larger are striped over them
  // Reading.
  Header header{};
  tdist::detail::CallSignature last_call{};  // of the newest collective message read (last_call_from)
  std::optional<uint64_t> waiting_in;        // the newest call it said it waits in (announce_waiting)
  size_t header_got = 0;
  bool in_payload = false;
  size_t payload_got = 0;
  uint8_t* target = nullptr;
  std::optional<RecvOp> direct;            // filling a posted receive
  std::list<Incoming>::iterator incoming;  // or an unexpected message
  bool to_incoming = false;
  std::vector<uint8_t> overflow;  // a message too big for its receive
  bool reading_abort = false;     // the payload is a peer's abort notice
  bool reading_reject = false;    // ... its refusal of a message of ours
  std::vector<uint8_t> stage;     // kStageBytes
  size_t staged_off = 0;          // stage bytes read but not consumed yet
  size_t staged_len = 0;
  size_t payload_end = 0;      // payload bytes this connection carries
  int stripes_left = 0;        // lanes still reading the current message
  bool waiting_lanes = false;  // this connection is done with it; they are not
  // A point-to-point message of ours went out since this connection's
  // frames were last looked at: the user's next point-to-point call looks
  // whether a refusal of it is the next frame (take_rejection).
  bool watch_for_refusal = false;

  /// Something is queued to write, on any connection.
  bool sending() const {
    return !sends.empty() ||
           std::any_of(lanes.begin(), lanes.end(), [](const Lane& l) { return !l.sends.empty(); });
  }
  /// Drops the state of the message being read (not the stage's bytes).
  void forget_message() {
    in_payload = false;
    header_got = 0;
    waiting_lanes = false;
    stripes_left = 0;
    for (auto& lane : lanes) lane.expecting = false;
  }
};

}  // namespace tcp

class TcpTransport final : public Transport {
 public:
  /// sockets[peer]: the connections to `peer` (the first carries headers);
  /// interfaces[peer]: how many interfaces the accepting rank of the pair
  /// listens on (tcp::stripe_min_bytes); empty: one each.
  /// crash_breaks_group, loop_spin: TcpOptions's.
  TcpTransport(int rank, int size, std::vector<std::vector<Socket>> sockets,
               std::vector<std::string> addresses, const std::vector<size_t>& interfaces = {},
               bool crash_breaks_group = true, std::chrono::microseconds loop_spin = {});
  ~TcpTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "tcp"; }
  using Transport::irecv;
  using Transport::isend;
  RequestPtr isend(int dst, uint64_t tag, const void* data, size_t nbytes,
                   const tdist::detail::CallSignature& sig) override;
  RequestPtr irecv(int src, uint64_t tag, void* data, size_t nbytes,
                   const tdist::detail::CallSignature& sig) override;
  std::optional<std::pair<int, tdist::detail::CallSignature>> conflicting_message(
      const tdist::detail::CallSignature& mine) const override;
  void isend_into(const RequestPtr& request, const void* data,
                  const tdist::detail::CallSignature& sig) override;
  void irecv_into(const RequestPtr& request, void* data, const tdist::detail::CallSignature& sig) override;
  RequestPtr irecv_bytes(int src, uint64_t tag, std::shared_ptr<std::vector<uint8_t>> out) override;
  bool wait(const RequestPtr& request, Clock::time_point deadline) override;
  void begin_call() override;
  void end_call() override;
  void abort(std::exception_ptr error) override;
  /// Turned on, a peer that crashed meanwhile breaks the group at once.
  void set_crash_breaks_group(bool breaks) override;
  std::exception_ptr abort_reason() const override;
  bool aborted_by_peer() const override;
  bool peer_failed(int peer) const override;
  bool peer_crashed(int peer) const override;
  std::exception_ptr take_rejection() override;
  std::optional<tdist::detail::CallSignature> last_call_from(int peer) const override;
  void announce_waiting(const tdist::detail::CallSignature& sig) override;
  bool tells_waiting() const override { return true; }
  void take_in() override;
  std::optional<uint64_t> waiting_in(int peer) const override;

 private:
  // Completions found under the lock are queued and delivered by flush()
  // after it is released, so callbacks can post operations.
  struct Completion {
    RequestPtr request;
    int source;
    size_t bytes;
    std::exception_ptr error;
    void deliver() const;  // complete or fail the request (runs its callbacks)
  };
  void completed(const RequestPtr& request, int source, size_t bytes);
  void failed(const RequestPtr& request, std::exception_ptr error);
  void flush();

  RequestPtr post_recv(tcp::RecvOp op);
  void match_recv(tcp::RecvOp op);
  void post_send(const RequestPtr& request, int dst, uint64_t tag, const uint8_t* data, size_t nbytes,
                 const tdist::detail::CallSignature& sig);
  void abort_locked(const std::exception_ptr& error);
  /// True if any send or receive is still pending (mutex_ held).
  bool pending_locked() const;
  void break_locked(std::exception_ptr error);
  void notify_abort(const std::exception_ptr& error);
  void deliver_local(int src, uint64_t tag, const uint8_t* data, size_t size,
                     const tdist::detail::CallSignature& sig);
  void finish_into(tcp::RecvOp& op, int src, const uint8_t* data, size_t size,
                   const tdist::detail::CallSignature& sig);
  // Fails `op`, whose message from `src` had signature `theirs`, and tells
  // a point-to-point sender why (a reject notice: its next send or recv
  // raises it).
  void refuse_locked(tcp::RecvOp& op, int src, const tdist::detail::CallSignature& theirs);
  void write_some(tcp::Pair& pair) { write_queue(pair, pair.socket, pair.sends); }
  void write_queue(tcp::Pair& pair, const Socket& socket, std::deque<tcp::SendOp>& sends);
  void sent_part(const tcp::SendOp& op);
  void read_lane(tcp::Pair& pair, tcp::Lane& lane);
  void lane_finished(tcp::Pair& pair);
  void connection_failed(tcp::Pair& pair, const std::string& why);
  /// keep_open: shut the write side only (abort_locked), closing with the transport.
  void close_lanes(tcp::Pair& pair, const std::exception_ptr& error, bool keep_open = false);
  void handle_event(uint64_t id, bool readable, bool writable, bool hangup);
  void set_polling(int fd, uint64_t id, uint32_t& current, uint32_t want);
  void update_polling(tcp::Pair& pair);
  void update_all_polling_locked();
  bool loop_reads_locked(const tcp::Pair& pair) const;
  // The next frame waiting in the socket is one of the transport's notices
  // (a refusal, an abort, a goodbye, a peer waiting in a call), or the
  // stream ended: seen without consuming anything.
  bool next_is_notice(const tcp::Pair& pair) const;
  void read_arrived_refusals_locked();
  void read_some(tcp::Pair& pair, size_t budget);
  void advance(tcp::Pair& pair, size_t n);  // n more bytes read into the header or the payload
  void consume_staged(tcp::Pair& pair);     // the unconsumed bytes of the stage
  void start_payload(tcp::Pair& pair);
  void finish_payload(tcp::Pair& pair);
  void close_pair(tcp::Pair& pair, const std::exception_ptr& error, bool crashed);
  std::exception_ptr closed_error(const tcp::Pair& pair, const char* what) const;
  void loop();
  // Driving (see the top of the file).
  bool claim_driver_locked();
  void build_poll_set_locked();  // poll_fds_/poll_ids_ for every open connection, and the driver's wake fd
  void handle_polled_locked();   // after ppoll on that set
  void begin_stripes(tcp::Pair& pair);  // the header of a message just arrived
  void claim_for_call_locked();
  void release_driver();
  void run_driver_callbacks();
  void drive(const Request& request, Clock::time_point deadline);
  bool is_driver_locked() const {
    return driver_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }
  void wake_loop_locked() const;
  void wake_driver() const;
  void wake_driver_if_polling();  // not from the driver itself
  void interrupt_loop() const;    // wakes the loop thread out of epoll_wait
  bool loop_should_park_locked() const;

  const int rank_;
  const int size_;
  mutable std::mutex mutex_;      // guards everything below
  std::exception_ptr rejection_;  // take_rejection()

  std::vector<tcp::Pair> pairs_;
  std::list<tcp::RecvOp> posted_;
  UnexpectedMessages<tcp::Incoming> unexpected_;
  std::exception_ptr aborted_;
  bool aborted_by_peer_ = false;  // aborted_ is a peer's abort notice; guarded by mutex_
  std::vector<Completion> completions_;
  bool sweeping_ = false;                      // close_pair is reading the other connections
  bool broken_by_crash_ = false;               // a peer died without saying goodbye
  bool crash_breaks_group_;                    // TcpOptions::crash_breaks_group; guarded by mutex_
  const std::chrono::microseconds loop_spin_;  // TcpOptions::loop_spin
  detail::SpinGauge loop_gauge_;               // how long the loop has lately waited for events
  std::condition_variable closed_cv_;          // a pair closed
  // The thread holding the driver role, if any. Written under mutex_;
  // atomic so that a thread can see without the lock that it is not the
  // driver (only a thread itself makes it its own id).
  std::atomic<std::thread::id> driver_;
  bool driving_now_ = false;                  // ... and polling the sockets right now
  std::vector<Completion> deferred_;          // completions with callbacks, for the loop thread
  std::vector<Completion> driver_callbacks_;  // ... for a driver outside any call, once it lets go
  bool loop_parked_ = false;
  bool loop_yielded_ = false;   // the loop saw events a driver was reading; it parks until the driver lets go
  mutable bool watch_ = false;  // the loop thread keeps reading even when nothing is pending
  mutable std::condition_variable loop_cv_;
  std::vector<pollfd> poll_fds_;      // the driver's, rebuilt on each round
  std::vector<pollfd> refusal_poll_;  // read_arrived_refusals_locked's
  std::vector<uint64_t> poll_ids_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;         // wakes the loop thread from epoll_wait
  int driver_wake_fd_ = -1;  // wakes the driver from poll
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace tdist::transport
