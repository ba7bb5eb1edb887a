// Connections per peer address and the descriptor reserve (docs/stores.md,
// "Limits"). Without them, two clients holding 10,500 idle connections each
// took every descriptor of a server limited to 20,000 and every other client
// was reset for as long as they held them (issue 49). Now:
//   - one address holds at most max_connections_per_address connections;
//   - when fewer than fd_reserve descriptors are left, a new connection from
//     the address holding the most is refused, and one from another address
//     is admitted by closing a non-member connection of the largest address;
//   - non-member connections idle for a second are closed while descriptors
//     stay short.
// Members (the ranks: authenticated, or wrote a key, or waited for one) are
// never evicted; the cap bounds what any address, members included, holds.

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <system_error>

#include "common/env.h"
#include "store/tcp/server_impl.h"
#include "tdist/logging.h"

namespace tdist {
namespace {

constexpr int64_t kMaxPerAddressLimit = int64_t{1} << 20;
// The reserve: a sixteenth of the limit, so 1,024 of Debian's 20,000 or
// systemd's 524,288 (capped), 64 of the traditional 1,024, 16 at least.
constexpr size_t kMinReserve = 16;
constexpr size_t kMaxReserve = 1024;
// Non-member connections idle this long are closed while descriptors are short.
constexpr auto kPressureIdle = std::chrono::seconds(1);
// /proc/self/fd is counted at most this often, on a thread aside from this
// many of our descriptors (below, it takes about a millisecond at most).
constexpr auto kFdRecountEvery = std::chrono::seconds(1);
constexpr size_t kCountAsideFrom = 1024;
// The descriptor table is grown to at most this many at start (half a MiB).
constexpr size_t kMostFdTableGrownTo = 65536;
// How many of an address's evictable connections are looked at for an idle one.
constexpr int kEvictionScan = 64;
// Refusals of one address logged: the first, then one in this many.
constexpr uint64_t kRefusalLogEvery = 1000;

size_t soft_fd_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  return static_cast<size_t>(limit.rlim_cur);
}

// Descriptors open in this process (every thread's), 0 if unknown.
size_t count_open_fds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  size_t count = 0;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): readdir is safe on a stream no other thread reads
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count > 0 ? count - 1 : 0;  // not the directory's own descriptor
}

bool is_idle(const Connection& conn) {
  return conn.in.empty() && conn.out_bytes == 0 && conn.waiters.empty() && conn.value_expected == 0 &&
         conn.discard == 0;
}

}  // namespace

size_t max_connections_per_address_from_env() {
  return static_cast<size_t>(env_int("TDIST_STORE_MAX_CONNECTIONS_PER_ADDRESS", 1, kMaxPerAddressLimit)
                                 .value_or(static_cast<int64_t>(kDefaultMaxConnectionsPerAddress)));
}

bool TCPServer::Impl::short_of_fds(size_t more) const {
  return fd_limit > 0 && fds_in_use() + more + fd_reserve > fd_limit;
}

// Descriptors are handed out lowest first: a new socket numbered N means
// 0..N are taken, a floor of what the process uses (other threads' sockets
// and files) beside our connections.
void TCPServer::Impl::note_fd(int fd) {
  size_t ours = our_fds() + 1;  // + this one, not yet counted
  size_t floor = static_cast<size_t>(fd) + 1;
  if (floor > fd_baseline + ours) fd_baseline = floor - ours;
}

void TCPServer::Impl::read_fd_limit() {
  fd_limit = soft_fd_limit();
  fd_reserve = std::clamp(fd_limit / 16, kMinReserve, kMaxReserve);
}

// `open` descriptors counted in the process (0: not counted, the baseline
// stays), `ours` of them our connections'.
void TCPServer::Impl::take_fd_count(size_t open, size_t ours) {
  if (open > 0) fd_baseline = open > ours ? open - ours : 0;
  next_fd_recount = ServerClock::now() + kFdRecountEvery;
}

void TCPServer::Impl::recount_fds() {
  read_fd_limit();
  take_fd_count(count_open_fds(), our_fds());
}

// Reading /proc/self/fd takes 17-46 ms with 18,000 descriptors open, long
// enough to keep every client waiting: with many open it is read on a
// thread of its own, and the loop takes the count in a later turn. Our
// connections are counted at the start and at the end of the read, and the
// fewer is taken: the baseline errs high, towards keeping descriptors.
void TCPServer::Impl::recount_fds_when_due() {
  if (fd_count.valid()) {
    if (fd_count.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
    take_fd_count(fd_count.get(), std::min(our_fds(), fd_count_ours));
    return;
  }
  if (ServerClock::now() < next_fd_recount) return;
  if (our_fds() < kCountAsideFrom) {
    recount_fds();
    return;
  }
  read_fd_limit();
  fd_count_ours = our_fds();
  try {
    fd_count = std::async(std::launch::async, count_open_fds);
  } catch (const std::system_error&) {
    // No thread to be had (a process or thread limit): the baseline stays
    // as it is until the next try.
    next_fd_recount = ServerClock::now() + kFdRecountEvery;
  }
}

// The kernel grows a process's descriptor table by doubling it, and with
// other threads in the process each growth waits for an RCU grace period:
// tens of milliseconds in which the server accepts no one, five times on
// the way to 18,000 connections. The table is grown once, at start, to the
// descriptors the server may use (at most kMostFdTableGrownTo).
void TCPServer::Impl::grow_fd_table() const {
  const size_t want =
      fd_limit == 0 ? kMostFdTableGrownTo : std::min(fd_limit, kMostFdTableGrownTo);  // 0: unlimited
  const int top = static_cast<int>(want) - 1;
  if (spare_fd < 0 || top <= spare_fd) return;
  // F_DUPFD takes the lowest free descriptor at or above `top`: the table
  // grows to hold it, and stays grown when it is closed.
  int fd = ::fcntl(spare_fd, F_DUPFD_CLOEXEC, top);
  if (fd >= 0) ::close(fd);
}

bool TCPServer::Impl::admit(Socket& sock, const std::string& address) {
  auto found = peers.find(address);
  size_t holds = found == peers.end() ? 0 : found->second.open;
  std::string why;
  if (holds >= options.max_connections_per_address) {
    why = address + " holds " + std::to_string(holds) +
          " connections to this store already, the limit per address "
          "(TDIST_STORE_MAX_CONNECTIONS_PER_ADDRESS=" +
          std::to_string(options.max_connections_per_address) + "); close some, or raise the limit";
  } else if (short_of_fds(1)) {
    size_t largest = peers_by_open.empty() ? 0 : peers_by_open.rbegin()->first;
    if (holds >= largest) {
      why = "the server is short of file descriptors (" + std::to_string(fds_in_use() + 1) + " in use of " +
            std::to_string(fd_limit) + " (RLIMIT_NOFILE), " + std::to_string(fd_reserve) +
            " kept for other addresses) and " + address + " holds the most connections (" +
            std::to_string(holds) + "); close some, or retry later";
    } else {
      // A smaller address: its client comes in, and the largest address
      // gives up a connection for it if it has one to give.
      evict_one(holds, "closed to keep file descriptors for other addresses (" + std::to_string(fd_limit) +
                           " in all, RLIMIT_NOFILE); " + address + " holds fewer connections");
    }
  }
  if (why.empty()) return true;
  stat_refused.fetch_add(1);
  uint64_t refused = ++peers[address].refused;  // kept while the address has connections
  if (refused % kRefusalLogEvery == 1) {
    TDIST_LOG(WARNING) << where() << ": refused a connection from " << sock.peer() << " (" << refused
                       << " from " << address << " so far): " << why;
  }
  // The client hears why (an error frame with request id 0, which no
  // request has), then the end of the stream. Reading what it sent first
  // keeps the close from turning into a reset that could overtake the frame.
  std::vector<uint8_t> frame = tcpstore::encode_error(0, "TCPStore server: connection refused: " + why);
  sock.try_send(frame.data(), frame.size());
  ::shutdown(sock.fd(), SHUT_WR);
  uint8_t sink[512];
  while (sock.try_recv(sink, sizeof(sink)).bytes > 0) {
  }
  close_now(sock);
  if (peers[address].open == 0) peers.erase(address);
  return false;
}

void TCPServer::Impl::count_in(Connection& conn) {
  Peer& peer = peers[conn.address];
  peers_by_open.erase({peer.open, conn.address});
  ++peer.open;
  peers_by_open.insert({peer.open, conn.address});
  if (!conn.member) peer.evictable.insert(conn.id);
}

void TCPServer::Impl::count_out(Connection& conn) {
  auto found = peers.find(conn.address);
  if (found == peers.end()) return;
  Peer& peer = found->second;
  peer.evictable.erase(conn.id);
  peers_by_open.erase({peer.open, conn.address});
  if (--peer.open > 0) {
    peers_by_open.insert({peer.open, conn.address});
  } else {
    peers.erase(found);
  }
}

void TCPServer::Impl::make_member(Connection& conn) {
  if (conn.member) return;
  conn.member = true;
  auto found = peers.find(conn.address);
  if (found != peers.end()) found->second.evictable.erase(conn.id);
}

bool TCPServer::Impl::evict_one(size_t above, const std::string& why) {
  Connection* victim = nullptr;
  for (auto it = peers_by_open.rbegin(); it != peers_by_open.rend() && it->first > above; ++it) {
    const Peer& peer = peers.at(it->second);
    int scanned = 0;
    for (uint64_t id : peer.evictable) {
      Connection* conn = find(id);
      if (conn == nullptr || conn->dead) continue;
      if (victim == nullptr) victim = conn;  // the oldest, if none is idle
      if (is_idle(*conn)) {
        victim = conn;
        break;
      }
      if (++scanned == kEvictionScan) break;
    }
    if (victim != nullptr) break;
  }
  if (victim == nullptr) return false;
  stat_evicted.fetch_add(1);
  uint64_t evicted = stat_evicted.load();
  if (evicted % kRefusalLogEvery == 1) {
    TDIST_LOG(WARNING) << where() << ": closed client " << victim->sock.peer() << " (" << evicted
                       << " evicted so far): " << why;
  }
  mark_dead(*victim);
  close_now(victim->sock);  // the descriptor is wanted now
  return true;
}

void TCPServer::Impl::close_idle_under_pressure() {
  auto now = ServerClock::now();
  recount_fds_when_due();
  if (!short_of_fds()) return;
  // Back to two reserves free, a turn's closes at a time.
  size_t want = std::min<size_t>(fds_in_use() + 2 * fd_reserve - fd_limit, kMaxClosesPerTurn);
  std::vector<Connection*> victims;
  for (auto it = peers_by_open.rbegin(); it != peers_by_open.rend() && victims.size() < want; ++it) {
    for (uint64_t id : peers.at(it->second).evictable) {
      Connection* conn = find(id);
      if (conn == nullptr || conn->dead || !is_idle(*conn) || now - conn->last_active < kPressureIdle)
        continue;
      victims.push_back(conn);
      if (victims.size() == want) break;
    }
  }
  if (victims.empty()) return;
  TDIST_LOG(WARNING) << where() << ": short of file descriptors (" << fds_in_use() << " in use of "
                     << fd_limit << ", RLIMIT_NOFILE): closing " << victims.size()
                     << " connections idle for a second that hold no keys, the largest addresses' first";
  for (Connection* conn : victims) {
    stat_evicted.fetch_add(1);
    mark_dead(*conn);
  }
}

}  // namespace tdist
