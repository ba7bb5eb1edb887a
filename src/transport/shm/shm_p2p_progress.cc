// ShmP2pTransport: moving the data. Reading every ring from the peers,
// writing what is queued for them, copies out of peers' memory, the waits
// of threads that move data themselves, the background thread, and the
// checks that find aborted and vanished peers.

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/completion_thread.h"
#include "common/stream_copy.h"
#include "tdist/errors.h"
#include "transport/message_checks.h"
#include "transport/shm/shm_p2p_transport.h"
#include "transport/shm/shm_single_copy.h"

namespace tdist::transport::shm {
namespace {

namespace sig = tdist::detail;

// How often a thread that moves data looks for aborted and vanished peers.
constexpr auto kCheckEvery = std::chrono::milliseconds(5);
// How long the background thread sleeps between looks when nothing is
// pending here (a knock wakes it sooner).
constexpr auto kIdleSleep = std::chrono::milliseconds(50);
// After a wait of the rank's own ends, the background thread looks in this
// often, without listening, before it listens again: a rank that is
// exchanging messages is back in a wait soon.
constexpr auto kQuietAfterWait = std::chrono::milliseconds(1);

// Thrown out of a wait's check to go back to moving data.
struct StopWaiting {};

// Polls of a ring's next slot before a waiter turns to the doorbell (a few
// microseconds, as many as the doorbell's wait spins before it first
// yields: an exchange's reply is usually there by then, and past them that
// wait yields and sleeps). Ranks that outnumber their cores poll only as
// long as their policy spins at all: the peer may need this core (4 ranks
// on 2 vCPUs: 64 KiB exchanges took 47-71 us with 256 polls, 35-43 without).
int ring_polls(const WaitPolicy& policy) {
  constexpr int kRingPolls = 256;
  return policy.spin_time.count() > 0 ? kRingPolls : std::min(kRingPolls, policy.spins);
}

// The transport whose data this thread moves in wait(), if any.
thread_local const ShmP2pTransport* t_driving = nullptr;

}  // namespace

uint64_t ShmP2pTransport::ring_end(int p) const {
  // `read` is this rank's own count of the ring, moved under the lock.
  const uint64_t first = counters(p, rank_).read.load(std::memory_order_acquire);
  uint64_t n = first;
  while (n - first < layout_.ring_slots && slot_ready(slot(p, rank_, n), n)) ++n;
  return n;
}

bool ShmP2pTransport::unread_slots() const {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    // Acquire: a refusal read before the count moved is marked
    // (take_rejection).
    const uint64_t next = counters(p, rank_).read.load(std::memory_order_acquire);
    if (slot_ready(slot(p, rank_, next), next)) return true;
  }
  return false;
}

void ShmP2pTransport::read_notes_locked(int p) {
  for (;;) {
    const uint64_t r = read_[static_cast<size_t>(p)];
    const uint8_t* s = slot(p, rank_, r);
    if (!slot_ready(s, r)) return;
    const uint8_t* payload = nullptr;
    const SlotHeader header = read_slot(s, &payload);
    if (header.kind != SlotKind::kAck && header.kind != SlotKind::kRefusal) return;
    read_slot_locked(p, header, payload);
    slot_read_locked(p);
  }
}

void ShmP2pTransport::slot_read_locked(int p) {
  RingCounters& c = counters(p, rank_);
  const uint64_t r = ++read_[static_cast<size_t>(p)];
  // seq_cst: pairs with the sender's sender_waits store and re-read.
  c.read.store(r, std::memory_order_seq_cst);
  if (c.sender_waits.load(std::memory_order_seq_cst) != 0) {
    c.sender_waits.store(0, std::memory_order_relaxed);
    knock(area(p));
  }
}

bool ShmP2pTransport::ring_moved_soon(int p, uint64_t end, const Request& request, int polls) const {
  for (int i = 0; i < polls; ++i) {
    if (ring_end(p) != end || request.done()) return true;
    cpu_relax();
  }
  return false;
}

bool ShmP2pTransport::quiet() const {
  if (busy_.load(std::memory_order_acquire)) return false;
  if (coarse_now().time_since_epoch().count() >= next_check_.load(std::memory_order_relaxed)) return false;
  return !unread_slots();
}

void ShmP2pTransport::note_busy_locked() {
  bool busy = !reads_.empty();
  for (size_t i = 0; i < outbox_.size() && !busy; ++i) busy = !outbox_[i].empty();
  for (auto it = unexpected_.begin(); it != unexpected_.end() && !busy; ++it) busy = it->in_peer;
  busy_.store(busy, std::memory_order_relaxed);
}

bool ShmP2pTransport::progress() {
  // Marked as the transport's completion thread, as TCP's loop and driving
  // threads are: a callback that waits for another point-to-point
  // operation raises "would deadlock" instead of waiting for itself.
  detail::CompletionThreadScope completing(static_cast<const Transport*>(this));
  if (quiet()) {
    deliver_completions();
    return false;
  }
  bool moved = false;
  bool reads = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!closing_) {
      for (int p = 0; p < size_; ++p) {
        if (p != rank_) read_ring_locked(p, moved);
      }
      for (int p = 0; p < size_; ++p) {
        if (p != rank_ && !outbox_[static_cast<size_t>(p)].empty()) moved = flush_locked(p) || moved;
      }
      buffer_waiting_reads_locked();
      const auto now = coarse_now().time_since_epoch().count();
      if (now >= next_check_.load(std::memory_order_relaxed)) {
        next_check_.store(now + Clock::duration(kCheckEvery).count(), std::memory_order_relaxed);
        check_failures_locked();
      }
      note_busy_locked();
    }
    reads = !reads_.empty();
  }
  while (reads) {
    std::optional<PeerRead> read;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (reads_.empty()) break;
      read = std::move(reads_.front());
      reads_.pop_front();
    }
    run_peer_read(*read);
    moved = true;
  }
  deliver_completions();
  return moved;
}

void ShmP2pTransport::read_ring_locked(int p, bool& moved) {
  const uint64_t& r = read_[static_cast<size_t>(p)];
  for (;;) {
    const uint8_t* s = slot(p, rank_, r);
    if (!slot_ready(s, r)) break;
    const uint8_t* payload = nullptr;
    const SlotHeader header = read_slot(s, &payload);
    if (waits_in_ring_locked(p, header)) break;
    read_slot_locked(p, header, payload);
    slot_read_locked(p);
    moved = true;
  }
}

bool ShmP2pTransport::try_recv_now(int src, uint64_t tag, void* data, size_t nbytes,
                                   const sig::CallSignature& sig) {
  const uint64_t slots = at_once_slots_for(src, nbytes);
  if (slots == 0) return false;
  // A refusal to raise goes the usual way (take_rejection).
  if (rejection_pending_.load(std::memory_order_acquire)) return false;
  const auto i = static_cast<size_t>(src);
  const std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_ || closing_) return false;
  // The oldest message that came early and matches is this receive's; an
  // earlier receive that matches the ring's next message is that one's.
  auto early = early_message_locked(src, tag);
  if (early != unexpected_.end()) {
    const Incoming& m = *early;
    if (m.in_peer || m.got != m.size || m.size != nbytes || signatures_differ(sig, m.sig)) return false;
    if (nbytes > 0) std::memcpy(data, m.data.get(), nbytes);
    unexpected_.erase(early);
    return true;
  }
  if (inbound_[i].into != Inbound::Into::kNothing || posted_for_locked(src, tag)) return false;
  const uint64_t r = read_[i];
  const uint8_t* s = slot(src, rank_, r);
  if (!slot_ready(s, r)) return false;
  const uint8_t* payload = nullptr;
  const SlotHeader header = read_slot(s, &payload);
  if (header.kind != SlotKind::kMessage || header.carry != Carry::kSlots || header.total != nbytes ||
      !receive_matches(src, tag, src, header.tag) || signatures_differ(sig, header.sig)) {
    return false;
  }
  // A message's slots follow each other in the ring (its sender writes
  // nothing else to this rank between them): all must be here, and carry
  // all of its bytes (a message cut short by its sender's abort does not).
  size_t whole = header.chunk;
  for (uint64_t k = 1; k < slots; ++k) {
    const uint8_t* next = slot(src, rank_, r + k);
    if (!slot_ready(next, r + k)) return false;
    const SlotHeader more = read_slot(next, &payload);
    if (more.kind != SlotKind::kMore) return false;
    whole += more.chunk;
  }
  if (whole != nbytes) return false;
  auto* out = static_cast<uint8_t*>(data);
  size_t got = 0;
  for (uint64_t k = 0; k < slots; ++k) {
    const SlotHeader part = read_slot(slot(src, rank_, r + k), &payload);
    if (part.chunk > 0) std::memcpy(out + got, payload, part.chunk);
    got += part.chunk;
    slot_read_locked(src);
  }
  // A streamed message held in the ring for its receive (waits_in_ring_locked)
  // was taken: the next one gets its own patience.
  held_since_[i] = {};
  return true;
}

bool ShmP2pTransport::try_recv_soon(int src, uint64_t tag, void* data, size_t nbytes,
                                    const sig::CallSignature& sig) {
  // This thread reads the ring as a wait would: the background thread
  // stops listening (run_background) once a knock has woken it, instead
  // of being woken by every message to this rank, at the cost of a
  // context switch on the core this thread needs. Also when the message is
  // here already: a rank whose receives all find their message would
  // otherwise never say it reads.
  const uint64_t slots = at_once_slots_for(src, nbytes);
  if (slots == 0) return false;
  last_drive_end_.store(coarse_now().time_since_epoch().count(), std::memory_order_relaxed);
  if (try_recv_now(src, tag, data, nbytes, sig)) return true;
  // Lock-free polls of the ring's slot that completes such a message, as
  // wait() polls before it turns to the doorbell; then the usual look,
  // under the lock, at what came (whether it is this receive's). A slot
  // read meanwhile by another thread leaves this one ready for a while,
  // and try_recv_now finds it taken.
  const uint64_t last = counters(src, rank_).read.load(std::memory_order_acquire) + slots - 1;
  const uint8_t* s = slot(src, rank_, last);
  const int polls = ring_polls(options_.policy);
  for (int i = 0; i < polls; ++i) {
    if (slot_ready(s, last)) return try_recv_now(src, tag, data, nbytes, sig);
    cpu_relax();
  }
  // Ranks that outnumber their CPUs poll only a few times: the sender may
  // be waiting for this very core. Yield it as a wait would before it
  // sleeps (wait_at_least), looking after each yield: a message that comes
  // then is taken with no work, and its sender wakes no sleeper. A yield
  // that kept this thread off its core for long gave it to some other
  // computation: then the receive goes the usual way, and sleeps.
  // At most kQuietAfterWait in all, and saying each time that this thread
  // reads the ring: the background thread keeps out meanwhile (it would
  // copy the message aside, and take the core), and a peer that never
  // sends (dead, or sending something else) costs one such look before the
  // usual wait, which watches for failures.
  if (options_.policy.spin_time.count() > 0) return false;
  using SteadyClock = std::chrono::steady_clock;
  auto before = SteadyClock::now();
  const auto give_up = before + kQuietAfterWait;
  for (int i = 0; i < options_.policy.yields; ++i) {
    sched_yield();
    last_drive_end_.store(coarse_now().time_since_epoch().count(), std::memory_order_relaxed);
    if (slot_ready(s, last)) return try_recv_now(src, tag, data, nbytes, sig);
    const auto after = SteadyClock::now();
    if (after - before >= kYieldGaveCoreAway || after >= give_up) break;
    before = after;
  }
  return false;
}

bool ShmP2pTransport::posted_for_locked(int src, uint64_t tag) const {
  return std::any_of(posted_.begin(), posted_.end(),
                     [&](const RecvOp& op) { return receive_matches(op.src, op.tag, src, tag); });
}

ShmP2pTransport::Early ShmP2pTransport::early_message_locked(int src, uint64_t tag) {
  return std::find_if(unexpected_.begin(), unexpected_.end(), [&](const Incoming& m) {
    return !m.claimed && receive_matches(src, tag, m.src, m.tag);
  });
}

bool ShmP2pTransport::waits_in_ring_locked(int p, const SlotHeader& header) {
  const auto i = static_cast<size_t>(p);
  if (header.kind != SlotKind::kMessage || header.carry != Carry::kSlots || header.total <= kP2pSlotPayload) {
    return false;
  }
  if (posted_for_locked(p, header.tag)) {
    held_since_[i] = {};
    return false;
  }
  // A streamed message no receive takes yet stays in the ring (with what
  // follows it from this peer) for a while: its receive may come soon, and
  // then the bytes go straight into it instead of into a fresh buffer.
  const auto now = coarse_now();
  if (held_since_[i] == Clock::time_point{}) held_since_[i] = now;
  if (now - held_since_[i] < p2p_patience(header.total)) return true;
  held_since_[i] = {};
  return false;
}

void ShmP2pTransport::read_slot_locked(int p, const SlotHeader& header, const uint8_t* payload) {
  const auto i = static_cast<size_t>(p);
  switch (header.kind) {
    case SlotKind::kAck: {
      auto it = awaiting_[i].find(header.id);
      if (it != awaiting_[i].end()) {
        completed(it->second, p, it->second->nbytes());
        awaiting_[i].erase(it);
      }
      return;
    }
    case SlotKind::kRefusal: {
      const std::string reason(reinterpret_cast<const char*>(payload), header.chunk);
      auto error = refused_send_error(rank_, reason);
      auto it = awaiting_[i].find(header.id);
      if (it != awaiting_[i].end()) {
        failed(it->second, error);
        awaiting_[i].erase(it);
      } else {
        rejection_ = error;
        // Published by the ring's `read` count (release): take_rejection.
        rejection_pending_.store(true, std::memory_order_relaxed);
      }
      return;
    }
    case SlotKind::kMore:
      take_stream_locked(p, payload, header.chunk);
      return;
    case SlotKind::kMessage:
      break;
  }
  if (!header.sig.empty() && header.sig.kind != sig::CallKind::kPointToPoint &&
      header.sig.seq >= last_call_[i].seq)
    last_call_[i] = header.sig;
  const size_t got = header.carry == Carry::kSlots ? header.chunk : 0;
  auto it = std::find_if(posted_.begin(), posted_.end(),
                         [&](const RecvOp& op) { return receive_matches(op.src, op.tag, p, header.tag); });
  if (it != posted_.end()) {
    RecvOp op = take_posted_locked(it);
    const bool more = deliver(op, p, header, payload, got);
    if (header.carry == Carry::kSlots && got < header.total) {
      Inbound& in = inbound_[i];
      in = Inbound{};
      in.into = more ? Inbound::Into::kReceive : Inbound::Into::kDiscard;
      if (more) in.op = std::move(op);
      in.total = header.total;
      in.got = got;
    }
    return;
  }
  Incoming& m = unexpected_.push_back(Incoming{
      p, header.tag, header.sig, header.total,
      header.carry == Carry::kSlots && header.total > 0 ? detail::Scratch(header.total) : detail::Scratch()});
  if (header.carry == Carry::kPeerRead) {
    busy_.store(true, std::memory_order_relaxed);  // buffer_waiting_reads_locked copies it in time
    m.in_peer = true;
    m.address = header.address;
    m.id = header.id;
    m.arrived = coarse_now();
    return;
  }
  if (got > 0) std::memcpy(m.data.get(), payload, got);
  m.got = got;
  if (got < header.total) {
    Inbound& in = inbound_[i];
    in = Inbound{};
    in.into = Inbound::Into::kUnexpected;
    in.incoming = std::prev(unexpected_.end());
    in.total = header.total;
    in.got = got;
  }
}

void ShmP2pTransport::take_stream_locked(int p, const uint8_t* payload, size_t n) {
  Inbound& in = inbound_[static_cast<size_t>(p)];
  switch (in.into) {
    case Inbound::Into::kReceive:
      std::memcpy(in.op->data + in.got, payload, n);
      in.got += n;
      if (in.got == in.total) {
        completed(in.op->request, p, in.total);
        in = Inbound{};
      }
      return;
    case Inbound::Into::kUnexpected: {
      Incoming& m = *in.incoming;
      std::memcpy(m.data.get() + m.got, payload, n);
      m.got += n;
      in.got += n;
      if (in.got < in.total) return;
      if (m.claimed) {
        RecvOp op = std::move(*m.claimed);
        const SlotHeader header{SlotKind::kMessage, Carry::kSlots, m.tag, m.size, m.size, m.id, 0, m.sig};
        (void)deliver(op, p, header, m.data.get(), m.size);
        unexpected_.erase(in.incoming);
      }
      in = Inbound{};
      return;
    }
    case Inbound::Into::kDiscard:
      in.got += n;
      if (in.got >= in.total) in = Inbound{};
      return;
    case Inbound::Into::kNothing:
      return;  // the rest of a message whose peer was failed meanwhile
  }
}

bool ShmP2pTransport::room_now_locked(int p, uint64_t slots) {
  const auto i = static_cast<size_t>(p);
  const uint64_t w = written_[i];
  // The receiver's count as last read: looked up again only when the ring
  // seems full, so a send that fits costs no read of the receiver's line.
  uint64_t& r = freed_[i];
  if (w - r + slots <= layout_.ring_slots) return true;
  r = counters(rank_, p).read.load(std::memory_order_acquire);
  return w - r + slots <= layout_.ring_slots;
}

bool ShmP2pTransport::room_locked(int p) {
  if (room_now_locked(p)) return true;
  const uint64_t w = written_[static_cast<size_t>(p)];
  uint64_t& r = freed_[static_cast<size_t>(p)];
  RingCounters& c = counters(rank_, p);
  // Full: ask the receiver to knock when it frees a slot, then look again
  // (it may have freed one before it saw the request). The thread its
  // knock wakes must find the queue busy_.
  busy_.store(true, std::memory_order_seq_cst);
  c.sender_waits.store(1, std::memory_order_seq_cst);
  r = c.read.load(std::memory_order_seq_cst);
  return w - r < layout_.ring_slots;
}

size_t ShmP2pTransport::put_slot_locked(int p, SlotHeader header, const uint8_t* data, size_t sent) {
  const auto i = static_cast<size_t>(p);
  uint64_t& w = written_[i];
  uint8_t* s = slot(rank_, p, w);
  size_t n = 0;
  if (travels_inline(header)) {
    n = header.total;  // write_slot copies it beside the header
  } else if (header.carry == Carry::kSlots) {
    n = std::min(kP2pSlotPayload, static_cast<size_t>(header.total) - sent);
    // A large message's slots go to memory, a smaller one's stay cached
    // for its reader (kP2pStreamStoreMinBytes).
    if (n > 0 && header.total > kP2pStreamStoreMinBytes) {
      detail::stream_copy(s + kP2pSlotHeaderBytes, data, n);
    } else if (n > 0) {
      std::memcpy(s + kP2pSlotHeaderBytes, data, n);
    }
  }
  header.chunk = n;
  write_slot(s, w, header, data);
  ++w;
  knock(area(p));
  return n;
}

bool ShmP2pTransport::write_message_locked(int p, Outgoing& m) {
  while (room_locked(p)) {
    SlotHeader header = m.header;
    if (m.started) header.kind = SlotKind::kMore;
    // A read of this rank's memory completes at the receiver's
    // acknowledgement: the send is awaited before its header goes out, so
    // that a failed allocation leaves nothing written (the receiver would
    // otherwise read and acknowledge a send nobody waits for).
    const bool read_by_peer = header.carry == Carry::kPeerRead && m.request;
    if (read_by_peer) awaiting_[static_cast<size_t>(p)].emplace(header.id, m.request);
    m.sent += put_slot_locked(p, header, m.data + m.sent, m.sent);
    m.started = true;
    if (header.carry == Carry::kPeerRead || m.sent == header.total) {
      // Bytes in the ring are sent.
      if (m.request && !read_by_peer) completed(m.request, p, header.total);
      return true;
    }
  }
  return false;
}

bool ShmP2pTransport::flush_locked(int p) {
  const auto i = static_cast<size_t>(p);
  auto& box = outbox_[i];
  const uint64_t before = written_[i];
  while (!box.empty() && write_message_locked(p, box.front())) box.pop_front();
  return written_[i] != before;
}

void ShmP2pTransport::buffer_waiting_reads_locked() {
  if (unexpected_.empty()) return;
  const auto now = coarse_now();
  for (auto it = unexpected_.begin(); it != unexpected_.end();) {
    Incoming& m = *it;
    if (!m.in_peer || now - m.arrived < p2p_patience(m.size)) {
      ++it;
      continue;
    }
    // No receive came for it: copy it here, so that its send completes.
    detail::Scratch bytes(m.size);
    try {
      read_peer_memory(pids_[static_cast<size_t>(m.src)], m.src, bytes.get(),
                       reinterpret_cast<const void*>(static_cast<uintptr_t>(m.address)), m.size);
    } catch (const DistError&) {
      // Its sender is gone; the failure checks say so to its receives.
      it = unexpected_.erase(it);
      continue;
    }
    m.data = std::move(bytes);
    m.got = m.size;
    m.in_peer = false;
    acknowledge(m.src, m.id);
    ++it;
  }
}

void ShmP2pTransport::run_peer_read(PeerRead& read) {
  std::exception_ptr error;
  try {
    // Through the kernel even between ranks that are threads of one
    // process: a sender that gave up (its wait timed out) may free its
    // buffer meanwhile, which makes this copy fail instead of crash.
    read_peer_memory(pids_[static_cast<size_t>(read.src)], read.src, read.op.data,
                     reinterpret_cast<const void*>(static_cast<uintptr_t>(read.address)), read.bytes);
  } catch (...) {
    error = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (error) {
    failed(read.op.request, error);
    return;
  }
  acknowledge(read.src, read.id);
  completed(read.op.request, read.src, read.bytes);
}

void ShmP2pTransport::deliver_completions() {
  // Every call site that queues a completion calls this after it lets go
  // of the lock, so a stale "none" here only means another thread
  // delivers them; most calls find none, and skip the lock.
  if (!completions_queued_.load(std::memory_order_acquire)) return;
  // The queue is swapped with this thread's spare list, whose storage it
  // keeps: no allocation and one lock per delivery. A delivery nested in a
  // callback (which posted an operation) finds no spare and uses a fresh one.
  static thread_local std::vector<Completion> t_spare;
  std::vector<Completion> done;
  done.swap(t_spare);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done.swap(completions_);
    completions_queued_.store(false, std::memory_order_relaxed);
  }
  if (done.empty()) {  // another thread delivered them first
    t_spare.swap(done);
    return;
  }
  // Outside the lock: callbacks may post new operations.
  for (auto& c : done) {
    if (c.error) {
      c.request->fail(c.error);
    } else {
      c.request->complete(c.source, c.bytes);
    }
  }
  done.clear();
  if (t_spare.capacity() < done.capacity()) t_spare.swap(done);
  // Another thread may wait for one of these while this one moved the data.
  if (drivers_.load() > (t_driving == this ? 1 : 0)) ring_bell(area(rank_).bell);
}

void ShmP2pTransport::check_failures_locked() {
  if (aborted_) return;
  if (any_aborted_->seq.load(std::memory_order_acquire) != 0) {
    for (int r = 0; r < size_; ++r) {
      const P2pRankArea& theirs = area(r);
      if (r == rank_ || theirs.aborted.seq.load(std::memory_order_acquire) == 0) continue;
      const std::string reason(theirs.reason, strnlen(theirs.reason, sizeof(theirs.reason)));
      const std::string message =
          "rank " + std::to_string(rank_) + ": rank " + std::to_string(r) + " aborted the group: " + reason;
      abort_locked(abort_error_of_kind(theirs.aborted.payload[0], message), false);
      return;
    }
  }
  if (options_.watch != nullptr) {
    if (auto reason = options_.watch->abort_reason()) {
      abort_locked(reason, false);
      return;
    }
  }
  for (int p = 0; p < size_; ++p) {
    const auto i = static_cast<size_t>(p);
    if (p == rank_ || gone_[i]) continue;
    const P2pRankArea& theirs = area(p);
    const pid_t pid = pids_[i];
    const bool gone = theirs.closed.seq.load(std::memory_order_acquire) != 0 ||
                      (options_.watch != nullptr && options_.watch->peer_failed(p)) ||
                      (pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH);
    // What it sent before it went is still to be read first (a slot it
    // was writing as it died is not ready: its seq comes last).
    if (gone && !slot_ready(slot(p, rank_, read_[i]), read_[i])) fail_peer_locked(p);
  }
}

bool ShmP2pTransport::anything_pending_locked() const {
  if (!posted_.empty() || !reads_.empty()) return true;
  for (const auto& m : unexpected_) {
    if (m.claimed || m.in_peer) return true;
  }
  for (size_t i = 0; i < outbox_.size(); ++i) {
    if (!outbox_[i].empty() || !awaiting_[i].empty() || inbound_[i].op) return true;
  }
  return false;
}

bool ShmP2pTransport::wait(const RequestPtr& request, Clock::time_point deadline) {
  // A send that fit its ring completed as it was posted: nothing to drive.
  if (request->done()) return request->outcome();
  P2pRankArea& own = area(rank_);
  drivers_.fetch_add(1);
  // News for this thread need not wake the background thread too. (Read
  // first: an exchange would take the line from the peers that read it at
  // every knock, twice per message.)
  if (own.listening.load(std::memory_order_relaxed) != 0 && own.listening.exchange(0) != 0)
    muted_.store(true);
  struct Leave {
    ShmP2pTransport& t;
    const ShmP2pTransport* previous = t_driving;
    ~Leave() {
      t_driving = previous;
      t.last_drive_end_.store(coarse_now().time_since_epoch().count(), std::memory_order_relaxed);
      // The background thread was asleep, listening, when this thread
      // began: wake it, so that it looks after what no wait will. Counted
      // in leaving_ meanwhile: once drivers_ is 0 the destructor would
      // otherwise free what the lines after the decrement touch.
      t.leaving_.fetch_add(1);
      if (t.drivers_.fetch_sub(1) == 1 && t.muted_.exchange(false)) ring_bell(t.area(t.rank_).background);
      t.leaving_.fetch_sub(1);
    }
  } leave{*this};
  t_driving = this;
  // The coarse clock (a few ns, a tick behind): read on every wait, where
  // the precise one was a twentieth of a small exchange's time.
  auto next_pass = coarse_now() + kCheckEvery;
  // Whatever completes a request with one peer (its message, the
  // acknowledgement of a read of ours, a refusal) comes through that peer's
  // ring: a waiter watches the ring's next slot first, and the doorbell
  // only after a while. A doorbell read on every message would take its line
  // from the peer, whose atomic ring of it then waits for the line back.
  const int peer = request->peer();
  const bool watch = peer >= 0 && peer < size_ && peer != rank_;
  const int polls = ring_polls(options_.policy);
  while (!request->done()) {
    const uint64_t end = watch ? ring_end(peer) : 0;
    if (progress()) {
      next_pass = coarse_now() + kCheckEvery;
      continue;
    }
    if (request->done()) break;
    if (coarse_now() >= deadline && Clock::now() >= deadline) return false;
    if (watch && ring_moved_soon(peer, end, *request, polls)) continue;
    const uint64_t seen = own.bell.seq.load(std::memory_order_acquire);
    if (progress()) {
      next_pass = coarse_now() + kCheckEvery;
      continue;
    }
    if (request->done()) break;
    try {
      wait_at_least(own.bell, seen + 1, options_.policy, [&] {
        const auto now = Clock::now();
        if (now >= deadline || now >= next_pass || request->done()) throw StopWaiting{};
      });
    } catch (const StopWaiting&) {
      next_pass = coarse_now() + kCheckEvery;
    }
  }
  return request->outcome();
}

void ShmP2pTransport::run_background() {
  P2pRankArea& own = area(rank_);
  while (!stop_.load()) {
    const uint64_t seen = own.bell.seq.load(std::memory_order_seq_cst);
    const uint64_t woken = own.background.seq.load(std::memory_order_seq_cst);
    if (drivers_.load() == 0 && progress()) continue;
    std::chrono::nanoseconds sleep = kIdleSleep;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (anything_pending_locked()) sleep = kCheckEvery;
      for (const auto& m : unexpected_) {
        if (m.in_peer) sleep = std::min(sleep, p2p_patience(m.size));
      }
      for (const auto& since : held_since_) {
        if (since != Clock::time_point{}) sleep = std::min<std::chrono::nanoseconds>(sleep, kCheckEvery);
      }
    }
    // While the rank's own threads wait for messages now and then, they
    // move the data: this thread looks in at intervals and does not
    // listen, since a knock that woke it would cost the waiter's core a
    // context switch per message.
    const auto since_drive =
        coarse_now().time_since_epoch() - Clock::duration(last_drive_end_.load(std::memory_order_relaxed));
    if (drivers_.load() != 0 || since_drive < kQuietAfterWait) {
      sleep_while_unchanged(own.background, woken,
                            std::min<std::chrono::nanoseconds>(sleep, kQuietAfterWait));
      continue;
    }
    // Idle: listen, so that a knock wakes this thread at once.
    own.listening.store(1, std::memory_order_seq_cst);
    if (own.bell.seq.load(std::memory_order_seq_cst) == seen && drivers_.load() == 0)
      sleep_while_unchanged(own.background, woken, sleep);
    if (own.listening.exchange(0) == 0) muted_.store(false);  // a waiter muted it meanwhile
  }
}

}  // namespace tdist::transport::shm
