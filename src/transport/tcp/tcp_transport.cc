#include "transport/tcp/tcp_transport.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/completion_thread.h"
#include "common/error_text.h"
#include "tdist/errors.h"
#include "tdist/logging.h"

namespace tdist::transport {
namespace {

using tcp::Header;
using tcp::Incoming;
using tcp::Pair;
using tcp::RecvOp;
using tcp::SendOp;

// A zero-byte message with this tag says "I am shutting down on purpose".
constexpr uint64_t kGoodbyeTag = ~uint64_t{0};
// "I am giving up on the group, and here is why": the payload is one kind
// byte (1: a timeout) and the reason's text, so peers can report the real
// cause instead of a bare disconnect.
constexpr uint64_t kAbortTag = ~uint64_t{0} - 1;
constexpr size_t kMaxAbortReason = 4096;

bool is_timeout(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const DistTimeoutError&) {
    return true;
  } catch (...) {
    return false;
  }
}
// Bytes read from one peer before the lock is released and other peers (and
// threads posting operations) get their turn; epoll is level-triggered, so
// the rest is picked up on the next round.
constexpr size_t kReadBudget = size_t{1} << 20;
// How long a transport broken by a crashed peer keeps its connections open on
// destruction, so every survivor learns of the crash from the dead rank
// itself (see ~TcpTransport).
constexpr auto kCrashLinger = std::chrono::seconds(1);

bool matches(int want_src, uint64_t want_tag, int src, uint64_t tag) {
  return (want_src == kAnySource || want_src == src) && want_tag == tag;
}

std::exception_ptr too_big(int rank, int src, uint64_t tag, size_t size, size_t capacity) {
  return std::make_exception_ptr(
      DistBackendError("rank " + std::to_string(rank) + ": receive from rank " + std::to_string(src) +
                       " (tag " + std::to_string(tag) + "): the message has " + std::to_string(size) +
                       " bytes but the receive buffer holds only " + std::to_string(capacity) +
                       " (do the ranks pass tensors of different sizes?)"));
}

}  // namespace

TcpTransport::TcpTransport(int rank, int size, std::vector<Socket> sockets,
                           std::vector<std::string> addresses)
    : rank_(rank), size_(size), pairs_(static_cast<size_t>(size)) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0)
    throw DistNetworkError("tcp transport: epoll/eventfd: " + errno_text(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = static_cast<uint64_t>(size);  // index past the pairs = the wake fd
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  for (int peer = 0; peer < size; ++peer) {
    Pair& pair = pairs_[static_cast<size_t>(peer)];
    pair.peer = peer;
    if (peer == rank) continue;
    pair.socket = std::move(sockets[static_cast<size_t>(peer)]);
    pair.address = addresses[static_cast<size_t>(peer)];
    pair.socket.set_nonblocking(true);
    pair.socket.set_nodelay(true);
    ev.events = EPOLLIN;
    ev.data.u64 = static_cast<uint64_t>(peer);
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, pair.socket.fd(), &ev) != 0) {
      throw DistNetworkError("tcp transport: epoll_ctl: " + errno_text(errno));
    }
  }
  thread_ = std::thread([this] { loop(); });
}

TcpTransport::~TcpTransport() {
  {
    // After a peer crashed, the other survivors may not have read its
    // end-of-stream yet (it can sit behind data still draining from the dead
    // process's socket). Closing now would make them blame this rank instead;
    // keep reading, for a moment at most, until the others have closed too.
    std::unique_lock<std::mutex> lock(mutex_);
    if (broken_by_crash_) {
      closed_cv_.wait_for(lock, kCrashLinger, [&] {
        for (const auto& pair : pairs_) {
          if (pair.peer != rank_ && !pair.closed) return false;
        }
        return true;
      });
    }
  }
  {
    // Tell every live peer this is a clean shutdown, so its pending
    // any-source receives are not failed as if we had crashed. Best effort:
    // a full socket buffer just means the peer learns from the EOF.
    std::lock_guard<std::mutex> lock(mutex_);
    Header bye{kGoodbyeTag, 0};
    for (auto& pair : pairs_) {
      if (pair.peer == rank_ || pair.closed || !pair.sends.empty()) continue;
      (void)pair.socket.try_send(&bye, sizeof(bye));
    }
  }
  stopping_ = true;
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  // Fail what is still pending here, without an abort notice: the peers got
  // a goodbye, and a clean shutdown is not their error.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    abort_locked(std::make_exception_ptr(DistBackendError(
        "rank " + std::to_string(rank_) + ": the transport was destroyed with this operation pending")));
  }
  flush();
  close(epoll_fd_);
  close(wake_fd_);
}

bool TcpTransport::peer_failed(int peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peer >= 0 && peer < size_ && pairs_[static_cast<size_t>(peer)].closed;
}

std::exception_ptr TcpTransport::closed_error(const Pair& pair, const char* what) const {
  if (pair.error) return pair.error;
  return std::make_exception_ptr(DistNetworkError("rank " + std::to_string(rank_) + ": " + what + " rank " +
                                                  std::to_string(pair.peer) + ": its connection is closed"));
}

RequestPtr TcpTransport::isend(int dst, uint64_t tag, const void* data, size_t nbytes) {
  if (dst < 0 || dst >= size_) {
    throw DistInvalidArgument("send: destination rank " + std::to_string(dst) + " is not in [0, " +
                              std::to_string(size_) + ")");
  }
  auto request = std::make_shared<Request>(Request::Kind::kSend, dst, tag, nbytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    post_send(request, dst, tag, static_cast<const uint8_t*>(data), nbytes);
  }
  flush();
  return request;
}

void TcpTransport::post_send(const RequestPtr& request, int dst, uint64_t tag, const uint8_t* data,
                             size_t nbytes) {
  if (aborted_) {
    failed(request, aborted_);
    return;
  }
  if (dst == rank_) {
    deliver_local(rank_, tag, data, nbytes);
    completed(request, rank_, nbytes);
    return;
  }
  Pair& pair = pairs_[static_cast<size_t>(dst)];
  if (pair.closed) {
    failed(request, closed_error(pair, "send to"));
    return;
  }
  pair.sends.push_back(SendOp{request, Header{tag, nbytes}, data, nbytes});
  // Write at once from this thread when nothing is queued ahead: small
  // messages then leave without waking the loop thread.
  if (pair.sends.size() == 1) write_some(pair);
  update_polling(pair);
}

RequestPtr TcpTransport::irecv(int src, uint64_t tag, void* data, size_t nbytes) {
  auto request = std::make_shared<Request>(Request::Kind::kRecv, src, tag, nbytes);
  return post_recv(RecvOp{src, tag, data, nbytes, nullptr, request});
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

void TcpTransport::match_recv(RecvOp op) {
  if (aborted_) {
    failed(op.request, aborted_);
    return;
  }
  // The oldest matching message that came early wins.
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (it->claimed || !matches(op.src, op.tag, it->src, it->tag)) continue;
    if (it->complete) {
      finish_into(op, it->src, it->data.data(), it->data.size());
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
}

void TcpTransport::completed(const RequestPtr& request, int source, size_t bytes) {
  completions_.push_back(Completion{request, source, bytes, nullptr});
}

void TcpTransport::failed(const RequestPtr& request, std::exception_ptr error) {
  completions_.push_back(Completion{request, -1, 0, std::move(error)});
}

void TcpTransport::flush() {
  std::vector<Completion> done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done.swap(completions_);
  }
  // Outside the lock: waking waiters and running their callbacks may post
  // new operations on this transport.
  for (auto& c : done) {
    if (c.error) {
      c.request->fail(c.error);
    } else {
      c.request->complete(c.source, c.bytes);
    }
  }
}

void TcpTransport::finish_into(RecvOp& op, int src, const uint8_t* data, size_t size) {
  if (op.bytes) {
    op.bytes->assign(data, data + size);
  } else if (size > op.capacity) {
    failed(op.request, too_big(rank_, src, op.tag, size, op.capacity));
    return;
  } else if (size > 0) {
    std::memcpy(op.data, data, size);
  }
  completed(op.request, src, size);
}

void TcpTransport::deliver_local(int src, uint64_t tag, const uint8_t* data, size_t size) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if (!matches(it->src, it->tag, src, tag)) continue;
    RecvOp op = std::move(*it);
    posted_.erase(it);
    finish_into(op, src, data, size);
    return;
  }
  Incoming message{src, tag, std::vector<uint8_t>(data, data + size), true, std::nullopt};
  unexpected_.push_back(std::move(message));
}

bool TcpTransport::write_some(Pair& pair) {
  while (!pair.sends.empty()) {
    SendOp& op = pair.sends.front();
    iovec iov[2];
    int count = 0;
    size_t header_left = op.sent < sizeof(Header) ? sizeof(Header) - op.sent : 0;
    if (header_left > 0) {
      iov[count++] = {reinterpret_cast<uint8_t*>(&op.header) + op.sent, header_left};
    }
    size_t data_done = op.sent > sizeof(Header) ? op.sent - sizeof(Header) : 0;
    if (op.size > data_done) iov[count++] = {const_cast<uint8_t*>(op.data) + data_done, op.size - data_done};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    ssize_t n = sendmsg(pair.socket.fd(), &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      int err = errno;
      close_pair(
          pair,
          std::make_exception_ptr(DistNetworkError(
              "rank " + std::to_string(rank_) + ": sending to rank " + std::to_string(pair.peer) + " (" +
              pair.address + ") failed: " + errno_text(err) + "; the peer process probably died")),
          true);
      return true;
    }
    op.sent += static_cast<size_t>(n);
    if (op.sent == sizeof(Header) + op.size) {
      RequestPtr request = op.request;
      size_t size = op.size;
      pair.sends.pop_front();
      completed(request, rank_, size);
    }
  }
  return true;
}

void TcpTransport::update_polling(Pair& pair) {
  if (pair.closed) return;
  bool want_out = !pair.sends.empty();
  if (want_out == pair.polling_out) return;
  epoll_event ev{};
  ev.events = want_out ? (EPOLLIN | EPOLLOUT) : EPOLLIN;
  ev.data.u64 = static_cast<uint64_t>(pair.peer);
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, pair.socket.fd(), &ev);
  pair.polling_out = want_out;
}

void TcpTransport::start_payload(Pair& pair) {
  const Header& h = pair.header;
  pair.in_payload = true;
  pair.payload_got = 0;
  pair.to_incoming = false;
  pair.direct.reset();
  pair.target = nullptr;
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if (!matches(it->src, it->tag, pair.peer, h.tag)) continue;
    RecvOp op = std::move(*it);
    posted_.erase(it);
    if (op.bytes) {
      op.bytes->resize(h.size);
      pair.target = op.bytes->data();
    } else if (h.size > op.capacity) {
      // Read the message aside, then fail the receive naming both sizes.
      pair.overflow.resize(h.size);
      pair.target = pair.overflow.data();
    } else {
      pair.target = static_cast<uint8_t*>(op.data);
    }
    pair.direct = std::move(op);
    return;
  }
  unexpected_.push_back(Incoming{pair.peer, h.tag, std::vector<uint8_t>(h.size), false, std::nullopt});
  pair.incoming = std::prev(unexpected_.end());
  pair.to_incoming = true;
  pair.target = pair.incoming->data.data();
}

void TcpTransport::finish_payload(Pair& pair) {
  pair.in_payload = false;
  pair.header_got = 0;
  size_t size = pair.header.size;
  if (pair.reading_abort) {
    pair.reading_abort = false;
    bool timeout = size > 0 && pair.overflow[0] == 1;
    std::string reason(pair.overflow.begin() + (size > 0 ? 1 : 0), pair.overflow.end());
    std::string message = "rank " + std::to_string(rank_) + ": rank " + std::to_string(pair.peer) +
                          " aborted the group: " + reason;
    auto error = timeout ? std::make_exception_ptr(DistNetworkTimeoutError(message))
                         : std::make_exception_ptr(DistNetworkError(message));
    if (!aborted_) TDIST_LOG(WARNING) << "tcp transport: " << message;
    pair.said_goodbye = true;
    break_locked(error);
    return;
  }
  if (pair.direct) {
    RecvOp op = std::move(*pair.direct);
    pair.direct.reset();
    if (!op.bytes && size > op.capacity) {
      failed(op.request, too_big(rank_, pair.peer, op.tag, size, op.capacity));
      pair.overflow.clear();
      pair.overflow.shrink_to_fit();
    } else {
      completed(op.request, pair.peer, size);
    }
    return;
  }
  if (pair.to_incoming) {
    pair.to_incoming = false;
    Incoming& message = *pair.incoming;
    message.complete = true;
    if (message.claimed) {
      RecvOp op = std::move(*message.claimed);
      finish_into(op, message.src, message.data.data(), message.data.size());
      unexpected_.erase(pair.incoming);
    }
  }
}

void TcpTransport::read_some(Pair& pair, size_t budget) {
  while (!pair.closed && budget > 0) {
    Socket::IoResult r;
    if (!pair.in_payload) {
      r = pair.socket.try_recv(reinterpret_cast<uint8_t*>(&pair.header) + pair.header_got,
                               sizeof(Header) - pair.header_got);
    } else {
      size_t want = std::min(budget, pair.header.size - pair.payload_got);
      r = pair.socket.try_recv(pair.target + pair.payload_got, want);
    }
    if (r.error == EAGAIN || r.error == EWOULDBLOCK) return;
    if (r.eof || r.error != 0) {
      bool mid_message = pair.in_payload || pair.header_got > 0;
      std::string why = r.eof ? "closed the connection" : "connection failed: " + errno_text(r.error);
      if (mid_message) why += " in the middle of a message";
      bool crashed = !pair.said_goodbye;
      close_pair(pair,
                 std::make_exception_ptr(
                     DistNetworkError("rank " + std::to_string(rank_) + ": rank " +
                                      std::to_string(pair.peer) + " (" + pair.address + ") " + why +
                                      (crashed ? "; the peer process probably died or was killed"
                                               : " after shutting down its process group"))),
                 crashed);
      return;
    }
    budget -= std::min(budget, r.bytes);
    if (!pair.in_payload) {
      pair.header_got += r.bytes;
      if (pair.header_got < sizeof(Header)) continue;
      if (pair.header.tag == kAbortTag) {
        if (pair.header.size > kMaxAbortReason + 1) pair.header.size = 0;  // not ours to trust
        pair.in_payload = true;
        pair.payload_got = 0;
        pair.reading_abort = true;
        pair.overflow.resize(pair.header.size);
        pair.target = pair.overflow.data();
        if (pair.header.size > 0) continue;
      } else if (pair.header.tag == kGoodbyeTag) {
        pair.said_goodbye = true;
        pair.header_got = 0;
        continue;
      }
      start_payload(pair);
      if (pair.header.size > 0) continue;
    } else {
      pair.payload_got += r.bytes;
      if (pair.payload_got < pair.header.size) continue;
    }
    finish_payload(pair);
  }
}

void TcpTransport::close_pair(Pair& pair, std::exception_ptr error, bool crashed) {
  if (pair.closed) return;
  pair.closed = true;
  pair.error = error;
  // When one rank dies, the others see it at about the same time, and a
  // survivor that gives up can close its own connections before this rank
  // has read the dead one's. Read what the other connections already hold
  // first, so that the error reported is the root cause (the dead rank), not
  // a survivor's reaction to it.
  if (!aborted_ && !sweeping_) {
    sweeping_ = true;
    // Everything they hold: a dead peer's end-of-stream sits behind the data
    // it sent before dying (a socket buffer's worth at most).
    for (auto& other : pairs_) {
      if (other.peer != rank_ && !other.closed) read_some(other, SIZE_MAX);
    }
    sweeping_ = false;
  }
  // Once the group is broken, later disconnects are consequences, not news.
  if (crashed && !aborted_) TDIST_LOG(WARNING) << "tcp transport: " << exception_text(error);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, pair.socket.fd(), nullptr);
  pair.socket.close();
  for (auto& op : pair.sends) failed(op.request, error);
  pair.sends.clear();
  if (pair.direct) {
    failed(pair.direct->request, error);
    pair.direct.reset();
  }
  for (auto it = unexpected_.begin(); it != unexpected_.end();) {
    if (it->src == pair.peer && !it->complete) {
      if (it->claimed) failed(it->claimed->request, error);
      it = unexpected_.erase(it);
    } else {
      ++it;
    }
  }
  // Receives naming this peer can never complete. Any-source receives still
  // can, from others, unless the peer crashed: then the job is broken and
  // waiting on would only end at the timeout.
  for (auto it = posted_.begin(); it != posted_.end();) {
    if (it->src == pair.peer || (crashed && it->src == kAnySource)) {
      failed(it->request, error);
      it = posted_.erase(it);
    } else {
      ++it;
    }
  }
  pair.in_payload = false;
  pair.header_got = 0;
  // A crashed peer breaks every collective of the group: fail all pending
  // and future operations now, naming it, instead of letting ranks that were
  // waiting on someone else find out at the timeout.
  closed_cv_.notify_all();
  if (crashed && !aborted_) broken_by_crash_ = true;
  if (crashed) break_locked(error);
}

void TcpTransport::break_locked(std::exception_ptr error) {
  if (!aborted_) aborted_ = error;
  error = aborted_;
  for (auto& pair : pairs_) {
    if (pair.peer == rank_) continue;
    for (auto& op : pair.sends) failed(op.request, error);
    pair.sends.clear();
    if (pair.direct) {
      // The rest of this message lands in scratch: the receiver's buffer may
      // be freed as soon as its request has failed.
      failed(pair.direct->request, error);
      pair.direct.reset();
      pair.overflow.resize(pair.header.size);
      pair.target = pair.overflow.data();
    }
  }
  for (auto& op : posted_) failed(op.request, error);
  posted_.clear();
  for (auto& message : unexpected_) {
    if (message.claimed) failed(message.claimed->request, error);
    message.claimed.reset();
  }
}

void TcpTransport::abort(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) {
      // Already broken by a peer's crash: everything pending has failed, and
      // the connections stay open until destruction (see ~TcpTransport).
      break_locked(aborted_);
    } else {
      notify_abort(error);
      abort_locked(error);
    }
  }
  flush();
}

void TcpTransport::notify_abort(const std::exception_ptr& error) {
  std::string reason = exception_text(error).substr(0, kMaxAbortReason);
  std::string payload(1, is_timeout(error) ? '\1' : '\0');
  payload += reason;
  Header header{kAbortTag, payload.size()};
  for (auto& pair : pairs_) {
    // A half-written message cannot be interrupted; that peer learns from
    // the disconnect instead. Best effort: a full socket buffer drops it.
    if (pair.peer == rank_ || pair.closed || (!pair.sends.empty() && pair.sends.front().sent > 0)) continue;
    std::string frame(reinterpret_cast<const char*>(&header), sizeof(header));
    frame += payload;
    (void)pair.socket.try_send(frame.data(), frame.size());
  }
}

void TcpTransport::abort_locked(std::exception_ptr error) {
  if (!aborted_) aborted_ = error;
  for (auto& pair : pairs_) {
    if (pair.peer == rank_) continue;
    if (!pair.closed) {
      pair.closed = true;
      pair.error = error;
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, pair.socket.fd(), nullptr);
      pair.socket.close();
    }
    for (auto& op : pair.sends) failed(op.request, error);
    pair.sends.clear();
    if (pair.direct) failed(pair.direct->request, error);
    pair.direct.reset();
  }
  for (auto& op : posted_) failed(op.request, error);
  posted_.clear();
  for (auto& message : unexpected_) {
    if (message.claimed) failed(message.claimed->request, error);
  }
  unexpected_.clear();
}

void TcpTransport::loop() {
  // Point-to-point works complete here, so their callbacks run here too.
  // (The process group names its transport by its Transport* address.)
  detail::CompletionThreadScope completing(static_cast<const Transport*>(this));
  epoll_event events[64];
  while (!stopping_) {
    int n = epoll_wait(epoll_fd_, events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      TDIST_LOG(ERROR) << "tcp transport: epoll_wait: " << errno_text(errno);
      return;
    }
    for (int i = 0; i < n; ++i) {
      size_t index = events[i].data.u64;
      if (index >= pairs_.size()) {
        uint64_t value = 0;
        (void)!read(wake_fd_, &value, sizeof(value));
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        Pair& pair = pairs_[index];
        if (pair.closed) continue;
        if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) read_some(pair, kReadBudget);
        if (!pair.closed && (events[i].events & EPOLLOUT)) {
          write_some(pair);
          update_polling(pair);
        }
      }
      flush();
    }
  }
}

}  // namespace tdist::transport
