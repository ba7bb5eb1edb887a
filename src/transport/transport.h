#pragma once

// The transport interface: tagged, ordered point-to-point messages between the
// ranks of one group, with asynchronous completion. The TCP collective
// algorithms (src/algorithms/*.cc) and point-to-point depend only on this
// file. Implementations: TcpTransport (tcp/: connect, handshake, wire,
// framing, matching, failure, event loop), SubsetTransport (a view of
// some ranks of another transport, for the hierarchy) and ShmP2pTransport
// (shm/shm_p2p_*: point-to-point between the ranks of one host through
// slots in a shared segment, or single-copy reads of the sender's memory).
// Shared-memory collectives do not go through this interface: they move a
// collective's bytes through flags and buffers, not messages, and are a
// collective domain (algorithms/collective_domain.h).
// tests/transport/test_transport_conformance.cc runs this contract over
// every implementation; a new transport joins it there.
//
// Matching: a message from rank s with tag t completes the oldest posted
// receive for (s, t), or the oldest any-source receive for t; messages from
// one sender with one tag are matched in the order they were sent. A message
// that arrives before its receive is posted waits in an unexpected queue;
// otherwise it is read straight into the receiver's buffer. A transport may
// refuse any-source receives (SubsetTransport does), raising
// DistBackendError at the irecv.
//
// The call-matching hooks (conflicting_message, last_call_from,
// take_rejection) live here, not on an interface of their own, because what
// they report is the message stream's: the unexpected queue and the
// signatures messages carry. Their defaults say "nothing known", for a
// transport that keeps no such state.

#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/call_signature.h"

namespace tdist::transport {

using Clock = std::chrono::steady_clock;

/// Clock::now() read from the kernel's coarse monotonic clock: up to one
/// tick (a few ms) behind, at a quarter of the cost (4 vs 17 ns here). For
/// the deadline of a whole call, taken once per collective, where the
/// 17 ns were a tenth of a small collective's time.
inline Clock::time_point coarse_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(ts.tv_sec) +
                                                                       std::chrono::nanoseconds(ts.tv_nsec)));
}

/// Source rank of a receive that accepts any sender.
constexpr int kAnySource = -1;

/// Completion of one send or receive. Thread-safe.
class Request {
 public:
  enum class Kind { kSend, kRecv };
  Request(Kind kind, int peer, uint64_t tag, size_t nbytes) : Request(kind, peer, tag, nbytes, false) {}
  virtual ~Request() = default;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  /// Blocks until the request completes and rethrows its error, if any.
  /// Returns false if `deadline` passed first (the request stays pending).
  bool wait_until(Clock::time_point deadline);
  /// True once completed, successfully or not.
  bool done() const;
  /// Once done(): rethrows the error, if any, else returns true; no lock
  /// (the outcome never changes once done).
  bool outcome() const;
  /// The error it failed with, or null.
  std::exception_ptr error() const;

  /// For receives: the rank the message came from (resolves kAnySource) and
  /// its size. Valid after completion.
  int source() const;
  size_t received_bytes() const;
  Kind kind() const { return kind_; }
  /// The peer and tag it was posted with, for error messages.
  int peer() const { return peer_; }
  uint64_t tag() const { return tag_; }
  /// Size of the send, or capacity of the receive.
  size_t nbytes() const { return nbytes_; }

  /// Runs `callback` once the request completes (at once if it has). It runs
  /// on the completing thread, outside any transport lock, so it may post
  /// new operations.
  void on_complete(std::function<void(Request&)> callback);
  /// The same, keeping `owner` (what the callback works on, such as its
  /// operation's work) alive until the callbacks have run, so that the
  /// callback can hold a plain pointer to it: a std::function that holds a
  /// shared_ptr allocates, once per message. One owner per request: a
  /// second raises std::logic_error.
  void on_complete(std::function<void(Request&)> callback, std::shared_ptr<void> owner);

  // Called by transports, never while holding their own locks.
  void complete(int source, size_t received_bytes);
  void fail(std::exception_ptr error);
  /// Completes the request (fails it, with an error) and wakes its waiters,
  /// but leaves its callbacks to run_callbacks(), so that a transport can
  /// hand them to the thread meant to run them. True if callbacks are left.
  bool settle(int source, size_t received_bytes, std::exception_ptr error);
  /// Runs the callbacks registered so far, each once whichever thread calls
  /// this first (the rest find none).
  void run_callbacks();

 protected:
  /// For a request that is part of a larger object (a point-to-point
  /// work, which the transport keeps alive through its RequestPtr): with
  /// `notify`, finished() runs once it completes, after its callbacks and
  /// on the same thread, in place of a callback and its owner.
  Request(Kind kind, int peer, uint64_t tag, size_t nbytes, bool notify)
      : kind_(kind), peer_(peer), tag_(tag), nbytes_(nbytes), notify_(notify) {}
  virtual void finished() {}

 private:
  struct Callbacks;
  /// complete() and fail(): settle(), then run_callbacks().
  void finish(int source, size_t received_bytes, std::exception_ptr error);
  /// Sets the outcome unless one is set; under mutex_.
  void settle_locked(int source, size_t received_bytes, std::exception_ptr error);
  /// Takes the callbacks registered so far and their owner; under mutex_.
  Callbacks take_callbacks_locked();
  /// `field` of the outcome, under the lock only while not yet done.
  template <typename T>
  T settled(const T& field) const;

  const Kind kind_;
  const int peer_;
  const uint64_t tag_;
  const size_t nbytes_;
  const bool notify_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  // Set under mutex_ once the rest is; read without it by done(), which
  // waiting threads poll between looks at the memory they wait on.
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  int source_ = -1;
  size_t received_bytes_ = 0;
  // The first callback in place, the rest in a list: most requests have
  // one (a work's), and the list would cost an allocation per message.
  std::function<void(Request&)> first_callback_;
  std::vector<std::function<void(Request&)>> callbacks_;
  std::shared_ptr<void> owner_;  // released once the callbacks have run
  bool finished_due_ = false;    // notify_ and settled: finished() is still to run
  int waiters_ = 0;              // threads in wait_until: only then is done_cv_ notified
};

using RequestPtr = std::shared_ptr<Request>;

/// A connected group of `size()` ranks.
class Transport {
 public:
  virtual ~Transport() = default;
  Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "tcp", "shm", ...
  virtual const char* name() const = 0;

  /// Sends `nbytes` from `data` to `dst`; `data` must stay valid and unchanged
  /// until the request completes. Sending to oneself is allowed. The
  /// message carries `sig`, what the sender passed to its call.
  virtual RequestPtr isend(int dst, uint64_t tag, const void* data, size_t nbytes,
                           const tdist::detail::CallSignature& sig) = 0;
  RequestPtr isend(int dst, uint64_t tag, const void* data, size_t nbytes) {
    return isend(dst, tag, data, nbytes, tdist::detail::CallSignature{});
  }
  /// Receives into `data` (capacity `nbytes`) from `src` or kAnySource. A
  /// message longer than the capacity fails the request with DistBackendError
  /// naming both sizes; a shorter one completes with received_bytes() < nbytes.
  /// A receive with a signature (`sig` not empty) accepts only a message
  /// with the same signature: any other fails it with DistBackendError
  /// naming both calls (mismatch_message), and nothing is written to `data`.
  virtual RequestPtr irecv(int src, uint64_t tag, void* data, size_t nbytes,
                           const tdist::detail::CallSignature& sig) = 0;
  RequestPtr irecv(int src, uint64_t tag, void* data, size_t nbytes) {
    return irecv(src, tag, data, nbytes, tdist::detail::CallSignature{});
  }
  /// A collective's message that has arrived for no receive yet, of call
  /// `mine.seq` but with another signature, or of an earlier call (which no
  /// receive will take any more): its sender and signature. A rank waiting
  /// in a call looks for one now and then, since a peer in another op may
  /// never send what it waits for, and at the start of each call, since a
  /// root that sends and waits for nobody (broadcast) may have met no
  /// receive at all. The sender is named by its rank in the whole group
  /// (a subset's transport asks its parent's). It is asked twice per call,
  /// so it must not cost a pass over every waiting message: a root that
  /// runs ahead leaves thousands (unexpected_messages.h indexes them).
  virtual std::optional<std::pair<int, tdist::detail::CallSignature>> conflicting_message(
      const tdist::detail::CallSignature& mine) const {
    (void)mine;
    return std::nullopt;
  }
  /// isend() and irecv() into a request the caller made (Kind kSend or
  /// kRecv, peer, tag and size as those calls take them), for a caller
  /// that keeps its request inside an object of its own (a point-to-point
  /// work, tdist_p2p.cc): an allocation and a callback fewer per message.
  /// The default raises DistBackendError: SubsetTransport, a view for the
  /// hierarchy's collectives, carries no such work.
  virtual void isend_into(const RequestPtr& request, const void* data,
                          const tdist::detail::CallSignature& sig);
  virtual void irecv_into(const RequestPtr& request, void* data, const tdist::detail::CallSignature& sig);
  /// Sends a message that can go out whole at once, with no request: true
  /// if it is written (sent: `data` may be reused), false if the caller
  /// must post it with isend_into(), which also raises or fails it. A
  /// small send into a ring with room costs a request, a completion and
  /// their locks less (the process group then hands back a finished work).
  /// The default sends nothing this way.
  virtual bool try_send_now(int /*dst*/, uint64_t /*tag*/, const void* /*data*/, size_t /*nbytes*/,
                            const tdist::detail::CallSignature& /*sig*/) {
    return false;
  }
  /// Receives, at once and with no request, the next message from `src`
  /// if it has come whole already, is this receive's (tag, `nbytes`,
  /// signature) and no earlier receive waits for it: true if `data` holds
  /// it. False leaves everything as it was, for irecv_into(), which also
  /// says what is wrong (a refusal to raise, a mismatch). The default
  /// receives nothing this way.
  virtual bool try_recv_now(int /*src*/, uint64_t /*tag*/, void* /*data*/, size_t /*nbytes*/,
                            const tdist::detail::CallSignature& /*sig*/) {
    return false;
  }
  /// try_recv_now(), also watching for the message to come as a wait would
  /// spin, or yield its core, before it sleeps (microseconds; at most a
  /// millisecond on shared memory): for a blocking receive, which has
  /// nothing else to do meanwhile. The default looks once.
  virtual bool try_recv_soon(int src, uint64_t tag, void* data, size_t nbytes,
                             const tdist::detail::CallSignature& sig) {
    return try_recv_now(src, tag, data, nbytes, sig);
  }
  /// Receives a message whose size is not known in advance into `out`.
  virtual RequestPtr irecv_bytes(int src, uint64_t tag, std::shared_ptr<std::vector<uint8_t>> out) = 0;

  /// Waits for `request` like request->wait_until(deadline) (false if the
  /// deadline passed first; rethrows the request's error), but may use the
  /// waiting thread to move the transport's data meanwhile, so that a message
  /// reaches its waiter without a hand-off between threads.
  virtual bool wait(const RequestPtr& request, Clock::time_point deadline) {
    return request->wait_until(deadline);
  }
  /// Bracket one collective call made by the calling thread (see CallScope):
  /// within it, the thread that waits through wait() may keep driving the
  /// transport from one wait to the next.
  virtual void begin_call() {}
  virtual void end_call() {}

  /// The error a peer sent back for a point-to-point message of this rank
  /// that its receive refused (another dtype or count), once; null if none.
  /// The process group raises it at this rank's next send or recv.
  virtual std::exception_ptr take_rejection() { return nullptr; }

  /// The signature of the newest collective call of which a message from
  /// `peer` has arrived here, if any: the flight recorder's view of a peer
  /// that keeps no records this rank can read.
  virtual std::optional<tdist::detail::CallSignature> last_call_from(int peer) const { return std::nullopt; }

  /// Tells every peer, best effort, that this rank has waited long in call
  /// `sig.seq` (algorithms::LongWait), on the data path: a timeout can then
  /// tell the peers that are in the call, waiting too, from the one that
  /// never came, even where the group's store (which keeps the same notes)
  /// does not answer, its host being the rank that stopped. Default: peers
  /// hear nothing (tells_waiting() is false).
  virtual void announce_waiting(const tdist::detail::CallSignature& sig) { (void)sig; }
  /// Whether peers hear announce_waiting and waiting_in reports it.
  virtual bool tells_waiting() const { return false; }
  /// Reads what peers have sent so far, without waiting: before a timeout
  /// reads waiting_in, which its thread may not have driven for a while
  /// (it waited for the store meanwhile).
  virtual void take_in() {}
  /// The newest call in which `peer` said it waits long, if it said so.
  virtual std::optional<uint64_t> waiting_in(int peer) const {
    (void)peer;
    return std::nullopt;
  }
  /// The transport that numbers ranks as the group does: this one, or the
  /// whole of which it is a view (SubsetTransport). A call's notes, its
  /// requests' peers and its timeout message count ranks there, so the
  /// waiting notices are read there too.
  virtual Transport& whole() { return *this; }

  /// Fails every pending and future request with `error` (e.g. the group was
  /// aborted or destroyed).
  virtual void abort(std::exception_ptr error) = 0;
  /// Whether a peer that goes without a goodbye breaks every pending and
  /// later operation (true) or only those involving it (false), for
  /// transports that tell the two apart.
  virtual void set_crash_breaks_group(bool breaks) { (void)breaks; }
  /// Why every operation fails, once one does: this rank's abort, a peer's
  /// abort notice (with that peer's reason), or the crash that broke the
  /// group; null while the transport is usable.
  virtual std::exception_ptr abort_reason() const { return nullptr; }
  /// True if abort_reason() is a peer's abort notice (not this rank's own
  /// abort, nor a crash). Default: false.
  virtual bool aborted_by_peer() const { return false; }
  /// True if `peer` is known to be dead or disconnected.
  virtual bool peer_failed(int peer) const = 0;
  /// True if `peer` is known to have died: its connection broke without
  /// the goodbye or abort notice a live peer sends. Unlike peer_failed,
  /// false for a live peer once this rank's transport was aborted, so
  /// fault tolerance's shrink and agree (fault_tolerance.h) may count such a
  /// peer out at once. Default: nothing is known.
  virtual bool peer_crashed(int peer) const {
    (void)peer;
    return false;
  }
};

/// Marks the calling thread as running one collective call on a transport.
class CallScope {
 public:
  explicit CallScope(Transport& transport) : transport_(transport) { transport_.begin_call(); }
  ~CallScope() { transport_.end_call(); }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  Transport& transport_;
};

}  // namespace tdist::transport
