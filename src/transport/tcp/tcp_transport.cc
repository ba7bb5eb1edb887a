// TcpTransport: construction, shutdown and what it knows of each peer (tcp_transport_internal.h lists the
// other files).

#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_transport_internal.h"
#include "transport/tcp/tcp_wire.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <utility>

#include "common/error_text.h"

namespace tdist::transport {

using namespace tcp::internal;  // NOLINT(google-build-using-namespace): this class's own helpers
using tcp::Header;
using tcp::Pair;

size_t tcp::stripe_begin(size_t size, int parts, int i) {
  if (i <= 0) return 0;
  if (i >= parts) return size;
  const size_t begin = size / static_cast<size_t>(parts) * static_cast<size_t>(i);
  return std::min(size, begin / 4096 * 4096);
}

size_t tcp::stripe_min_bytes(size_t interfaces) {
  return interfaces > 1 ? kMultiInterfaceStripeMinBytes : kStripeMinBytes;
}

TcpTransport::TcpTransport(int rank, int size, std::vector<std::vector<Socket>> sockets,
                           std::vector<std::string> addresses, const std::vector<size_t>& interfaces,
                           bool crash_breaks_group, std::chrono::microseconds loop_spin)
    : rank_(rank),
      size_(size),
      pairs_(static_cast<size_t>(size)),
      crash_breaks_group_(crash_breaks_group),
      loop_spin_(loop_spin) {
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
    if (!interfaces.empty())
      pair.stripe_min = tcp::stripe_min_bytes(interfaces.at(static_cast<size_t>(peer)));
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
    // The DistBackendError is made only if an operation will carry it
    // (with TORCH_SHOW_CPP_STACKTRACES=1 it unwinds the stack). With nothing
    // pending, the error never reaches anyone, and a bare one closes the
    // connections alike.
    abort_locked(pending_locked()
                     ? std::make_exception_ptr(
                           DistBackendError("rank " + std::to_string(rank_) +
                                            ": the transport was destroyed with this operation pending"))
                     : std::make_exception_ptr(std::runtime_error("the transport was destroyed")));
  }
  flush();
  close(epoll_fd_);
  close(wake_fd_);
  close(driver_wake_fd_);
}

bool TcpTransport::pending_locked() const {
  if (!posted_.empty()) return true;
  for (const auto& message : unexpected_) {
    if (message.claimed) return true;
  }
  for (const auto& pair : pairs_) {
    if (!pair.sends.empty() || pair.direct) return true;
    for (const auto& lane : pair.lanes) {
      if (!lane.sends.empty()) return true;
    }
  }
  return false;
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

}  // namespace tdist::transport
