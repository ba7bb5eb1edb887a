#include "store/tcp/server.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <mutex>

#include "common/owned_by_process.h"
#include "store/tcp/server_impl.h"
#include "tdist/errors.h"
#include "tdist/logging.h"

namespace tdist {
namespace {

// epoll tags: the wake-up eventfd, then one per listener, then connections.
constexpr uint64_t kWakeTag = 0;
constexpr uint64_t kFirstListenerTag = 1;
constexpr uint64_t kFirstConnectionId = uint64_t{1} << 16;
constexpr size_t kReadChunk = size_t{64} << 10;
constexpr int kMaxEvents = 256;

bool means_every_interface(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

bool is_loopback(const SocketAddress& address) {
  std::string host = address.host();
  return host.rfind("127.", 0) == 0 || host == "::1";
}

// CPU time of the calling thread: a turn's cost without the time the
// scheduler gave to other processes meanwhile.
uint64_t thread_cpu_us() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

}  // namespace

TCPServer::Impl::Impl(const TCPServerOptions& opts)
    : options(opts), budget(opts.memory_budget != 0 ? opts.memory_budget : memory_budget_from_env()) {
  if (options.max_frame_bytes == 0) options.max_frame_bytes = tcpstore::max_frame_bytes_from_env();
  if (options.output_hard_limit == 0)
    options.output_hard_limit = options.max_frame_bytes + (size_t{16} << 20);
  if (options.max_connections_per_address == 0)
    options.max_connections_per_address = max_connections_per_address_from_env();
  if (options.auth_token && options.auth_token->empty()) options.auth_token.reset();
  table.set_value_factory([this](Bytes bytes) { return budget.make_value(std::move(bytes)); });
  next_connection_id = kFirstConnectionId;
}

TCPServer::Impl::~Impl() {
  if (thread.joinable()) {
    stopping.store(true);
    uint64_t one = 1;
    // The loop drains the eventfd and sees `stopping`; a full counter
    // (impossible in practice) would still leave it readable.
    (void)!::write(wake_fd, &one, sizeof(one));
    thread.join();
  }
  connections.clear();
  if (epoll_fd >= 0) ::close(epoll_fd);
  if (wake_fd >= 0) ::close(wake_fd);
  if (spare_fd >= 0) ::close(spare_fd);
}

// The server listens where it was asked: on every address its host resolves
// to (all of them, so a client that resolves the same name to the other
// family still gets in), or on every interface only when told so.
void TCPServer::Impl::listen_everywhere_or_on_host() {
  ListenOptions listen_options{"", options.backlog, ErrorDomain::kStore};
  if (means_every_interface(options.host)) {
    listen_options.host = options.host == "0.0.0.0" ? "0.0.0.0" : "";
    listeners.push_back(listen_on(options.port, listen_options));
    return;
  }
  std::vector<SocketAddress> addresses = resolve(options.host, options.port);
  bool all_loopback = true;
  for (const auto& address : addresses) {
    listen_options.host = address.host();
    // The first address fixes the port (port 0 picks one); the others share it.
    uint16_t port_now = listeners.empty() ? options.port : listeners.front().local_port();
    bool duplicate = false;
    for (const auto& listener : listeners) {
      duplicate = duplicate || SocketAddress::local_of(listener.fd()).host() == address.host();
    }
    if (duplicate) continue;
    listeners.push_back(listen_on(port_now, listen_options));
    all_loopback = all_loopback && is_loopback(address);
  }
  // A name that resolves to loopback only (Debian's /etc/hosts maps the
  // hostname to 127.0.1.1) gives a store no other host can reach: say so.
  if (all_loopback && options.host != "localhost" && options.host.rfind("127.", 0) != 0 &&
      options.host != "::1") {
    TDIST_LOG(WARNING) << "TCPStore server: '" << options.host << "' resolves on this host only to loopback ("
                       << addresses.front().host()
                       << "), so the store is reachable from this machine only; give the address other "
                          "hosts use to reach it (or TDIST_STORE_LISTEN_HOST=0.0.0.0 to listen on every "
                          "interface), see docs/stores.md";
  }
}

void TCPServer::Impl::open() {
  try {
    if (options.listen_fd >= 0) {
      listeners.push_back(
          adopt_listening_socket(options.listen_fd, options.port, options.backlog, ErrorDomain::kStore));
    } else {
      listen_everywhere_or_on_host();
    }
  } catch (const DistError& e) {
    std::string hint;
    if (std::string(e.what()).find(errno_text(EADDRNOTAVAIL)) != std::string::npos) {
      hint = "; '" + options.host +
             "' is not an address of this host (behind NAT or a service address, listen on every "
             "interface: listen_host \"0.0.0.0\" or TDIST_STORE_LISTEN_HOST=0.0.0.0)";
    }
    throw DistStoreError(std::string("TCPStore server: ") + e.what() + hint);
  }
  port = listeners.front().local_port();
  epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (epoll_fd < 0 || wake_fd < 0) {
    throw DistStoreError("TCPStore server: cannot create epoll/eventfd: " + errno_text(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  for (size_t i = 0; i < listeners.size(); ++i) {
    ev.data.u64 = kFirstListenerTag + i;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listeners[i].fd(), &ev);
  }
  ev.data.u64 = kWakeTag;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &ev);
  scratch.resize(kReadChunk);
  recount_fds();
  grow_fd_table();
  next_timer_check = ServerClock::now() + tick();
  thread = std::thread([this] { run(); });
}

void TCPServer::Impl::run() {
  epoll_event events[kMaxEvents];
  const int tick_ms = static_cast<int>(tick().count());
  while (!stopping.load()) {
    // Requests, closes or timers left over from the last turn: look for
    // events, do not wait.
    bool behind = !ready_list.empty() || !closing.empty() || timers_behind || pending.count > 0;
    int count = ::epoll_wait(epoll_fd, events, kMaxEvents, behind ? 0 : tick_ms);
    if (count < 0) {
      if (errno == EINTR) continue;
      TDIST_LOG(ERROR) << where() << ": epoll_wait failed: " << errno_text(errno) << "; the server stops";
      return;
    }
    // Nothing may escape the thread: a failure is confined to the
    // connection it belongs to, or logged and survived.
    try {
      uint64_t turn_start = thread_cpu_us();
      loop_once(events, count);
      serve_ready();
      flush_dirty();
      if (timers_behind || ServerClock::now() >= next_timer_check) {
        bool on_time = !timers_behind;
        check_timers();
        if (on_time) next_timer_check = ServerClock::now() + tick();
      }
      reap();
      close_some();
      uint64_t turn_us = thread_cpu_us() - turn_start;
      if (turn_us > stat_longest_turn_us.load()) stat_longest_turn_us.store(turn_us);
    } catch (const std::exception& e) {
      TDIST_LOG(ERROR) << where() << ": unexpected error in the event loop: " << e.what();
    } catch (...) {
      TDIST_LOG(ERROR) << where() << ": unexpected non-standard exception in the event loop";
    }
  }
}

// New connections first (server_accept.cc says why), then the requests of
// those already admitted.
void TCPServer::Impl::loop_once(epoll_event* events, int count) {
  for (int i = 0; i < count; ++i) {
    uint64_t tag = events[i].data.u64;
    if (tag == kWakeTag) {
      uint64_t value = 0;
      (void)!::read(wake_fd, &value, sizeof(value));
      if (stopping.load()) return;
    } else if (tag < kFirstConnectionId) {
      accept_all(listeners.at(tag - kFirstListenerTag));
    }
  }
  admit_pending();
  for (int i = 0; i < count; ++i) {
    uint64_t tag = events[i].data.u64;
    if (tag < kFirstConnectionId) continue;
    Connection* conn = find(tag);
    if (conn == nullptr || conn->dead) continue;
    try {
      on_connection_event(tag, events[i].events);
    } catch (const std::exception& e) {
      // bad_alloc and the like: drop this client, keep serving the rest.
      reject(*conn, std::string("internal error while serving it: ") + e.what(), nullptr);
    }
  }
}

// Replies are sent once per turn, so a SET that wakes a thousand waiters
// costs one send per waiter and not one per event.
void TCPServer::Impl::flush_dirty() {
  for (size_t i = 0; i < dirty.size(); ++i) {
    Connection* conn = find(dirty[i]);
    if (conn == nullptr) continue;
    conn->dirty = false;
    if (!conn->dead) flush(*conn);
  }
  dirty.clear();
}

Connection* TCPServer::Impl::find(uint64_t id) {
  auto it = connections.find(id);
  return it == connections.end() ? nullptr : it->second.get();
}

// ---- TCPServer ----------------------------------------------------------------------

namespace {

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<uint16_t, std::weak_ptr<TCPServer>>& registry() {
  static auto* servers = new std::map<uint16_t, std::weak_ptr<TCPServer>>();  // never destroyed: used at exit
  return *servers;
}

}  // namespace

TCPServer::TCPServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TCPServer::~TCPServer() = default;

std::shared_ptr<TCPServer> TCPServer::start(const TCPServerOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  impl->open();
  // A forked child's copy does not stop the parent's server thread.
  return detail::owned_by_this_process(std::unique_ptr<TCPServer>(new TCPServer(std::move(impl))));
}

std::shared_ptr<TCPServer> TCPServer::start_shared(const TCPServerOptions& options) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& servers = registry();
  if (options.port != 0) {
    auto it = servers.find(options.port);
    if (it != servers.end()) {
      if (auto server = it->second.lock()) {
        if (options.listen_fd >= 0) ::close(options.listen_fd);  // ours to close; the port is served already
        return server;
      }
    }
  }
  auto server = start(options);
  // Drop entries of servers that are gone while we hold the lock anyway.
  for (auto it = servers.begin(); it != servers.end();)
    it = it->second.expired() ? servers.erase(it) : std::next(it);
  servers[server->port()] = server;
  return server;
}

uint16_t TCPServer::port() const {
  return impl_->port;
}

std::vector<std::string> TCPServer::listen_addresses() const {
  std::vector<std::string> out;
  for (const auto& listener : impl_->listeners)
    out.push_back(SocketAddress::local_of(listener.fd()).to_string());
  return out;
}

TCPServerStats TCPServer::stats() const {
  TCPServerStats s;
  s.connections_accepted = impl_->stat_accepted.load();
  s.connections_open = impl_->stat_open.load();
  s.requests = impl_->stat_requests.load();
  s.waiters_parked = impl_->stat_parked.load();
  s.clients_rejected = impl_->stat_rejected.load();
  s.keys = impl_->stat_keys.load();
  s.memory_used = impl_->budget.used();
  s.memory_budget = impl_->budget.limit();
  s.budget_refusals = impl_->stat_budget_refusals.load();
  s.timeouts = impl_->stat_timeouts.load();
  s.auth_refusals = impl_->stat_auth_refusals.load();
  s.longest_turn_us = impl_->stat_longest_turn_us.load();
  s.memory_peak = impl_->budget.peak();
  s.connections_refused = impl_->stat_refused.load();
  s.connections_evicted = impl_->stat_evicted.load();
  s.most_closed_in_a_turn = impl_->stat_most_closed.load();
  return s;
}

}  // namespace tdist
