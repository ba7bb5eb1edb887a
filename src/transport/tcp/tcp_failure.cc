// TcpTransport: a lost connection, an abort, and failing what is pending with the reason.

#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_transport_internal.h"
#include "transport/tcp/tcp_wire.h"

#include <sys/epoll.h>

#include "common/error_text.h"
#include "tdist/logging.h"

namespace tdist::transport {

using namespace tcp::internal;  // NOLINT(google-build-using-namespace): this class's own helpers
using tcp::Header;
using tcp::Pair;

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
  // can, from others, unless the peer crashed and that breaks the group:
  // then waiting on would only end at the timeout.
  const bool breaks = crashed && crash_breaks_group_;
  for (auto it = posted_.begin(); it != posted_.end();) {
    if (it->src == pair.peer || (breaks && it->src == kAnySource)) {
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
  if (breaks && !aborted_) broken_by_crash_ = true;
  if (breaks) break_locked(error);
}

void TcpTransport::set_crash_breaks_group(bool breaks) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    crash_breaks_group_ = breaks;
    if (breaks && !aborted_) {
      for (const auto& pair : pairs_) {
        if (pair.closed && pair.crashed) {
          broken_by_crash_ = true;
          break_locked(pair.error);
          break;
        }
      }
    }
  }
  flush();
}

std::exception_ptr TcpTransport::abort_reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_;
}

bool TcpTransport::aborted_by_peer() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_by_peer_;
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

}  // namespace tdist::transport
