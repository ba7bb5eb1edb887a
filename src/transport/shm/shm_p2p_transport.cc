// ShmP2pTransport: connecting, posting sends and receives, matching
// messages to receives (checking their signatures), abort and the peers
// that are gone.

#include "transport/shm/shm_p2p_transport.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/error_text.h"
#include "tdist/errors.h"
#include "transport/message_checks.h"

namespace tdist::transport::shm {
namespace {

namespace sig = tdist::detail;

}  // namespace

uint8_t abort_kind_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const DistTimeoutError&) {
    return 1;
  } catch (const DistNetworkError&) {
    return 2;
  } catch (...) {
    return 0;
  }
}

std::exception_ptr abort_error_of_kind(uint8_t kind, const std::string& message) {
  if (kind == 1) return std::make_exception_ptr(DistNetworkTimeoutError(message));
  if (kind == 2) return std::make_exception_ptr(DistNetworkError(message));
  return std::make_exception_ptr(DistBackendError(message));
}

P2pLayout::P2pLayout(int ranks) : size(ranks) {
  const auto n = static_cast<size_t>(ranks);
  constexpr size_t kPage = 4096;
  areas = kPage;  // after the any_aborted line
  counters = areas + (n * sizeof(P2pRankArea) + kPage - 1) / kPage * kPage;
  slots = counters + (n * n * sizeof(RingCounters) + kPage - 1) / kPage * kPage;
  ring_slots = std::clamp<uint64_t>(kP2pRingBudget / (n * n * kP2pSlotBytes), kP2pMinSlots, kP2pMaxSlots);
  bytes = slots + n * n * ring_slots * kP2pSlotBytes;
}

std::unique_ptr<Transport> connect_shm_p2p(Store& store, int rank, int size, const ShmP2pOptions& options) {
  const P2pLayout layout(size);
  const std::string& prefix = options.prefix;
  const std::string failed_mark = "!failed ";
  Segment segment;
  if (rank == 0) {
    try {
      segment = Segment::create(layout.bytes);
    } catch (const std::exception& e) {
      try {
        store.set(prefix + "segment", to_bytes(failed_mark + e.what()));
      } catch (...) {
      }
      throw;
    }
    store.set(prefix + "segment", to_bytes(segment.name()));
  } else {
    const std::string name = to_string(store.get(prefix + "segment"));
    if (name.starts_with(failed_mark)) {
      throw DistBackendError("shared-memory messages: rank 0 failed to set them up: " +
                             name.substr(failed_mark.size()));
    }
    segment = Segment::open(name, layout.bytes);
  }
  auto* area = reinterpret_cast<P2pRankArea*>(segment.data() + layout.areas) + rank;
  area->pid = static_cast<uint64_t>(getpid());
  store.set(prefix + "mapped/" + std::to_string(rank), to_bytes("1"));
  std::vector<std::string> mapped;
  mapped.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) mapped.push_back(prefix + "mapped/" + std::to_string(r));
  store.wait(mapped, options.timeout);
  // Every rank has mapped it: the memory now goes with the last process
  // that maps it, however it ends.
  if (rank == 0) segment.unlink();
  return std::make_unique<ShmP2pTransport>(std::move(segment), rank, size, options);
}

ShmP2pTransport::ShmP2pTransport(Segment segment, int rank, int size, const ShmP2pOptions& options)
    : segment_(std::move(segment)),
      layout_(size),
      rank_(rank),
      size_(size),
      options_(options),
      any_aborted_(reinterpret_cast<FlagLine*>(segment_.data())) {
  const auto n = static_cast<size_t>(size);
  for (int r = 0; r < size; ++r) pids_.push_back(static_cast<pid_t>(area(r).pid));
  outbox_.resize(n);
  awaiting_.resize(n);
  next_id_.assign(n, 1);  // 0: no id (shm_p2p_layout.h)
  written_.assign(n, 0);
  freed_.assign(n, 0);
  read_.assign(n, 0);
  inbound_.resize(n);
  held_since_.resize(n);
  gone_.assign(n, false);
  last_call_.resize(n);
  thread_ = std::thread([this] { run_background(); });
}

ShmP2pTransport::~ShmP2pTransport() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
    const bool pending = anything_pending_locked();
    // Made only if an operation will carry it (see ~TcpTransport: making an
    // error may symbolize a stack).
    abort_locked(pending ? std::make_exception_ptr(
                               DistBackendError("rank " + std::to_string(rank_) +
                                                ": the transport was destroyed with this operation pending"))
                         : std::make_exception_ptr(std::runtime_error("the transport was destroyed")),
                 false);
    // A goodbye: peers fail what they wait for from this rank, at once.
    publish(area(rank_).closed, 1);
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) knock(area(r));
    }
  }
  stop_.store(true);
  ring_bell(area(rank_).background);
  if (thread_.joinable()) thread_.join();
  deliver_completions();
  // Threads still in wait() have had their requests failed; they leave
  // before the memory they read goes.
  while (drivers_.load() != 0 || leaving_.load() != 0) {
    ring_bell(area(rank_).bell);
    std::this_thread::yield();
  }
}

P2pRankArea& ShmP2pTransport::area(int r) const {
  return reinterpret_cast<P2pRankArea*>(segment_.data() + layout_.areas)[r];
}

RingCounters& ShmP2pTransport::counters(int from, int to) const {
  return *reinterpret_cast<RingCounters*>(segment_.data() + layout_.counters_offset(from, to));
}

uint8_t* ShmP2pTransport::slot(int from, int to, uint64_t n) const {
  return segment_.data() + layout_.slot_offset(from, to, n);
}

RequestPtr ShmP2pTransport::isend(int dst, uint64_t tag, const void* data, size_t nbytes,
                                  const sig::CallSignature& sig) {
  auto request = std::make_shared<Request>(Request::Kind::kSend, dst, tag, nbytes);
  isend_into(request, data, sig);
  return request;
}

void ShmP2pTransport::isend_into(const RequestPtr& request, const void* data, const sig::CallSignature& sig) {
  const int dst = request->peer();
  const uint64_t tag = request->tag();
  const size_t nbytes = request->nbytes();
  if (request->kind() != Request::Kind::kSend)
    throw DistInvalidArgument("isend_into: the request is a receive's");
  if (dst < 0 || dst >= size_) {
    throw DistInvalidArgument("send: destination rank " + std::to_string(dst) + " is not in [0, " +
                              std::to_string(size_) + ")");
  }
  const auto* bytes = static_cast<const uint8_t*>(data);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto d = static_cast<size_t>(dst);
    if (aborted_) {
      failed(request, aborted_);
    } else if (dst == rank_) {
      // To oneself: straight into a receive, or the unexpected queue.
      const SlotHeader header{SlotKind::kMessage, Carry::kSlots, tag, nbytes, nbytes, 0, 0, sig};
      auto it = std::find_if(posted_.begin(), posted_.end(),
                             [&](const RecvOp& op) { return receive_matches(op.src, op.tag, rank_, tag); });
      if (it != posted_.end()) {
        RecvOp op = take_posted_locked(it);
        (void)deliver(op, rank_, header, bytes, nbytes);
      } else {
        Incoming& m = unexpected_.push_back(
            Incoming{rank_, tag, sig, nbytes, nbytes > 0 ? detail::Scratch(nbytes) : detail::Scratch()});
        if (nbytes > 0) std::memcpy(m.data.get(), bytes, nbytes);
        m.got = nbytes;
      }
      completed(request, rank_, nbytes);
    } else if (gone_[d]) {
      failed(request, gone_error(dst, "send to"));
    } else {
      const Carry carry = carry_for(nbytes, options_.peer_read);
      const SlotHeader header{
          SlotKind::kMessage, carry, tag, nbytes, 0, next_id_[d]++, reinterpret_cast<uintptr_t>(bytes), sig};
      // Nothing queued ahead: written now, from this thread, as far as the
      // ring has room (a small message then needs nobody else, nor the
      // queue); what is left waits in the queue.
      Outgoing m{request, header, bytes};
      if (!outbox_[d].empty()) {
        outbox_[d].push_back(std::move(m));  // nothing written yet: a failure here fails the call alone
      } else if (!write_message_locked(dst, m)) {
        // Part of the message may be in the ring already: if its rest
        // cannot be queued, the receiver would wait for it forever, so the
        // transport fails instead (every peer is told). With nothing
        // written (a full ring) the call alone fails. (A failed push_back
        // leaves `m` as it was.)
        try {
          outbox_[d].push_back(std::move(m));
        } catch (...) {
          if (!m.started) throw;
          abort_locked(std::current_exception(), true);
          failed(request, aborted_);
        }
      }
    }
  }
  deliver_completions();
}

RequestPtr ShmP2pTransport::irecv(int src, uint64_t tag, void* data, size_t nbytes,
                                  const sig::CallSignature& sig) {
  auto request = std::make_shared<Request>(Request::Kind::kRecv, src, tag, nbytes);
  irecv_into(request, data, sig);
  return request;
}

bool ShmP2pTransport::try_send_now(int dst, uint64_t tag, const void* data, size_t nbytes,
                                   const sig::CallSignature& sig) {
  // A few slots, to another rank, with nothing queued ahead and room in
  // the ring for all of them: what isend_into would write and complete at
  // once. Anything else (an abort, a gone peer, a full ring, a longer
  // message) goes the usual way, which says what is wrong.
  const uint64_t slots = at_once_slots_for(dst, nbytes);
  if (slots == 0) return false;
  const auto d = static_cast<size_t>(dst);
  const std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_ || gone_[d] || !outbox_[d].empty() || !room_now_locked(dst, slots)) return false;
  SlotHeader header{SlotKind::kMessage, Carry::kSlots, tag, nbytes, 0, next_id_[d]++, 0, sig};
  const auto* bytes = static_cast<const uint8_t*>(data);
  size_t sent = put_slot_locked(dst, header, bytes, 0);
  header.kind = SlotKind::kMore;
  while (sent < nbytes) sent += put_slot_locked(dst, header, bytes + sent, sent);
  return true;
}

uint64_t ShmP2pTransport::at_once_slots_for(int peer, size_t nbytes) const {
  const uint64_t slots = slots_for(nbytes, Carry::kSlots);
  if (peer < 0 || peer >= size_ || peer == rank_ || slots > std::min(kP2pAtOnceSlots, layout_.ring_slots))
    return 0;
  return slots;
}

void ShmP2pTransport::irecv_into(const RequestPtr& request, void* data, const sig::CallSignature& sig) {
  if (request->kind() != Request::Kind::kRecv)
    throw DistInvalidArgument("irecv_into: the request is a send's");
  post_recv(RecvOp{request->peer(), request->tag(), static_cast<uint8_t*>(data), request->nbytes(), nullptr,
                   request, sig});
}

RequestPtr ShmP2pTransport::irecv_bytes(int src, uint64_t tag, std::shared_ptr<std::vector<uint8_t>> out) {
  auto request = std::make_shared<Request>(Request::Kind::kRecv, src, tag, SIZE_MAX);
  post_recv(RecvOp{src, tag, nullptr, SIZE_MAX, std::move(out), request, {}});
  return request;
}

void ShmP2pTransport::post_recv(RecvOp op) {
  if (op.src != kAnySource && (op.src < 0 || op.src >= size_)) {
    throw DistInvalidArgument("recv: source rank " + std::to_string(op.src) + " is not in [0, " +
                              std::to_string(size_) + ")");
  }
  bool read_scheduled = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) {
      failed(op.request, aborted_);
    } else {
      // The oldest matching message that came early wins.
      auto it = early_message_locked(op.src, op.tag);
      if (it != unexpected_.end()) {
        Incoming& m = *it;
        const SlotHeader header{SlotKind::kMessage,
                                m.in_peer ? Carry::kPeerRead : Carry::kSlots,
                                m.tag,
                                m.size,
                                m.got,
                                m.id,
                                m.address,
                                m.sig};
        if (m.in_peer || m.got == m.size) {
          const size_t reads = reads_.size();
          const int src = m.src;
          detail::Scratch bytes = std::move(m.data);
          unexpected_.erase(it);
          (void)deliver(op, src, header, bytes.get(), header.chunk);
          read_scheduled = reads_.size() > reads;
        } else {
          m.claimed = std::move(op);  // its last slots are still coming
        }
      } else if (op.src != kAnySource && gone_[static_cast<size_t>(op.src)]) {
        failed(op.request, gone_error(op.src, "receive from"));
      } else {
        post_locked(std::move(op));
      }
    }
  }
  // A copy out of the sender's memory is for a thread that moves data, not
  // for this call: the next wait takes it, or the background thread (woken
  // here only if it listens, i.e. the rank has not waited lately: a rank
  // that posts and then waits would pay for the wake-up and share its core).
  if (read_scheduled && area(rank_).listening.load() != 0) ring_bell(area(rank_).background);
  deliver_completions();
}

void ShmP2pTransport::post_locked(RecvOp op) {
  if (spare_ops_.empty()) {
    posted_.push_back(std::move(op));
    return;
  }
  spare_ops_.front() = std::move(op);
  posted_.splice(posted_.end(), spare_ops_, spare_ops_.begin());
}

ShmP2pTransport::RecvOp ShmP2pTransport::take_posted_locked(std::list<RecvOp>::iterator it) {
  RecvOp op = std::move(*it);
  // A few nodes are kept: a rank rarely has more receives posted at once.
  constexpr size_t kSpareOps = 8;
  if (spare_ops_.size() < kSpareOps) {
    *it = RecvOp{};  // holds no request or buffer while spare
    spare_ops_.splice(spare_ops_.begin(), posted_, it);
  } else {
    posted_.erase(it);
  }
  return op;
}

bool ShmP2pTransport::deliver(RecvOp& op, int src, const SlotHeader& header, const uint8_t* data,
                              size_t got) {
  if (signatures_differ(op.sig, header.sig)) {
    refuse(op, src, header.sig, header.id);
    return false;
  }
  const size_t total = header.total;
  if (op.bytes) {
    op.bytes->resize(total);
    op.data = op.bytes->data();
    op.capacity = total;
  }
  if (total > op.capacity) {
    failed(op.request, too_big_error(rank_, src, op.tag, total, op.capacity));
    // The send completes, as over TCP: the receiver's error says enough.
    if (header.carry == Carry::kPeerRead) acknowledge(src, header.id);
    return false;
  }
  if (header.carry == Carry::kPeerRead) {
    reads_.push_back(PeerRead{std::move(op), src, header.address, total, header.id});
    busy_.store(true, std::memory_order_relaxed);
    return false;
  }
  if (got > 0) std::memcpy(op.data, data, got);
  if (got == total) {
    completed(op.request, src, total);
    return false;
  }
  return true;
}

void ShmP2pTransport::refuse(RecvOp& op, int src, const sig::CallSignature& theirs, uint64_t id) {
  auto error = mismatch_error(rank_, src, op.tag, op.sig, theirs);
  failed(op.request, error);
  if (op.sig.kind != sig::CallKind::kPointToPoint || src == rank_) return;
  // The sender learns why: its send fails if still pending (a read of its
  // memory), else its next send or recv raises (take_rejection).
  std::string text = exception_text(error);
  if (text.size() > kP2pSlotPayload) text.resize(kP2pSlotPayload);
  send_control(src, SlotKind::kRefusal, id, std::make_shared<std::string>(std::move(text)));
}

void ShmP2pTransport::send_control(int dst, SlotKind kind, uint64_t id, std::shared_ptr<std::string> text) {
  const auto d = static_cast<size_t>(dst);
  // After an abort nothing more goes out: a note written behind a message
  // cut short by the abort would make its slots look complete.
  if (gone_[d] || aborted_) return;
  const size_t bytes = text ? text->size() : 0;
  const SlotHeader header{kind, Carry::kSlots, 0, bytes, 0, id, 0, {}};
  const auto* data = text ? reinterpret_cast<const uint8_t*>(text->data()) : nullptr;
  outbox_[d].push_back(Outgoing{nullptr, header, data, 0, false, std::move(text)});
  if (outbox_[d].size() == 1) flush_locked(dst);
}

void ShmP2pTransport::completed(const RequestPtr& request, int source, size_t bytes) {
  completions_.push_back(Completion{request, source, bytes, nullptr});
  completions_queued_.store(true, std::memory_order_relaxed);
}

void ShmP2pTransport::failed(const RequestPtr& request, std::exception_ptr error) {
  completions_.push_back(Completion{request, -1, 0, std::move(error)});
  completions_queued_.store(true, std::memory_order_relaxed);
}

std::optional<std::pair<int, sig::CallSignature>> ShmP2pTransport::conflicting_message(
    const sig::CallSignature& mine) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = unexpected_.first_conflict(mine);
  if (it == unexpected_.end()) return std::nullopt;
  return std::make_pair(it->src, it->sig);
}

std::exception_ptr ShmP2pTransport::take_rejection() {
  // Called before every user send and recv: without the lock when no
  // refusal waits and every ring is read to its end. Under it, only the
  // notes about this rank's own sends (refusals, acknowledgements) that
  // head the rings are read: a message at a ring's head stays for its
  // receive, which then takes it straight from the ring (try_recv_now)
  // instead of from a buffer it was first copied into; a refusal behind
  // it is raised once the message is read. A reader of a refusal marks it
  // before it moves the ring's `read` count on (release), so a count whose
  // next slot is not ready (the count read with acquire) shows the mark.
  if (!rejection_pending_.load(std::memory_order_acquire)) {
    if (!unread_slots() && !rejection_pending_.load(std::memory_order_acquire)) return nullptr;
  }
  std::exception_ptr rejection;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!closing_) {
      for (int p = 0; p < size_; ++p) {
        if (p != rank_) read_notes_locked(p);
      }
    }
    rejection = std::exchange(rejection_, nullptr);
    rejection_pending_.store(false, std::memory_order_relaxed);
  }
  deliver_completions();
  return rejection;
}

std::optional<sig::CallSignature> ShmP2pTransport::last_call_from(int peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (peer < 0 || peer >= size_ || last_call_[static_cast<size_t>(peer)].empty()) return std::nullopt;
  return last_call_[static_cast<size_t>(peer)];
}

void ShmP2pTransport::abort(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    abort_locked(error, true);
  }
  deliver_completions();
}

std::exception_ptr ShmP2pTransport::abort_reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_;
}

void ShmP2pTransport::abort_locked(const std::exception_ptr& error, bool tell_peers) {
  if (aborted_) return;
  aborted_ = error;
  if (tell_peers) {
    P2pRankArea& own = area(rank_);
    const std::string text = exception_text(error);
    const size_t n = std::min(text.size(), sizeof(own.reason) - 1);
    std::memcpy(own.reason, text.data(), n);
    own.reason[n] = '\0';
    own.aborted.payload[0] = abort_kind_of(error);
    publish(own.aborted, 1);
    publish(*any_aborted_, 1);
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) knock(area(r));
    }
  }
  for (auto& op : posted_) failed(op.request, error);
  posted_.clear();
  for (auto& m : unexpected_) {
    if (m.claimed) failed(m.claimed->request, error);
  }
  unexpected_.clear();
  for (auto& in : inbound_) {
    if (in.op) failed(in.op->request, error);
    in = Inbound{};
  }
  for (auto& box : outbox_) {
    for (auto& m : box) {
      if (m.request) failed(m.request, error);
    }
    box.clear();
  }
  for (auto& waiting : awaiting_) {
    for (auto& [id, request] : waiting) failed(request, error);
    waiting.clear();
  }
  for (auto& read : reads_) failed(read.op.request, error);
  reads_.clear();
}

std::exception_ptr ShmP2pTransport::gone_error(int peer, const char* what) const {
  const bool closed = area(peer).closed.seq.load(std::memory_order_acquire) != 0;
  return std::make_exception_ptr(
      DistNetworkError("rank " + std::to_string(rank_) + ": " + what + " rank " + std::to_string(peer) +
                       ": rank " + std::to_string(peer) +
                       (closed ? " closed its connections (destroyed its group) first"
                               : " is gone: its process ended or its connection closed")));
}

void ShmP2pTransport::fail_peer_locked(int p) {
  const auto i = static_cast<size_t>(p);
  gone_[i] = true;
  const auto send_error = gone_error(p, "send to");
  const auto recv_error = gone_error(p, "receive from");
  for (auto it = posted_.begin(); it != posted_.end();) {
    if (it->src == p) {
      failed(it->request, recv_error);
      it = posted_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = unexpected_.begin(); it != unexpected_.end();) {
    // Bytes still in its memory, or still to come, never will.
    if (it->src == p && (it->in_peer || it->got < it->size)) {
      if (it->claimed) failed(it->claimed->request, recv_error);
      it = unexpected_.erase(it);
    } else {
      ++it;
    }
  }
  if (inbound_[i].op) failed(inbound_[i].op->request, recv_error);
  inbound_[i] = Inbound{};
  for (auto& m : outbox_[i]) {
    if (m.request) failed(m.request, send_error);
  }
  outbox_[i].clear();
  for (auto& [id, request] : awaiting_[i]) failed(request, send_error);
  awaiting_[i].clear();
}

bool ShmP2pTransport::peer_failed(int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) return false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (gone_[static_cast<size_t>(peer)]) return true;
  }
  return options_.watch != nullptr && options_.watch->peer_failed(peer);
}

bool ShmP2pTransport::peer_crashed(int peer) const {
  return options_.watch != nullptr && options_.watch->peer_crashed(peer);
}

}  // namespace tdist::transport::shm
