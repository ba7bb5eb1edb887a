// TcpTransport: posting sends and receives, and matching arriving messages to receives by source and tag
// (checking their call signatures).

#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_transport_internal.h"
#include "transport/tcp/tcp_wire.h"

#include <sys/epoll.h>

#include <cstring>
#include <utility>

#include "common/error_text.h"

namespace tdist::transport {

using namespace tcp::internal;  // NOLINT(google-build-using-namespace): this class's own helpers
using tcp::Header;
using tcp::Incoming;
using tcp::kMaxAbortReason;
using tcp::Pair;
using tcp::RecvOp;
using tcp::SendOp;

RequestPtr TcpTransport::isend(int dst, uint64_t tag, const void* data, size_t nbytes,
                               const tdist::detail::CallSignature& sig) {
  auto request = std::make_shared<Request>(Request::Kind::kSend, dst, tag, nbytes);
  isend_into(request, data, sig);
  return request;
}

void TcpTransport::isend_into(const RequestPtr& request, const void* data,
                              const tdist::detail::CallSignature& sig) {
  const int dst = request->peer();
  if (request->kind() != Request::Kind::kSend)
    throw DistInvalidArgument("isend_into: the request is a receive's");
  if (dst < 0 || dst >= size_) {
    throw DistInvalidArgument("send: destination rank " + std::to_string(dst) + " is not in [0, " +
                              std::to_string(size_) + ")");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    post_send(request, dst, request->tag(), static_cast<const uint8_t*>(data), request->nbytes(), sig);
  }
  flush();
}

void TcpTransport::post_send(const RequestPtr& request, int dst, uint64_t tag, const uint8_t* data,
                             size_t nbytes, const tdist::detail::CallSignature& sig) {
  claim_for_call_locked();
  if (aborted_) {
    failed(request, aborted_);
    return;
  }
  if (dst == rank_) {
    deliver_local(rank_, tag, data, nbytes, sig);
    completed(request, rank_, nbytes);
    return;
  }
  Pair& pair = pairs_[static_cast<size_t>(dst)];
  if (pair.closed) {
    failed(request, closed_error(pair, "send to"));
    return;
  }
  const int parts = 1 + static_cast<int>(pair.lanes.size());
  if (parts > 1 && nbytes >= pair.stripe_min) {
    // One stripe per connection; the request completes with the last one.
    auto striped = std::make_shared<tcp::StripedSend>(tcp::StripedSend{request, nbytes, parts});
    pair.sends.push_back(SendOp{request, Header{tag, nbytes, sig}, data, tcp::stripe_begin(nbytes, parts, 1),
                                0, striped, false});
    for (int j = 1; j < parts; ++j) {
      const size_t begin = tcp::stripe_begin(nbytes, parts, j);
      const size_t end = tcp::stripe_begin(nbytes, parts, j + 1);
      tcp::Lane& lane = pair.lanes[static_cast<size_t>(j - 1)];
      if (pair.closed) break;  // a write failed: the request has failed with it
      lane.sends.push_back(SendOp{request, Header{}, data + begin, end - begin, 0, striped, true});
      if (lane.sends.size() == 1) write_queue(pair, lane.socket, lane.sends);
    }
  } else {
    pair.sends.push_back(SendOp{request, Header{tag, nbytes, sig}, data, nbytes});
  }
  // Write at once from this thread when nothing is queued ahead: small
  // messages then leave without waking anyone.
  if (!pair.closed && pair.sends.size() == 1) write_some(pair);
  if (pair.closed || !pair.sending()) return;
  if (driver_.load(std::memory_order_relaxed) == std::thread::id()) {
    update_polling(pair);
    wake_loop_locked();
  } else if (!is_driver_locked()) {
    wake_driver();  // to add this socket's writability to its poll
  }
}

RequestPtr TcpTransport::irecv(int src, uint64_t tag, void* data, size_t nbytes,
                               const tdist::detail::CallSignature& sig) {
  auto request = std::make_shared<Request>(Request::Kind::kRecv, src, tag, nbytes);
  irecv_into(request, data, sig);
  return request;
}

void TcpTransport::irecv_into(const RequestPtr& request, void* data,
                              const tdist::detail::CallSignature& sig) {
  if (request->kind() != Request::Kind::kRecv)
    throw DistInvalidArgument("irecv_into: the request is a send's");
  (void)post_recv(RecvOp{request->peer(), request->tag(), data, request->nbytes(), nullptr, request, sig});
}

RequestPtr TcpTransport::irecv_bytes(int src, uint64_t tag, std::shared_ptr<std::vector<uint8_t>> out) {
  auto request = std::make_shared<Request>(Request::Kind::kRecv, src, tag, SIZE_MAX);
  return post_recv(RecvOp{src, tag, nullptr, SIZE_MAX, std::move(out), request});
}

RequestPtr TcpTransport::post_recv(RecvOp op) {
  if (op.src != kAnySource && (op.src < 0 || op.src >= size_)) {
    throw DistInvalidArgument("recv: source rank " + std::to_string(op.src) + " is not in [0, " +
                              std::to_string(size_) + ")");
  }
  RequestPtr request = op.request;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    match_recv(std::move(op));
  }
  flush();
  return request;
}

std::optional<std::pair<int, tdist::detail::CallSignature>> TcpTransport::conflicting_message(
    const tdist::detail::CallSignature& mine) const {
  std::lock_guard<std::mutex> lock(mutex_);
  // Of this call but not as this rank passed it, or of an earlier call:
  // every message of a call is received in it, so one still here was sent
  // by a peer whose call differed.
  const auto it = unexpected_.first_conflict(mine);
  if (it == unexpected_.end()) return std::nullopt;
  return std::make_pair(it->src, it->sig);
}

void TcpTransport::match_recv(RecvOp op) {
  claim_for_call_locked();
  if (aborted_) {
    failed(op.request, aborted_);
    return;
  }
  // The oldest matching message that came early wins.
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (it->claimed || !receive_matches(op.src, op.tag, it->src, it->tag)) continue;
    if (it->complete) {
      finish_into(op, it->src, it->data.get(), it->size, it->sig);
      unexpected_.erase(it);
    } else {
      it->claimed = std::move(op);
    }
    return;
  }
  if (op.src != kAnySource && pairs_[static_cast<size_t>(op.src)].closed) {
    failed(op.request, closed_error(pairs_[static_cast<size_t>(op.src)], "receive from"));
    return;
  }
  posted_.push_back(std::move(op));
  // The loop sleeps in epoll_wait: listening for the message is enough, no
  // wake-up (a driver, if any, reads it itself).
  if (driver_.load(std::memory_order_relaxed) == std::thread::id()) update_all_polling_locked();
}

void TcpTransport::completed(const RequestPtr& request, int source, size_t bytes) {
  completions_.push_back(Completion{request, source, bytes, nullptr});
}

void TcpTransport::failed(const RequestPtr& request, std::exception_ptr error) {
  completions_.push_back(Completion{request, -1, 0, std::move(error)});
}

void TcpTransport::Completion::deliver() const {
  if (error) {
    request->fail(error);
  } else {
    request->complete(source, bytes);
  }
}

void TcpTransport::flush() {
  std::vector<Completion> done;
  bool driving = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done.swap(completions_);
    if (done.empty()) return;
    driving = is_driver_locked();
  }
  // Outside the lock: waking waiters and running their callbacks may post
  // new operations on this transport. The driver runs no callbacks: it is in
  // the middle of a collective, and a callback that waited for another
  // operation of the group would wait for itself. The loop thread runs them.
  // A driver outside any call (a thread waiting for a point-to-point work)
  // runs them itself once its wait has ended and the role is let go
  // (run_driver_callbacks): a callback that waits then drives afresh, and the
  // loop thread need not be woken.
  const bool in_a_call = driving && in_call(this);
  std::vector<Completion> left;  // settled; their callbacks run elsewhere
  for (auto& c : done) {
    if (!driving) {
      c.deliver();
    } else if (c.request->settle(c.source, c.bytes, c.error)) {
      left.push_back(std::move(c));
    }
  }
  if (!left.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& to = in_a_call ? deferred_ : driver_callbacks_;
    for (auto& c : left) to.push_back(std::move(c));
    if (in_a_call) {
      wake_loop_locked();
      // The loop thread may be in epoll_wait with nothing left to read.
      if (!loop_parked_) interrupt_loop();
    }
  }
  if (!driving) wake_driver_if_polling();
}

void TcpTransport::wake_driver_if_polling() {
  // Asked after the completions, not before: a driver that started polling
  // meanwhile has checked its request before this thread completed it, and
  // may be asleep in poll waiting for it.
  bool polling = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    polling = driving_now_ && !is_driver_locked();
  }
  if (polling) wake_driver();
}

void TcpTransport::interrupt_loop() const {
  signal_fd(wake_fd_);
}

void TcpTransport::finish_into(RecvOp& op, int src, const uint8_t* data, size_t size,
                               const tdist::detail::CallSignature& sig) {
  if (signatures_differ(op.sig, sig)) {
    refuse_locked(op, src, sig);
    return;
  }
  if (op.bytes) {
    op.bytes->assign(data, data + size);
  } else if (size > op.capacity) {
    failed(op.request, too_big_error(rank_, src, op.tag, size, op.capacity));
    return;
  } else if (size > 0) {
    std::memcpy(op.data, data, size);
  }
  completed(op.request, src, size);
}

void TcpTransport::refuse_locked(RecvOp& op, int src, const tdist::detail::CallSignature& theirs) {
  std::exception_ptr error = mismatch_error(rank_, src, op.tag, op.sig, theirs);
  failed(op.request, error);
  if (op.sig.kind != tdist::detail::CallKind::kPointToPoint || src == rank_) return;
  // Collectives abort the group instead (every rank raises); a sender's
  // send has completed by now, so it learns at its next send or recv.
  auto text = std::make_shared<std::string>(exception_text(error).substr(0, kMaxAbortReason));
  auto request = std::make_shared<Request>(Request::Kind::kSend, src, kRejectTag, text->size());
  request->on_complete([text](Request&) {});  // keeps the bytes alive until written
  post_send(request, src, kRejectTag, reinterpret_cast<const uint8_t*>(text->data()), text->size(), {});
}

std::exception_ptr TcpTransport::take_rejection() {
  std::exception_ptr refused;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!rejection_) read_arrived_refusals_locked();
    refused = std::exchange(rejection_, nullptr);
  }
  flush();  // an abort notice read on the way fails what it concerns
  return refused;
}

void TcpTransport::read_arrived_refusals_locked() {
  // A refusal that has reached the socket by the time of the user's next
  // call is raised by that call, whether or not the loop thread has read it
  // yet: one poll of the connections that carried a message of ours, and a
  // look at the next frame of those with bytes waiting.
  refusal_poll_.clear();
  for (const auto& pair : pairs_) {
    if (pair.peer == rank_ || pair.closed || !pair.watch_for_refusal || pair.in_payload ||
        pair.header_got > 0 || pair.staged_len > 0)
      continue;
    refusal_poll_.push_back(pollfd{pair.socket.fd(), POLLIN, 0});
  }
  if (refusal_poll_.empty() || ::poll(refusal_poll_.data(), refusal_poll_.size(), 0) <= 0) return;
  size_t i = 0;
  for (auto& pair : pairs_) {
    if (i == refusal_poll_.size()) break;
    if (pair.closed || pair.socket.fd() != refusal_poll_[i].fd) continue;
    if (refusal_poll_[i++].revents == 0) continue;
    if (next_is_notice(pair)) {
      read_some(pair, kReadBudget);
    } else {
      pair.watch_for_refusal = false;  // another message first; the refusal comes behind it
    }
  }
}

std::optional<tdist::detail::CallSignature> TcpTransport::last_call_from(int peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (peer < 0 || static_cast<size_t>(peer) >= pairs_.size() || pairs_[peer].last_call.empty())
    return std::nullopt;
  return pairs_[peer].last_call;
}

void TcpTransport::announce_waiting(const tdist::detail::CallSignature& sig) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return;
    for (const auto& pair : pairs_) {
      if (pair.peer == rank_ || pair.closed) continue;
      // A header alone: queued behind what is being sent to that peer, and
      // nobody waits for it.
      auto request = std::make_shared<Request>(Request::Kind::kSend, pair.peer, kWaitingTag, 0);
      post_send(request, pair.peer, kWaitingTag, nullptr, 0, sig);
    }
  }
  flush();
}

void TcpTransport::take_in() {
  {
    // Non-blocking reads, under the lock as every read is, so any thread
    // may: the driver's or the loop thread's next poll finds the rest.
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& pair : pairs_) {
      if (pair.peer == rank_ || pair.closed) continue;
      read_some(pair, kReadBudget);
      update_polling(pair);
    }
  }
  flush();
}

std::optional<uint64_t> TcpTransport::waiting_in(int peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (peer < 0 || static_cast<size_t>(peer) >= pairs_.size()) return std::nullopt;
  return pairs_[peer].waiting_in;
}

void TcpTransport::deliver_local(int src, uint64_t tag, const uint8_t* data, size_t size,
                                 const tdist::detail::CallSignature& sig) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if (!receive_matches(it->src, it->tag, src, tag)) continue;
    RecvOp op = std::move(*it);
    posted_.erase(it);
    finish_into(op, src, data, size, sig);
    return;
  }
  Incoming message{src, tag, detail::Scratch(size), size, true, std::nullopt, sig};
  if (size > 0) std::memcpy(message.data.get(), data, size);
  unexpected_.push_back(std::move(message));
}

}  // namespace tdist::transport
