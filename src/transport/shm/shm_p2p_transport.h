#pragma once

// Point-to-point messages between the ranks of one host through shared
// memory (layout and protocols: shm_p2p_layout.h), under the transport
// contract of transport/transport.h: tags, any-source receives, an
// unexpected queue, the signature check of every message, refusals sent
// back to the sender, abort. A process group whose ranks all share a host
// sends and receives on it; over TCP a message of 8 B took 27-135 us, here
// a few (docs/performance.md has the figures).
//
// Who moves the data: the thread that posts a send writes what fits into
// the ring at once; a thread waiting for a request (wait()) reads the rings
// itself, spinning a little first as collectives do; a background thread
// does it while nobody waits, so that callbacks run and senders are
// released without a wait. Copies out of a peer's memory run outside the
// transport's lock.
//
// Failures: a peer's abort reaches this transport through the segment (its
// aborted line and reason), a peer that closed its transport through its
// closed line, and one that died through `watch` (the group's TCP
// transport, which sees its connections close) or its process's end.
// Operations that involve such a peer fail once everything it sent before
// has been read.
//
// The files: shm_p2p_transport.cc (connect, posting, matching, abort),
// shm_p2p_progress.cc (reading and writing the rings, waits, the
// background thread, failure checks).

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/scratch.h"
#include "tdist/store.h"
#include "transport/shm/shm_p2p_layout.h"
#include "transport/shm/shm_segment.h"
#include "transport/transport.h"
#include "transport/unexpected_messages.h"

namespace tdist::transport::shm {

struct ShmP2pOptions {
  /// Every rank may read every other's memory (ShmGroup::single_copy, which
  /// the ranks agreed on): large messages then go by a single copy.
  bool peer_read = false;
  /// How a waiting thread spins, yields and sleeps (ShmGroup::policy).
  WaitPolicy policy;
  /// Store keys go under this prefix.
  std::string prefix = "p2p/";
  /// Bounds the connect's waits for the other ranks.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  /// The group's other transport, if any: a peer it reports failed, and an
  /// abort it reports, fail this one's operations too. Must outlive it.
  Transport* watch = nullptr;
};

/// A rank's aborted line says which error it failed with (payload[0]), so
/// that its peers raise the same type: 1 a timeout, 2 a network error, 0
/// anything else.
uint8_t abort_kind_of(const std::exception_ptr& error);
std::exception_ptr abort_error_of_kind(uint8_t kind, const std::string& message);

/// Every rank of the group calls it (they must share a host).
std::unique_ptr<Transport> connect_shm_p2p(Store& store, int rank, int size, const ShmP2pOptions& options);

class ShmP2pTransport final : public Transport {
 public:
  ShmP2pTransport(Segment segment, int rank, int size, const ShmP2pOptions& options);
  ~ShmP2pTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "shm"; }

  RequestPtr isend(int dst, uint64_t tag, const void* data, size_t nbytes,
                   const tdist::detail::CallSignature& sig) override;
  RequestPtr irecv(int src, uint64_t tag, void* data, size_t nbytes,
                   const tdist::detail::CallSignature& sig) override;
  void isend_into(const RequestPtr& request, const void* data,
                  const tdist::detail::CallSignature& sig) override;
  void irecv_into(const RequestPtr& request, void* data, const tdist::detail::CallSignature& sig) override;
  bool try_send_now(int dst, uint64_t tag, const void* data, size_t nbytes,
                    const tdist::detail::CallSignature& sig) override;
  bool try_recv_now(int src, uint64_t tag, void* data, size_t nbytes,
                    const tdist::detail::CallSignature& sig) override;
  bool try_recv_soon(int src, uint64_t tag, void* data, size_t nbytes,
                     const tdist::detail::CallSignature& sig) override;
  RequestPtr irecv_bytes(int src, uint64_t tag, std::shared_ptr<std::vector<uint8_t>> out) override;
  std::optional<std::pair<int, tdist::detail::CallSignature>> conflicting_message(
      const tdist::detail::CallSignature& mine) const override;
  bool wait(const RequestPtr& request, Clock::time_point deadline) override;
  std::exception_ptr take_rejection() override;
  std::optional<tdist::detail::CallSignature> last_call_from(int peer) const override;
  void abort(std::exception_ptr error) override;
  std::exception_ptr abort_reason() const override;
  bool peer_failed(int peer) const override;
  bool peer_crashed(int peer) const override;

 private:
  struct RecvOp {
    int src;
    uint64_t tag;
    uint8_t* data;
    size_t capacity;
    std::shared_ptr<std::vector<uint8_t>> bytes;  // irecv_bytes: sized on arrival
    RequestPtr request;
    tdist::detail::CallSignature sig;
  };
  /// A message no receive had taken when it arrived.
  struct Incoming {
    int src;
    uint64_t tag;
    tdist::detail::CallSignature sig;
    size_t size;
    detail::Scratch data;
    size_t got = 0;        // bytes in `data` so far
    bool in_peer = false;  // kPeerRead, not yet copied: the bytes are still the sender's
    uint64_t address = 0;  // where, if so
    uint64_t id = 0;       // the sender's number for it (for the acknowledgement)
    Clock::time_point arrived{};
    std::optional<RecvOp> claimed;  // a receive that took it before its last byte came
  };
  /// A message queued for a peer, with how much of it is in the ring.
  struct Outgoing {
    RequestPtr request;  // null for acknowledgements and refusals
    SlotHeader header;
    const uint8_t* data;
    size_t sent = 0;
    bool started = false;
    std::shared_ptr<std::string> text;  // a refusal's reason (owns its bytes)
  };
  /// The streamed message from a peer whose slots are still coming.
  struct Inbound {
    enum class Into { kNothing, kReceive, kUnexpected, kDiscard } into = Into::kNothing;
    std::optional<RecvOp> op;
    std::list<Incoming>::iterator incoming;
    size_t total = 0;
    size_t got = 0;
  };
  /// A copy out of a peer's memory into a receive's buffer, made outside
  /// the lock by whichever thread takes it.
  struct PeerRead {
    RecvOp op;
    int src;
    uint64_t address;
    size_t bytes;
    uint64_t id;
  };
  struct Completion {
    RequestPtr request;
    int source;
    size_t bytes;
    std::exception_ptr error;
  };

  // ---- shm_p2p_transport.cc ----
  P2pRankArea& area(int r) const;
  RingCounters& counters(int from, int to) const;
  uint8_t* slot(int from, int to, uint64_t n) const;
  void post_recv(RecvOp op);
  /// Appends `op` to posted_ in a node kept by take_posted_locked, if any:
  /// no allocation per receive.
  void post_locked(RecvOp op);
  /// Takes the receive at `it` out of posted_, keeping its node.
  RecvOp take_posted_locked(std::list<RecvOp>::iterator it);
  /// The message from `src` (its header, and its bytes at `data` if they are
  /// here already) meets receive `op`: checks signature and size, then
  /// copies (data), schedules a read of the sender's memory (in_peer), or
  /// leaves the caller to stream the rest in (returns true).
  bool deliver(RecvOp& op, int src, const SlotHeader& header, const uint8_t* data, size_t got);
  void refuse(RecvOp& op, int src, const tdist::detail::CallSignature& theirs, uint64_t id);
  void send_control(int dst, SlotKind kind, uint64_t id, std::shared_ptr<std::string> text);
  void acknowledge(int dst, uint64_t id) { send_control(dst, SlotKind::kAck, id, nullptr); }
  void completed(const RequestPtr& request, int source, size_t bytes);
  void failed(const RequestPtr& request, std::exception_ptr error);
  void abort_locked(const std::exception_ptr& error, bool tell_peers);
  /// Fails what involves peer `p`, which is gone, and what comes for it later.
  void fail_peer_locked(int p);
  std::exception_ptr gone_error(int peer, const char* what) const;

  // ---- shm_p2p_progress.cc ----
  /// One round of moving data: reads every ring, writes every queue, makes
  /// the copies out of peers' memory and delivers completions. True if it
  /// did anything.
  bool progress();
  /// True if a round of progress() would find nothing to do: no unread
  /// slot in any ring to this rank, nothing busy_, no failure check due.
  /// Without the lock: a wait's rounds mostly find nothing.
  bool quiet() const;
  /// The first slot of `p`'s ring to this rank not yet written, as far as
  /// this rank has read it and the slots after are ready.
  uint64_t ring_end(int p) const;
  /// A slot is ready in some ring to this rank and not yet read.
  bool unread_slots() const;
  /// Reads the notes about this rank's own sends (acknowledgements,
  /// refusals) at the head of `p`'s ring, up to its first message.
  void read_notes_locked(int p);
  /// Moves this rank's count of `p`'s ring past the slot just read, and
  /// knocks if `p` waits for room.
  void slot_read_locked(int p);
  /// True once ring_end(p) is no longer `end` or the request is done,
  /// within `polls` looks.
  bool ring_moved_soon(int p, uint64_t end, const Request& request, int polls) const;
  /// Recomputes busy_ at the end of a full round.
  void note_busy_locked();
  void read_ring_locked(int p, bool& moved);
  /// A posted receive takes a message from `src` with `tag`.
  bool posted_for_locked(int src, uint64_t tag) const;
  /// The oldest unclaimed early message a receive of (`src`, `tag`) takes,
  /// or unexpected_.end().
  using Early = UnexpectedMessages<Incoming>::iterator;
  Early early_message_locked(int src, uint64_t tag);
  /// True if the streamed message at the head of `p`'s ring stays there
  /// for now, waiting for its receive (see p2p_patience).
  bool waits_in_ring_locked(int p, const SlotHeader& header);
  void read_slot_locked(int p, const SlotHeader& header, const uint8_t* payload);
  void take_stream_locked(int p, const uint8_t* payload, size_t n);
  /// Writes what is queued for `p` as far as its ring has room; true if it wrote.
  bool flush_locked(int p);
  /// Writes `m`'s next slots while `p`'s ring has room; true once all are
  /// written (its send then completed, or awaits the receiver's
  /// acknowledgement of a read of its bytes).
  bool write_message_locked(int p, Outgoing& m);
  /// True if `p`'s ring has a free slot; if not, asks `p` to knock when it
  /// frees one.
  bool room_locked(int p);
  /// True if `p`'s ring has `slots` free slots, asking nothing of `p`.
  bool room_now_locked(int p, uint64_t slots = 1);
  /// The slots a message of `nbytes` to or from `peer` takes if it may
  /// move at once (another rank; at most kP2pAtOnceSlots), else 0.
  uint64_t at_once_slots_for(int peer, size_t nbytes) const;
  /// Writes the next slot of `p`'s ring: the part of a message (`header`)
  /// that follows its first `sent` bytes, from `data`. Returns the bytes
  /// it took.
  size_t put_slot_locked(int p, SlotHeader header, const uint8_t* data, size_t sent);
  void buffer_waiting_reads_locked();
  void run_peer_read(PeerRead& read);
  void deliver_completions();
  void check_failures_locked();
  void run_background();
  bool anything_pending_locked() const;

  Segment segment_;
  P2pLayout layout_;
  const int rank_;
  const int size_;
  const ShmP2pOptions options_;
  FlagLine* any_aborted_;
  std::vector<pid_t> pids_;

  // Guards everything below it, but for the atomic flags marked as read
  // without it (completions_queued_, rejection_pending_), which change under it.
  mutable std::mutex mutex_;
  std::list<RecvOp> posted_;
  std::list<RecvOp> spare_ops_;  // see take_posted_locked
  UnexpectedMessages<Incoming> unexpected_;
  std::vector<std::deque<Outgoing>> outbox_;                        // per peer
  std::vector<std::unordered_map<uint64_t, RequestPtr>> awaiting_;  // per peer: kPeerRead sends by id
  std::vector<uint64_t> next_id_;                                   // per peer
  std::vector<uint64_t> written_;                                   // per peer: slots written to it
  std::vector<uint64_t> freed_;                                     // per peer: its `read`, as last seen
  std::vector<uint64_t> read_;                                      // per peer: slots read from it
  std::vector<Inbound> inbound_;                                    // per peer
  std::vector<Clock::time_point> held_since_;                       // per peer: see waits_in_ring_locked
  std::vector<bool> gone_;  // per peer: closed, died or lost (gone_error says which)
  std::vector<tdist::detail::CallSignature> last_call_;  // per peer
  std::deque<PeerRead> reads_;
  std::vector<Completion> completions_;
  // completions_ is not empty: deliver_completions' look without the lock.
  std::atomic<bool> completions_queued_{false};
  std::exception_ptr aborted_;
  std::exception_ptr rejection_;
  // rejection_ is set: take_rejection's look without the lock.
  std::atomic<bool> rejection_pending_{false};
  bool closing_ = false;
  // progress() has work besides reading the rings: a queue for a peer, a
  // copy out of a peer's memory, a message that waits in a peer's memory
  // for its receive. Set under the lock where such work is added, before
  // anything that could wake a thread for it; cleared only by progress(),
  // under the lock, after a full round. Read without the lock by quiet().
  std::atomic<bool> busy_{true};
  // When progress() next looks for aborted and vanished peers (coarse
  // clock ticks); written under the lock, read by quiet() without it.
  std::atomic<Clock::rep> next_check_{0};

  // Threads reading the rings in wait(): while one does, the background
  // thread stays parked instead of being woken by every bell.
  std::atomic<int> drivers_{0};
  // Threads past their drivers_ decrement, still touching this transport
  // (wait()'s Leave); the destructor waits for both counts.
  std::atomic<int> leaving_{0};
  // A waiting thread cleared the background thread's listening flag; the
  // last one to leave sets it again.
  std::atomic<bool> muted_{false};
  // When the last wait() ended (coarse clock ticks): the background thread
  // listens only after a quiet while.
  std::atomic<Clock::rep> last_drive_end_{0};
  std::atomic<bool> stop_{false};
  std::mutex park_mutex_;
  std::condition_variable park_cv_;
  std::thread thread_;
};

}  // namespace tdist::transport::shm
