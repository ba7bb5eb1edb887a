// TcpTransport: writing queued messages to a socket, and reading headers and payloads (striped over lanes)
// off it.

#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_transport_internal.h"
#include "transport/tcp/tcp_wire.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/error_text.h"
#include "tdist/logging.h"

namespace tdist::transport {

using namespace tcp::internal;  // NOLINT(google-build-using-namespace): this class's own helpers
using tcp::Header;
using tcp::Incoming;
using tcp::Pair;
using tcp::RecvOp;
using tcp::SendOp;

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
      if (!op.raw && op.header.sig.kind == tdist::detail::CallKind::kPointToPoint)
        pair.watch_for_refusal = true;
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

bool TcpTransport::next_is_notice(const Pair& pair) const {
  Header next{};
  const ssize_t n = ::recv(pair.socket.fd(), &next, sizeof(next), MSG_PEEK | MSG_DONTWAIT);
  // An end of stream, an error or a header not all there yet: read as usual
  // (read_some names the end, or keeps the part).
  if (n != static_cast<ssize_t>(sizeof(next))) return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
  return is_notice_tag(next.tag);
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
    if (!receive_matches(it->src, it->tag, pair.peer, h.tag)) continue;
    RecvOp op = std::move(*it);
    posted_.erase(it);
    if (op.bytes) {
      op.bytes->resize(h.size);
      pair.target = op.bytes->data();
    } else if (h.size > op.capacity || signatures_differ(op.sig, h.sig)) {
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
    rejection_ = refused_send_error(rank_, reason);
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
    if (!aborted_) {
      TDIST_LOG(WARNING) << "tcp transport: " << message;
      aborted_by_peer_ = true;
    }
    pair.said_goodbye = true;
    break_locked(error);
    return;
  }
  if (pair.direct) {
    RecvOp op = std::move(*pair.direct);
    pair.direct.reset();
    if (signatures_differ(op.sig, pair.header.sig)) {
      refuse_locked(op, pair.peer, pair.header.sig);
      pair.overflow.clear();
      pair.overflow.shrink_to_fit();
    } else if (!op.bytes && size > op.capacity) {
      failed(op.request, too_big_error(rank_, pair.peer, op.tag, size, op.capacity));
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
    } else if (pair.header.tag == kWaitingTag) {
      pair.waiting_in = std::max(pair.waiting_in.value_or(0), pair.header.sig.seq);
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
  if (parts == 1 || pair.header.size < pair.stripe_min) return;
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

}  // namespace tdist::transport
