// TcpTransport: the loop thread, and a caller that drives the sockets itself while it waits (its own poll
// set).

#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_transport_internal.h"
#include "transport/tcp/tcp_wire.h"

#include <sys/epoll.h>

#include <cerrno>

#include "common/completion_thread.h"
#include "common/error_text.h"
#include "common/spin_wait.h"
#include "tdist/logging.h"

namespace tdist::transport {

using namespace tcp::internal;  // NOLINT(google-build-using-namespace): this class's own helpers
using tcp::Pair;

thread_local std::vector<const Transport*> tcp::internal::t_calls;

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
    int n = 0;
    const auto idle_since = Clock::now();
    if (loop_gauge_.worth_polling(loop_spin_)) {
      // Polls first (TcpOptions::loop_spin) while messages have lately come
      // soon; everything that wakes the blocking wait shows up here too.
      detail::spin_until([&] { return (n = epoll_wait(epoll_fd_, events, 64, 0)) != 0; }, loop_spin_);
    }
    if (n == 0) n = epoll_wait(epoll_fd_, events, 64, -1);
    if (loop_spin_.count() > 0) loop_gauge_.record(Clock::now() - idle_since);
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
