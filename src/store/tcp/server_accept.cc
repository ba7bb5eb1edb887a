// TCPServer's accept path: new connections taken from the kernel, held by
// address, admitted in turn, and served at once when their address holds few.
//
// The kernel's queue of connections not yet accepted is first come first
// served: a new client that connects while a flood does waits behind every
// connection queued before it. The server therefore empties that queue
// first and cheaply (accept and the peer's address, nothing else), keeping
// it short, and admits what it took one address at a time, round robin: a
// client of an address with a connection or two is admitted within one
// round of the addresses with connections waiting, not behind thousands of
// one attacker's. Admitting a connection (the per-address cap, descriptors,
// the handshake, epoll) and its requests are the costly part.

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "store/tcp/server_impl.h"
#include "tdist/logging.h"

namespace tdist {
namespace {

// The time a turn spends taking connections from the kernel, and then
// admitting them: each first, before the turn's events. With a slice of
// 128 accepts per turn and 256 events served between, a new client waited
// 53-105 ms behind 18,000 connecting attackers (tdist-store-flood --attack
// drop); a refusal is a send and a close (512 of them took 16 ms).
constexpr auto kAcceptBudget = std::chrono::milliseconds(2);
constexpr auto kAdmitBudget = std::chrono::milliseconds(4);
constexpr int kBetweenClockReads = 16;
// At most this many connections are held accepted and not yet admitted,
// and only while two reserves of descriptors are left (one for the ranks
// and other addresses, one so that those held never press on connections
// already admitted): past that the rest wait in the kernel's queue, and a
// flood cannot take the process's descriptors through this one.
constexpr size_t kMostPending = 16384;
// A connection from an address that holds at most this many is read from as
// soon as it is admitted, not after the events of the turn (a flood's
// thousands of ready connections): a client with a connection or two gets
// its first answer in the turn that admits it.
constexpr size_t kServedOnAdmitAtMost = 4;

}  // namespace

void TCPServer::Impl::accept_all(const Socket& listener) {
  const auto give_up = ServerClock::now() + kAcceptBudget;
  for (int i = 1;; ++i) {
    if (i % kBetweenClockReads == 0 && ServerClock::now() >= give_up) return;
    if (pending.count >= kMostPending || (pending.count > 0 && short_of_fds(fd_reserve + 1))) return;
    int error = 0;
    Socket sock = accept_connection(listener, &error);
    if (!sock) {
      if (error == EAGAIN) return;
      if (error == EMFILE || error == ENFILE) {
        // Those held here are admitted or refused first, giving back
        // descriptors; with none held, room is made now.
        if (pending.count == 0) shed_one_connection(listener);
        return;
      }
      if (error == ECONNABORTED || error == EPROTO || error == EPERM) continue;
      TDIST_LOG(WARNING) << where() << ": accept failed: " << errno_text(error);
      return;
    }
    note_fd(sock.fd());
    std::string address = sock.peer_address().host();
    auto& queue = pending.by_address[address];
    queue.push_back(std::move(sock));
    ++pending.count;
    if (queue.size() == 1) pending.turn.push_back(std::move(address));
  }
}

// One connection of each address with connections waiting, in turn, until
// none waits or the budget is spent.
void TCPServer::Impl::admit_pending() {
  const auto give_up = ServerClock::now() + kAdmitBudget;
  for (int i = 1; !pending.turn.empty(); ++i) {
    if (i % kBetweenClockReads == 0 && ServerClock::now() >= give_up) return;
    std::string address = std::move(pending.turn.front());
    pending.turn.pop_front();
    auto it = pending.by_address.find(address);
    Socket sock = std::move(it->second.front());
    it->second.pop_front();
    --pending.count;
    if (it->second.empty()) {
      pending.by_address.erase(it);
    } else {
      pending.turn.push_back(address);  // its next connection, a round later
    }
    add_connection(std::move(sock), std::move(address));
  }
}

void TCPServer::Impl::add_connection(Socket sock, std::string address) {
  if (!admit(sock, address)) return;
  auto conn = std::make_unique<Connection>();
  conn->address = std::move(address);
  conn->id = next_connection_id++;
  conn->sock = std::move(sock);
  conn->events = EPOLLIN;
  conn->accepted = conn->last_active = conn->last_sent = ServerClock::now();
  if (options.auth_token) {
    make_room_for_handshake();
    conn->auth = Connection::Auth::kExpectBegin;
    unauthenticated.insert(conn->id);
  }
  epoll_event ev{};
  ev.events = conn->events;
  ev.data.u64 = conn->id;
  if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, conn->sock.fd(), &ev) != 0) {
    TDIST_LOG(WARNING) << where() << ": cannot watch client " << conn->sock.peer() << ": "
                       << errno_text(errno);
    unauthenticated.erase(conn->id);
    return;
  }
  TDIST_LOG(DEBUG) << where() << ": client " << conn->sock.peer() << " connected";
  Connection& added = *conn;
  connections.emplace(conn->id, std::move(conn));
  count_in(added);
  stat_accepted.fetch_add(1);
  stat_open.fetch_add(1);
  if (peers.at(added.address).open > kServedOnAdmitAtMost) return;
  // What it sent with its connect (a first request) is served now; its
  // replies go out with every other's at the end of the turn.
  try {
    read_from(added);
  } catch (const std::exception& e) {
    reject(added, std::string("internal error while serving it: ") + e.what(), nullptr);
  }
}

// The handshake's places are all taken: the oldest connection in it has had
// the longest to prove the token and is closed, so that a flood of clients
// without it delays a real client by at most one handshake, never locks it
// out.
void TCPServer::Impl::make_room_for_handshake() {
  if (options.max_unauthenticated == 0) return;
  while (unauthenticated.size() >= options.max_unauthenticated) {
    Connection* oldest = find(*unauthenticated.begin());
    if (oldest == nullptr) {
      unauthenticated.erase(unauthenticated.begin());
      continue;
    }
    stat_auth_refusals.fetch_add(1);
    reject(*oldest,
           "had not authenticated when " + std::to_string(options.max_unauthenticated) +
               " connections were in the handshake (the limit); the oldest is closed to let a new one in",
           nullptr);
  }
}

// Out of file descriptors (other threads took what the reserve kept, or the
// count of them was off): the count is corrected, and connections of the
// largest addresses are closed so that the waiting client gets in on the
// next turn. With none to close, the waiting connection would keep the
// level-triggered listener readable forever: it is accepted with the spare
// fd and closed at once, so the client sees a reset and retries.
void TCPServer::Impl::shed_one_connection(const Socket& listener) {
  size_t ours = our_fds();
  if (fd_limit > ours) fd_baseline = std::max(fd_baseline, fd_limit - ours);
  if (evict_one(0, "closed: the server ran out of file descriptors (RLIMIT_NOFILE " +
                       std::to_string(fd_limit) + ") and this address holds the most connections")) {
    return;
  }
  if (fd_exhaustion_warnings++ % 1000 == 0) {
    TDIST_LOG(WARNING) << where() << ": out of file descriptors with " << connections.size()
                       << " clients connected, none of which may be closed for others; refusing new clients "
                          "(raise RLIMIT_NOFILE)";
  }
  if (spare_fd >= 0) {
    ::close(spare_fd);
    spare_fd = -1;
  }
  int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) ::close(fd);
  spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

}  // namespace tdist
