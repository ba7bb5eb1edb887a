#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_wire.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

#include "common/completion_thread.h"
#include "common/env.h"
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

// Microseconds a driver polls before sleeping (spin_time()).
constexpr int64_t kDefaultSpinUs = 50;

// How long a thread waiting on TCP polls before it sleeps in poll():
// TDIST_TCP_SPIN_US, read once.
std::chrono::microseconds spin_time() {
  static const auto spin =
      std::chrono::microseconds(env_int("TDIST_TCP_SPIN_US", 0, 1'000'000).value_or(kDefaultSpinUs));
  return spin;
}

// A zero-byte message with this tag says "I am shutting down on purpose".
constexpr uint64_t kGoodbyeTag = ~uint64_t{0};
// "I am giving up on the group, and here is why": the payload is one kind
// byte and the reason's text (tcp_wire.h), so peers can report the
// real cause instead of a bare disconnect.
constexpr uint64_t kAbortTag = ~uint64_t{0} - 1;
// "Your message (a send) met a receive of another dtype or count": the
// payload is the receiver's error text, which the sender raises at its next
// send or recv.
constexpr uint64_t kRejectTag = ~uint64_t{0} - 2;
using tcp::kMaxAbortReason;  // of refusals too (tcp_wire.h)

// Bytes read from one peer before the lock is released and other peers (and
// threads posting operations) get their turn; epoll is level-triggered, so
// the rest is picked up on the next round.
constexpr size_t kReadBudget = size_t{1} << 20;
// How long a transport broken by a crashed peer keeps its connections open on
// destruction, so every survivor learns of the crash from the dead rank
// itself (see ~TcpTransport).
constexpr auto kCrashLinger = std::chrono::seconds(1);
// A thread that waits while another drives checks back this often, in case
// the driver stops before completing its request.
constexpr auto kDriverRecheck = std::chrono::milliseconds(1);

// The transports on which this thread is inside a collective call.
thread_local std::vector<const Transport*> t_calls;

bool in_call(const Transport* transport) {
  return std::find(t_calls.begin(), t_calls.end(), transport) != t_calls.end();
}

// Eventfds wake a thread in epoll_wait or poll.
void signal_fd(int fd) {
  uint64_t one = 1;
  (void)!write(fd, &one, sizeof(one));
}
void drain_fd(int fd) {
  uint64_t value = 0;
  (void)!read(fd, &value, sizeof(value));
}

timespec to_timespec(Clock::duration d) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::min<Clock::duration>(d, std::chrono::hours(1)))
                      .count();
  return timespec{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}

// epoll/poll ids: the pair's first connection is its peer number, lane j
// (connection j + 1) adds j + 1 in the high half; the wake fd has its own.
constexpr uint64_t kWakeId = ~uint64_t{0};
uint64_t lane_id(int peer, size_t lane) {
  return (static_cast<uint64_t>(lane + 1) << 32) | static_cast<uint32_t>(peer);
}

bool matches(int want_src, uint64_t want_tag, int src, uint64_t tag) {
  return (want_src == kAnySource || want_src == src) && want_tag == tag;
}

// A receive with a signature takes only a message with the same one (a
// message without one, from a caller that checks nothing, passes).
bool signatures_differ(const tcp::RecvOp& op, const tdist::detail::CallSignature& theirs) {
  return !op.sig.empty() && !theirs.empty() && !(op.sig == theirs);
}

std::exception_ptr signature_error(int rank, int src, const tcp::RecvOp& op,
                                   const tdist::detail::CallSignature& theirs) {
  std::string what;
  if (op.sig.kind == tdist::detail::CallKind::kPointToPoint) {
    what = "recv from rank " + std::to_string(src) + " (tag " + std::to_string(op.tag & 0xffffffffU) + ")";
  } else {
    what = tdist::detail::call_kind_name(op.sig.kind);
  }
  return std::make_exception_ptr(
      DistBackendError("rank " + std::to_string(rank) + ": " +
                       tdist::detail::mismatch_message(what, op.sig, rank, theirs, src)));
}

std::exception_ptr too_big(int rank, int src, uint64_t tag, size_t size, size_t capacity) {
  return std::make_exception_ptr(
      DistBackendError("rank " + std::to_string(rank) + ": receive from rank " + std::to_string(src) +
                       " (tag " + std::to_string(tag) + "): the message has " + std::to_string(size) +
                       " bytes but the receive buffer holds only " + std::to_string(capacity) +
                       " (do the ranks pass tensors of different sizes?)"));
}

}  // namespace

size_t tcp::stripe_begin(size_t size, int parts, int i) {
  if (i <= 0) return 0;
  if (i >= parts) return size;
  const size_t begin = size / static_cast<size_t>(parts) * static_cast<size_t>(i);
  return std::min(size, begin / 4096 * 4096);
}

TcpTransport::TcpTransport(int rank, int size, std::vector<std::vector<Socket>> sockets,
                           std::vector<std::string> addresses)
    : rank_(rank), size_(size), pairs_(static_cast<size_t>(size)) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  driver_wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0 || driver_wake_fd_ < 0)
    throw DistNetworkError("tcp transport: epoll/eventfd: " + errno_text(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeId;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  auto watch = [&](const Socket& socket, uint64_t id, uint32_t events) {
    socket.set_nonblocking(true);
    socket.set_nodelay(true);
    epoll_event e{};
    e.events = events;
    e.data.u64 = id;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, socket.fd(), &e) != 0) {
      throw DistNetworkError("tcp transport: epoll_ctl: " + errno_text(errno));
    }
  };
  for (int peer = 0; peer < size; ++peer) {
    Pair& pair = pairs_[static_cast<size_t>(peer)];
    pair.peer = peer;
    if (peer == rank) continue;
    auto& connections = sockets[static_cast<size_t>(peer)];
    pair.socket = std::move(connections.at(0));
    pair.stage.resize(tcp::kStageBytes);
    pair.address = addresses[static_cast<size_t>(peer)];
    pair.polling = EPOLLRDHUP;  // nothing to read yet (update_polling)
    watch(pair.socket, static_cast<uint64_t>(peer), pair.polling);
    pair.lanes.resize(connections.size() - 1);
    for (size_t j = 0; j < pair.lanes.size(); ++j) {
      pair.lanes[j].socket = std::move(connections[j + 1]);
      watch(pair.lanes[j].socket, lane_id(peer, j), 0);  // nothing expected yet
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
      watch_ = true;
      update_all_polling_locked();
      wake_loop_locked();
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
    Header bye{kGoodbyeTag, 0, {}};
    for (auto& pair : pairs_) {
      if (pair.peer == rank_ || pair.closed || pair.sending()) continue;
      (void)pair.socket.try_send(&bye, sizeof(bye));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    wake_loop_locked();
  }
  interrupt_loop();
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
  close(driver_wake_fd_);
}

bool TcpTransport::peer_failed(int peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  // Asked while nobody polls the sockets (a shared-memory collective is
  // waiting): from now on the loop thread watches them whenever no driver
  // does, so that a dead peer's end-of-stream is seen.
  if (!driving_now_ && !watch_) {
    watch_ = true;
    // The one state change a const query makes: what the loop listens to.
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast)
    const_cast<TcpTransport*>(this)->update_all_polling_locked();
    wake_loop_locked();
  }
  return peer >= 0 && peer < size_ && pairs_[static_cast<size_t>(peer)].closed;
}

bool TcpTransport::peer_crashed(int peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peer >= 0 && peer < size_ && pairs_[static_cast<size_t>(peer)].crashed;
}

std::exception_ptr TcpTransport::closed_error(const Pair& pair, const char* what) const {
  if (pair.error) return pair.error;
  return std::make_exception_ptr(DistNetworkError("rank " + std::to_string(rank_) + ": " + what + " rank " +
                                                  std::to_string(pair.peer) + ": its connection is closed"));
}

RequestPtr TcpTransport::isend(int dst, uint64_t tag, const void* data, size_t nbytes,
                               const tdist::detail::CallSignature& sig) {
  if (dst < 0 || dst >= size_) {
    throw DistInvalidArgument("send: destination rank " + std::to_string(dst) + " is not in [0, " +
                              std::to_string(size_) + ")");
  }
  auto request = std::make_shared<Request>(Request::Kind::kSend, dst, tag, nbytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    post_send(request, dst, tag, static_cast<const uint8_t*>(data), nbytes, sig);
  }
  flush();
  return request;
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
  if (parts > 1 && nbytes >= tcp::kStripeMinBytes) {
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
  return post_recv(RecvOp{src, tag, data, nbytes, nullptr, request, sig});
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
  for (const auto& message : unexpected_) {
    // Of this call but not as this rank passed it, or of an earlier call:
    // every message of a call is received in it, so one still here was
    // sent by a peer whose call differed.
    if (!message.sig.empty() && message.sig.kind != tdist::detail::CallKind::kPointToPoint &&
        (message.sig.seq < mine.seq || (message.sig.seq == mine.seq && !(message.sig == mine))))
      return std::make_pair(message.src, message.sig);
  }
  return std::nullopt;
}

void TcpTransport::match_recv(RecvOp op) {
  claim_for_call_locked();
  if (aborted_) {
    failed(op.request, aborted_);
    return;
  }
  // The oldest matching message that came early wins.
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (it->claimed || !matches(op.src, op.tag, it->src, it->tag)) continue;
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
  if (signatures_differ(op, sig)) {
    refuse_locked(op, src, sig);
    return;
  }
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

void TcpTransport::refuse_locked(RecvOp& op, int src, const tdist::detail::CallSignature& theirs) {
  std::exception_ptr error = signature_error(rank_, src, op, theirs);
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
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(rejection_, nullptr);
}

std::optional<tdist::detail::CallSignature> TcpTransport::last_call_from(int peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (peer < 0 || static_cast<size_t>(peer) >= pairs_.size() || pairs_[peer].last_call.empty())
    return std::nullopt;
  return pairs_[peer].last_call;
}

void TcpTransport::deliver_local(int src, uint64_t tag, const uint8_t* data, size_t size,
                                 const tdist::detail::CallSignature& sig) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if (!matches(it->src, it->tag, src, tag)) continue;
    RecvOp op = std::move(*it);
    posted_.erase(it);
    finish_into(op, src, data, size, sig);
    return;
  }
  Incoming message{src, tag, detail::Scratch(size), size, true, std::nullopt, sig};
  if (size > 0) std::memcpy(message.data.get(), data, size);
  unexpected_.push_back(std::move(message));
}

void TcpTransport::write_queue(Pair& pair, const Socket& socket, std::deque<SendOp>& sends) {
  while (!pair.closed && !sends.empty()) {
    SendOp& op = sends.front();
    const size_t header_bytes = op.header_bytes();
    iovec iov[2];
    size_t count = 0;
    if (op.sent < header_bytes) {
      iov[count++] = {reinterpret_cast<uint8_t*>(&op.header) + op.sent, header_bytes - op.sent};
    }
    const size_t data_done = op.sent > header_bytes ? op.sent - header_bytes : 0;
    if (op.size > data_done) iov[count++] = {const_cast<uint8_t*>(op.data) + data_done, op.size - data_done};
    if (count > 0) {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = count;
      ssize_t n = sendmsg(socket.fd(), &msg, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        int err = errno;
        close_pair(
            pair,
            std::make_exception_ptr(DistNetworkError(
                "rank " + std::to_string(rank_) + ": sending to rank " + std::to_string(pair.peer) + " (" +
                pair.address + ") failed: " + errno_text(err) + "; the peer process probably died")),
            true);
        return;
      }
      op.sent += static_cast<size_t>(n);
    }
    if (op.sent == header_bytes + op.size) {
      SendOp done = std::move(op);
      sends.pop_front();
      sent_part(done);
    }
  }
}

void TcpTransport::sent_part(const SendOp& op) {
  if (!op.striped) {
    completed(op.request, rank_, op.size);
  } else if (--op.striped->parts_left == 0) {
    completed(op.request, rank_, op.striped->size);
  }
}

void TcpTransport::set_polling(int fd, uint64_t id, uint32_t& current, uint32_t want) {
  if (want == current) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = id;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
  current = want;
}

void TcpTransport::update_all_polling_locked() {
  for (auto& pair : pairs_) {
    if (pair.peer != rank_) update_polling(pair);
  }
}

bool TcpTransport::loop_reads_locked(const Pair& pair) const {
  // Something to read for: a posted receive, a message begun, or the
  // watch for dead peers (an idle socket is otherwise left to the kernel).
  return watch_ || !posted_.empty() || pair.in_payload || pair.header_got > 0 || pair.staged_len > 0;
}

void TcpTransport::update_polling(Pair& pair) {
  if (pair.closed) return;
  // While a thread holds the driver role it reads the sockets itself, and the
  // loop listens for hang-ups only: a message then wakes the driver alone
  // (waking both cost two switches per point-to-point message).
  const bool driven = driver_.load(std::memory_order_relaxed) != std::thread::id();
  // The first connection is not read while it waits for the stripes of its
  // message (level-triggered epoll would report its data over and over);
  // a lane is read only while it has a stripe to read.
  const bool read = !driven && !pair.waiting_lanes && loop_reads_locked(pair);
  const bool write = !driven && !pair.sends.empty();
  set_polling(pair.socket.fd(), static_cast<uint64_t>(pair.peer), pair.polling,
              uint32_t{EPOLLRDHUP} | (read ? uint32_t{EPOLLIN} : 0U) | (write ? uint32_t{EPOLLOUT} : 0U));
  for (size_t j = 0; j < pair.lanes.size(); ++j) {
    tcp::Lane& lane = pair.lanes[j];
    set_polling(lane.socket.fd(), lane_id(pair.peer, j), lane.polling,
                (!driven && lane.expecting ? uint32_t{EPOLLIN} : 0U) |
                    (!driven && !lane.sends.empty() ? uint32_t{EPOLLOUT} : 0U));
  }
}

void TcpTransport::start_payload(Pair& pair) {
  const Header& h = pair.header;
  if (!h.sig.empty() && h.sig.kind != tdist::detail::CallKind::kPointToPoint &&
      h.sig.seq >= pair.last_call.seq)
    pair.last_call = h.sig;
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
    } else if (h.size > op.capacity || signatures_differ(op, h.sig)) {
      // Read the message aside, then fail the receive naming both sizes
      // (or both calls: a message of another call never touches the
      // receiver's buffer).
      pair.overflow.resize(h.size);
      pair.target = pair.overflow.data();
    } else {
      pair.target = static_cast<uint8_t*>(op.data);
    }
    pair.direct = std::move(op);
    return;
  }
  unexpected_.push_back(
      Incoming{pair.peer, h.tag, detail::Scratch(h.size), h.size, false, std::nullopt, h.sig});
  pair.incoming = std::prev(unexpected_.end());
  pair.to_incoming = true;
  pair.target = pair.incoming->data.get();
}

void TcpTransport::finish_payload(Pair& pair) {
  pair.in_payload = false;
  pair.header_got = 0;
  pair.waiting_lanes = false;
  pair.stripes_left = 0;
  size_t size = pair.header.size;
  if (pair.reading_reject) {
    pair.reading_reject = false;
    const std::string reason(pair.overflow.begin(), pair.overflow.end());
    rejection_ =
        std::make_exception_ptr(DistBackendError("rank " + std::to_string(rank_) + ": a send of rank " +
                                                 std::to_string(rank_) + " was refused: " + reason));
    return;
  }
  if (pair.reading_abort) {
    pair.reading_abort = false;
    const tcp::AbortNotice notice = tcp::decode_abort_payload(pair.overflow.data(), pair.overflow.size());
    std::string message = "rank " + std::to_string(rank_) + ": rank " + std::to_string(pair.peer) +
                          " aborted the group: " + notice.reason;
    auto error =
        notice.kind == tcp::AbortKind::kTimeout   ? std::make_exception_ptr(DistNetworkTimeoutError(message))
        : notice.kind == tcp::AbortKind::kBackend ? std::make_exception_ptr(DistBackendError(message))
                                                  : std::make_exception_ptr(DistNetworkError(message));
    if (!aborted_) TDIST_LOG(WARNING) << "tcp transport: " << message;
    pair.said_goodbye = true;
    break_locked(error);
    return;
  }
  if (pair.direct) {
    RecvOp op = std::move(*pair.direct);
    pair.direct.reset();
    if (signatures_differ(op, pair.header.sig)) {
      refuse_locked(op, pair.peer, pair.header.sig);
      pair.overflow.clear();
      pair.overflow.shrink_to_fit();
    } else if (!op.bytes && size > op.capacity) {
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
      finish_into(op, message.src, message.data.get(), message.size, message.sig);
      unexpected_.erase(pair.incoming);
    }
  }
}

void TcpTransport::advance(Pair& pair, size_t n) {
  if (!pair.in_payload) {
    pair.header_got += n;
    if (pair.header_got < sizeof(Header)) return;
    if (pair.header.tag == kAbortTag || pair.header.tag == kRejectTag) {
      pair.header.size = tcp::notice_payload_size(pair.header.size);
      pair.in_payload = true;
      pair.payload_got = 0;
      pair.reading_abort = pair.header.tag == kAbortTag;
      pair.reading_reject = pair.header.tag == kRejectTag;
      pair.overflow.resize(pair.header.size);
      pair.target = pair.overflow.data();
      pair.payload_end = pair.header.size;
      pair.stripes_left = 0;
      if (pair.header.size > 0) return;
    } else if (pair.header.tag == kGoodbyeTag) {
      pair.said_goodbye = true;
      pair.header_got = 0;
      return;
    } else {
      start_payload(pair);
      begin_stripes(pair);
      if (pair.header.size > 0) return;
    }
  } else {
    pair.payload_got += n;
    if (pair.payload_got < pair.payload_end) return;
    if (pair.stripes_left > 0) {
      pair.waiting_lanes = true;  // finish_payload once the lanes are done
      return;
    }
  }
  finish_payload(pair);
}

void TcpTransport::begin_stripes(Pair& pair) {
  pair.payload_end = pair.header.size;
  pair.stripes_left = 0;
  const int parts = 1 + static_cast<int>(pair.lanes.size());
  if (parts == 1 || pair.header.size < tcp::kStripeMinBytes) return;
  // Stripe 0 comes on this connection; stripe j on lane j - 1, into the
  // same target.
  pair.payload_end = tcp::stripe_begin(pair.header.size, parts, 1);
  for (int j = 1; j < parts; ++j) {
    tcp::Lane& lane = pair.lanes[static_cast<size_t>(j - 1)];
    lane.offset = tcp::stripe_begin(pair.header.size, parts, j);
    lane.length = tcp::stripe_begin(pair.header.size, parts, j + 1) - lane.offset;
    lane.got = 0;
    lane.expecting = lane.length > 0;
    if (lane.expecting) ++pair.stripes_left;
  }
}

void TcpTransport::read_lane(Pair& pair, tcp::Lane& lane) {
  while (lane.expecting && !pair.closed) {
    const size_t want = lane.length - lane.got;
    Socket::IoResult r = lane.socket.try_recv(pair.target + lane.offset + lane.got, want);
    if (r.error == EAGAIN || r.error == EWOULDBLOCK) return;
    if (r.eof || r.error != 0) {
      connection_failed(pair, r.eof ? "closed a connection in the middle of a message"
                                    : "connection failed: " + errno_text(r.error));
      return;
    }
    lane.got += r.bytes;
    if (lane.got == lane.length) {
      lane.expecting = false;
      lane_finished(pair);
      return;
    }
    if (r.bytes < want) return;  // drained
  }
}

void TcpTransport::lane_finished(Pair& pair) {
  if (--pair.stripes_left > 0 || !pair.waiting_lanes) return;
  finish_payload(pair);
  consume_staged(pair);  // what the first connection read past the message
}

void TcpTransport::connection_failed(Pair& pair, const std::string& why) {
  std::optional<RecvOp> orphan;
  if (pair.waiting_lanes) {
    // The message whose stripes were coming can no longer complete. What
    // follows its first stripe on the first connection can still be read,
    // and may say why: the peer's abort notice or its goodbye.
    if (pair.direct) {
      orphan = std::move(pair.direct);
      pair.direct.reset();
    } else if (pair.to_incoming) {
      orphan = std::move(pair.incoming->claimed);
      unexpected_.erase(pair.incoming);
      pair.to_incoming = false;
    }
    pair.forget_message();  // the staged bytes after it stay, to be read
  }
  // A goodbye may wait on the first connection: read it first, so that a
  // peer that shut down cleanly is not reported as crashed.
  read_some(pair, SIZE_MAX);
  if (!pair.closed) {
    const bool crashed = !pair.said_goodbye;
    close_pair(pair,
               std::make_exception_ptr(
                   DistNetworkError("rank " + std::to_string(rank_) + ": rank " + std::to_string(pair.peer) +
                                    " (" + pair.address + ") " + why +
                                    (crashed ? "; the peer process probably died or was killed"
                                             : " after shutting down its process group"))),
               crashed);
  }
  if (orphan) failed(orphan->request, aborted_ ? aborted_ : pair.error);
}

void TcpTransport::consume_staged(Pair& pair) {
  // Stops early when the message waits for its stripes: the bytes left
  // belong to the next message and wait in the stage.
  while (pair.staged_len > 0 && !pair.waiting_lanes && !pair.closed) {
    const uint8_t* bytes = pair.stage.data() + pair.staged_off;
    size_t take = 0;
    if (!pair.in_payload) {
      take = std::min(pair.staged_len, sizeof(Header) - pair.header_got);
      std::memcpy(reinterpret_cast<uint8_t*>(&pair.header) + pair.header_got, bytes, take);
    } else {
      take = std::min(pair.staged_len, pair.payload_end - pair.payload_got);
      std::memcpy(pair.target + pair.payload_got, bytes, take);
    }
    pair.staged_off += take;
    pair.staged_len -= take;
    advance(pair, take);
  }
}

void TcpTransport::read_some(Pair& pair, size_t budget) {
  // Headers and small payloads are read through the pair's stage, several
  // messages per system call; the rest of a large payload goes straight
  // into its buffer. A read that returns less than it asked for emptied the
  // socket: stop there instead of paying one more call to hear EAGAIN.
  consume_staged(pair);
  bool drained = false;
  while (!pair.closed && budget > 0 && !drained && !pair.waiting_lanes) {
    const bool direct = pair.in_payload && pair.payload_end - pair.payload_got >= tcp::kStageBytes;
    const size_t want = direct ? std::min(budget, pair.payload_end - pair.payload_got) : tcp::kStageBytes;
    Socket::IoResult r =
        pair.socket.try_recv(direct ? pair.target + pair.payload_got : pair.stage.data(), want);
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
    drained = r.bytes < want;
    budget -= std::min(budget, r.bytes);
    if (direct) {
      advance(pair, r.bytes);
    } else {
      pair.staged_off = 0;
      pair.staged_len = r.bytes;
      consume_staged(pair);
    }
  }
}

void TcpTransport::close_pair(Pair& pair, const std::exception_ptr& error, bool crashed) {
  if (pair.closed) return;
  pair.closed = true;
  pair.crashed = crashed;
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
  close_lanes(pair, error);
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
  pair.forget_message();
  pair.staged_len = 0;
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
    for (auto& lane : pair.lanes) {
      for (auto& op : lane.sends) failed(op.request, error);
      lane.sends.clear();
    }
    if (pair.direct) {
      // The rest of this message (and its stripes) lands in scratch: the receiver's buffer may
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
  // The kind of error, so that peers raise the same kind: anything but a
  // timeout or a network failure (a mismatched call) they raise as
  // DistBackendError.
  const ErrorKind kind = error_kind(error);
  const std::string payload =
      tcp::encode_abort_payload(kind == ErrorKind::kTimeout   ? tcp::AbortKind::kTimeout
                                : kind == ErrorKind::kNetwork ? tcp::AbortKind::kNetwork
                                                              : tcp::AbortKind::kBackend,
                                exception_text(error));
  Header header{kAbortTag, payload.size(), {}};
  for (auto& pair : pairs_) {
    // A half-written message cannot be interrupted; that peer learns from
    // the disconnect instead. Best effort: a full socket buffer drops it.
    if (pair.peer == rank_ || pair.closed || (!pair.sends.empty() && pair.sends.front().sent > 0)) continue;
    std::string frame(reinterpret_cast<const char*>(&header), sizeof(header));
    frame += payload;
    (void)pair.socket.try_send(frame.data(), frame.size());
  }
}

void TcpTransport::close_lanes(Pair& pair, const std::exception_ptr& error, bool keep_open) {
  for (auto& lane : pair.lanes) {
    if (lane.socket) {
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, lane.socket.fd(), nullptr);
      if (keep_open) {
        ::shutdown(lane.socket.fd(), SHUT_WR);
      } else {
        lane.socket.close();
      }
    }
    for (auto& op : lane.sends) failed(op.request, error);
    lane.sends.clear();
  }
}

void TcpTransport::abort_locked(const std::exception_ptr& error) {
  if (!aborted_) aborted_ = error;
  for (auto& pair : pairs_) {
    if (pair.peer == rank_) continue;
    if (!pair.closed) {
      pair.closed = true;
      pair.error = error;
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, pair.socket.fd(), nullptr);
      // Only the write side: closing a socket whose peer's data is still
      // unread sends a reset, which makes the peer drop the abort notice
      // just sent and report a dead peer instead. The socket closes with
      // the transport.
      ::shutdown(pair.socket.fd(), SHUT_WR);
    }
    for (auto& op : pair.sends) failed(op.request, error);
    pair.sends.clear();
    close_lanes(pair, error, /*keep_open=*/true);
    pair.forget_message();
    pair.staged_len = 0;
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
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      for (;;) {
        if (!deferred_.empty()) {
          std::vector<Completion> run;
          run.swap(deferred_);
          lock.unlock();
          for (const auto& c : run) c.deliver();
          wake_driver_if_polling();
          lock.lock();
          continue;
        }
        if (stopping_) return;
        if (!loop_should_park_locked()) break;
        loop_parked_ = true;
        loop_cv_.wait(lock);
        loop_parked_ = false;
      }
      loop_yielded_ = false;
      for (auto& pair : pairs_) {
        if (pair.peer != rank_) update_polling(pair);
      }
    }
    int n = epoll_wait(epoll_fd_, events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      TDIST_LOG(ERROR) << "tcp transport: epoll_wait: " << errno_text(errno);
      return;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kWakeId) {
        drain_fd(wake_fd_);
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (driving_now_) {
          // Ready before the driver took over (or a hang-up): the driver
          // reads it; park until it lets go (the events stay ready).
          loop_yielded_ = true;
          break;
        }
        const uint32_t e = events[i].events;
        handle_event(id, (e & (EPOLLIN | EPOLLRDHUP)) != 0, (e & EPOLLOUT) != 0,
                     (e & (EPOLLERR | EPOLLHUP)) != 0);
      }
      flush();
    }
  }
}

void TcpTransport::handle_event(uint64_t id, bool readable, bool writable, bool hangup) {
  const size_t peer = id & 0xffffffffU;
  const size_t lane = id >> 32;  // 0: the first connection, j: lanes[j - 1]
  if (peer >= pairs_.size()) return;
  Pair& pair = pairs_[peer];
  if (pair.closed) return;
  if (lane == 0) {
    if (readable || hangup) read_some(pair, kReadBudget);
    if (!pair.closed && writable && !pair.sends.empty()) write_some(pair);
  } else if (lane <= pair.lanes.size()) {
    tcp::Lane& l = pair.lanes[lane - 1];
    if (l.expecting && (readable || hangup)) {
      read_lane(pair, l);
    } else if (hangup) {
      connection_failed(pair, "closed a connection");
    }
    if (!pair.closed && writable && !l.sends.empty()) write_queue(pair, l.socket, l.sends);
  }
  update_polling(pair);
}

bool TcpTransport::loop_should_park_locked() const {
  if (stopping_ || !deferred_.empty()) return false;
  // Otherwise the loop sleeps in epoll_wait, listening to what
  // update_polling says, so new work needs no wake-up.
  return loop_yielded_ && driver_.load(std::memory_order_relaxed) != std::thread::id();
}

void TcpTransport::wake_loop_locked() const {
  if (loop_parked_) loop_cv_.notify_one();
}

void TcpTransport::wake_driver() const {
  signal_fd(driver_wake_fd_);
}

void TcpTransport::claim_for_call_locked() {
  // A thread inside a collective call will wait for what it posts: it takes
  // the driver role now, so that the loop thread is not woken for it.
  if (driver_.load(std::memory_order_relaxed) != std::thread::id() || !in_call(this)) return;
  driver_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  update_all_polling_locked();
  // The loop thread may have been parked, leaving unread what peers sent
  // meanwhile. Read what is there before the call starts: if a peer gave up
  // on the group (its abort notice sits behind the data it sent before), the
  // call must fail now, not complete on that data.
  build_poll_set_locked();
  const timespec now{0, 0};
  if (ppoll(poll_fds_.data(), poll_fds_.size(), &now, nullptr) > 0) handle_polled_locked();
}

bool TcpTransport::claim_driver_locked() {
  if (driver_.load(std::memory_order_relaxed) == std::thread::id()) {
    driver_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    update_all_polling_locked();
  }
  return is_driver_locked();
}

void TcpTransport::release_driver() {
  // A call that never waited on TCP (a shared-memory collective) never took
  // the role: no lock for it.
  if (!is_driver_locked()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  driver_.store(std::thread::id(), std::memory_order_relaxed);
  update_all_polling_locked();
  wake_loop_locked();  // if it yielded to this driver
}

void TcpTransport::begin_call() {
  t_calls.push_back(this);
}

void TcpTransport::end_call() {
  auto it = std::find(t_calls.rbegin(), t_calls.rend(), this);
  if (it != t_calls.rend()) t_calls.erase(std::next(it).base());
  if (!in_call(this)) release_driver();
}

bool TcpTransport::wait(const RequestPtr& request, Clock::time_point deadline) {
  // The loop thread (a callback waiting) cannot drive: it is what runs
  // when nobody drives.
  if (request->done() || std::this_thread::get_id() == thread_.get_id()) return request->wait_until(deadline);
  bool driving = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    driving = claim_driver_locked();
  }
  while (!driving) {
    // Another thread drives: it completes this request too, unless it stops
    // first.
    if (request->wait_until(std::min(deadline, Clock::now() + kDriverRecheck))) return true;
    if (Clock::now() >= deadline) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    driving = claim_driver_locked();
  }
  try {
    drive(*request, deadline);
  } catch (...) {
    release_driver();
    run_driver_callbacks();
    throw;
  }
  // Inside a collective call the role is kept for the call's next wait.
  if (!in_call(this)) {
    release_driver();
    run_driver_callbacks();
  }
  return request->wait_until(deadline);
}

void TcpTransport::run_driver_callbacks() {
  std::vector<Completion> run;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    run.swap(driver_callbacks_);
  }
  if (run.empty()) return;
  // Marked as the transport's completion thread, as the loop thread is: a
  // callback that waits for another point-to-point operation raises the same
  // "would deadlock" error whichever of the two threads runs it.
  detail::CompletionThreadScope completing(static_cast<const Transport*>(this));
  for (const auto& c : run) c.request->run_callbacks();
}

void TcpTransport::drive(const Request& request, Clock::time_point deadline) {
  struct DrivingNow {
    TcpTransport& t;
    explicit DrivingNow(TcpTransport& transport) : t(transport) {
      std::lock_guard<std::mutex> lock(t.mutex_);
      t.driving_now_ = true;
    }
    ~DrivingNow() {
      std::lock_guard<std::mutex> lock(t.mutex_);
      t.driving_now_ = false;
    }
    DrivingNow(const DrivingNow&) = delete;
    DrivingNow& operator=(const DrivingNow&) = delete;
  } driving_now(*this);

  // Poll without sleeping for a little while first: a sleeping poll costs a
  // wake-up when the bytes come (in a VM about 20 us: a 2-rank 8-byte
  // exchange took 23-30 us with blocking calls, 2.7 us with non-blocking
  // ones, 2026-11-25). Yielding between polls leaves the core to a peer
  // that shares it.
  const auto spin_until = Clock::now() + spin_time();
  while (!request.done()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      build_poll_set_locked();
    }
    const auto now = Clock::now();
    if (now >= deadline) return;
    const bool spinning = now < spin_until;
    const timespec timeout = spinning ? timespec{0, 0} : to_timespec(deadline - now);
    int n = ppoll(poll_fds_.data(), poll_fds_.size(), &timeout, nullptr);
    if (n == 0 && spinning) sched_yield();
    if (n < 0) {
      if (errno == EINTR) continue;
      throw DistNetworkError("rank " + std::to_string(rank_) + ": tcp transport: poll: " + errno_text(errno));
    }
    if (n == 0) continue;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      handle_polled_locked();
    }
    flush();
  }
}

void TcpTransport::build_poll_set_locked() {
  poll_fds_.clear();
  poll_ids_.clear();
  for (const auto& pair : pairs_) {
    if (pair.peer == rank_ || pair.closed) continue;
    poll_fds_.push_back(pollfd{
        pair.socket.fd(),
        static_cast<short>((pair.waiting_lanes ? 0 : POLLIN) | (pair.sends.empty() ? 0 : POLLOUT)), 0});
    poll_ids_.push_back(static_cast<uint64_t>(pair.peer));
    for (size_t j = 0; j < pair.lanes.size(); ++j) {
      const tcp::Lane& lane = pair.lanes[j];
      const int events = (lane.expecting ? POLLIN : 0) | (lane.sends.empty() ? 0 : POLLOUT);
      if (events == 0) continue;  // idle lane: its hang-up shows on the first connection too
      poll_fds_.push_back(pollfd{lane.socket.fd(), static_cast<short>(events), 0});
      poll_ids_.push_back(lane_id(pair.peer, j));
    }
  }
  poll_fds_.push_back(pollfd{driver_wake_fd_, POLLIN, 0});
}

void TcpTransport::handle_polled_locked() {
  if (poll_fds_.back().revents != 0) drain_fd(driver_wake_fd_);
  for (size_t i = 0; i < poll_ids_.size(); ++i) {
    const short revents = poll_fds_[i].revents;
    // Write whenever there is something to write, not only on POLLOUT: that
    // comes only once a third of the send buffer is free, while the
    // acknowledgements of what was just read may have freed less, and an
    // exchange then moves in lock step. (A pair closed meanwhile by another
    // thread is skipped: its fd may even be reused.)
    handle_event(poll_ids_[i], (revents & POLLIN) != 0, /*writable=*/true,
                 (revents & (POLLERR | POLLHUP)) != 0);
  }
}

}  // namespace tdist::transport
