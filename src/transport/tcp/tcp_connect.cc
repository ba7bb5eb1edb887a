// Connection setup of the TCP transport: every rank listens, publishes its
// address in the store, connects to every lower rank and accepts every
// higher one. Connects cannot deadlock with accepts: the kernel completes a
// handshake into the listen backlog before accept() is called.

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>

#include <cstring>

#include "common/env.h"
#include "common/error_text.h"
#include "tdist/errors.h"
#include "tdist/logging.h"
#include "transport/tcp/tcp_transport.h"

namespace tdist::transport {
namespace {

constexpr uint32_t kHelloMagic = 0x74647374;  // "tdst"

struct Hello {
  uint32_t magic;
  uint32_t rank;
  uint32_t size;
};

std::string address_key(int rank) {
  return "tcp/addr/" + std::to_string(rank);
}

// The first IPv4 (else IPv6) address of interface `name`.
std::string interface_address(const std::string& name, const char* variable) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw DistNetworkError(std::string("getifaddrs: ") + errno_text(errno));
  std::string v4;
  std::string v6;
  std::string seen;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    int family = it->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    if (seen.find(std::string(" ") + it->ifa_name + ",") == std::string::npos)
      seen += std::string(" ") + it->ifa_name + ",";
    if (name != it->ifa_name) continue;
    SocketAddress addr(it->ifa_addr, family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    if (family == AF_INET && v4.empty()) v4 = addr.host();
    if (family == AF_INET6 && v6.empty()) v6 = addr.host();
  }
  freeifaddrs(list);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  if (!seen.empty()) seen.pop_back();
  throw DistInvalidArgument(std::string(variable) + "='" + name +
                            "': no such network interface with an IP address; this host has:" + seen);
}

}  // namespace

std::string choose_tcp_address(const TcpOptions& options) {
  if (!options.ifname.empty()) return interface_address(options.ifname, "interface");
  if (auto name = env_string("TDIST_SOCKET_IFNAME")) return interface_address(*name, "TDIST_SOCKET_IFNAME");
  if (auto name = env_string("GLOO_SOCKET_IFNAME")) return interface_address(*name, "GLOO_SOCKET_IFNAME");
  if (!options.reach_host.empty()) return local_address_toward(options.reach_host);
  return "127.0.0.1";
}

std::unique_ptr<Transport> connect_tcp(Store& store, int rank, int size, const TcpOptions& options) {
  Deadline deadline = deadline_after(options.timeout);
  std::vector<Socket> sockets(static_cast<size_t>(size));
  std::vector<std::string> addresses(static_cast<size_t>(size));
  if (size == 1) return std::make_unique<TcpTransport>(rank, size, std::move(sockets), std::move(addresses));

  std::string host = choose_tcp_address(options);
  ListenOptions listen_options;
  listen_options.host = host;
  Socket listener = listen_on(0, listen_options);
  std::string me = format_host_port(host, listener.local_port());
  addresses[static_cast<size_t>(rank)] = me;
  store.set(address_key(rank), me);
  TDIST_LOG(DEBUG) << "tcp transport: rank " << rank << " of " << size << " listening on " << me;

  std::string where = "tcp transport: rank " + std::to_string(rank) + " of " + std::to_string(size);
  for (int peer = 0; peer < rank; ++peer) {
    std::string text = to_string(store.get(address_key(peer)));
    HostPort target = parse_host_port(text);
    ConnectOptions connect_options;
    connect_options.domain = ErrorDomain::kNetwork;
    connect_options.what = where + " connecting to rank " + std::to_string(peer);
    Socket socket = connect_with_retry(target.host, target.port, deadline, connect_options);
    Hello hello{kHelloMagic, static_cast<uint32_t>(rank), static_cast<uint32_t>(size)};
    socket.send_all(&hello, sizeof(hello), deadline);
    sockets[static_cast<size_t>(peer)] = std::move(socket);
    addresses[static_cast<size_t>(peer)] = text;
  }
  for (int accepted = 0; accepted < size - 1 - rank;) {
    pollfd pfd{listener.fd(), POLLIN, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SocketClock::now()).count();
    if (left <= 0 || poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1000))) < 0) {
      if (left > 0 && errno == EINTR) continue;
      std::string missing;
      for (int peer = rank + 1; peer < size; ++peer) {
        if (!sockets[static_cast<size_t>(peer)]) missing += " " + std::to_string(peer);
      }
      throw DistNetworkTimeoutError(where + ": timed out after " + std::to_string(options.timeout.count()) +
                                    " ms waiting for ranks" + missing + " to connect to " + me);
    }
    int error = 0;
    Socket socket = accept_connection(listener, &error);
    if (!socket) continue;
    Hello hello{};
    socket.set_nonblocking(false);
    try {
      socket.recv_all(&hello, sizeof(hello), deadline);
    } catch (const DistError& e) {
      TDIST_LOG(WARNING) << where << ": dropping a connection that sent no greeting: " << e.what();
      continue;
    }
    if (hello.magic != kHelloMagic || static_cast<int>(hello.size) != size ||
        static_cast<int>(hello.rank) <= rank || static_cast<int>(hello.rank) >= size || sockets[hello.rank]) {
      TDIST_LOG(WARNING) << where << ": dropping a connection from " << socket.peer_address().to_string()
                         << " with a bad greeting (rank " << hello.rank << ", size " << hello.size << ")";
      continue;
    }
    addresses[hello.rank] = socket.peer_address().to_string();
    sockets[hello.rank] = std::move(socket);
    ++accepted;
  }
  return std::make_unique<TcpTransport>(rank, size, std::move(sockets), std::move(addresses));
}

}  // namespace tdist::transport
