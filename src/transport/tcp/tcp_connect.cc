// Connection setup of the TCP transport: every rank listens, publishes its
// address and a fresh identity in the store, connects to every lower rank
// and accepts every higher one, several connections per pair
// (TcpOptions::sockets_per_peer, chosen by the connecting rank and announced
// in each greeting). Each connection passes the greeting of
// tcp_handshake.h (member of this generation, and the job's token when
// there is one) before it carries anything. The connector waits for the
// acceptor's verdict, and that cannot deadlock: a rank connects only to
// lower ranks before it starts accepting, so rank 0 accepts at once, rank 1
// as soon as rank 0 has admitted it, and so on up.

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/auth.h"
#include "common/env.h"
#include "common/error_text.h"
#include "tdist/errors.h"
#include "tdist/logging.h"
#include "transport/tcp/tcp_handshake.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_wire.h"

namespace tdist::transport {
namespace {

using tcp::Hello;

int sockets_per_peer(const TcpOptions& options, int size) {
  if (options.sockets_per_peer > 0) return std::min(options.sockets_per_peer, kMaxSocketsPerPeer);
  if (auto n = env_int("TDIST_TCP_SOCKETS", 1, kMaxSocketsPerPeer)) return static_cast<int>(*n);
  // The default must not run a large job out of file descriptors: keep the
  // connections within half of the soft limit (1024 by default, so 128
  // ranks and more get one connection per peer).
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kDefaultSocketsPerPeer;
  const auto fit = static_cast<int64_t>(limit.rlim_cur / 2) / std::max(1, size - 1);
  return static_cast<int>(std::clamp<int64_t>(fit, 1, kDefaultSocketsPerPeer));
}

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
  if (if_nametoindex(name.c_str()) != 0) {
    throw DistInvalidArgument(std::string(variable) + "='" + name +
                              "': the interface exists but has no IP address (is it down?); interfaces with "
                              "one:" +
                              seen);
  }
  throw DistInvalidArgument(std::string(variable) + "='" + name +
                            "': no such network interface with an IP address; this host has:" + seen);
}

// The address of every interface of a comma-separated list, in its order
// (a name listed twice counts twice, as in gloo: two devices on it).
std::vector<std::string> interface_addresses(const std::string& list, const char* variable) {
  std::vector<std::string> addresses;
  size_t start = 0;
  for (;;) {
    const size_t comma = list.find(',', start);
    const std::string name =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.empty()) {
      throw DistInvalidArgument(std::string(variable) + "='" + list +
                                "': expected interface names separated by commas, got an empty name");
    }
    addresses.push_back(interface_address(name, variable));
    if (comma == std::string::npos) return addresses;
    start = comma + 1;
  }
}

// "host:port,host:port": the listeners a rank advertises.
std::vector<HostPort> parse_address_list(const std::string& text) {
  std::vector<HostPort> list;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    list.push_back(
        parse_host_port(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) return list;
    start = comma + 1;
  }
}

}  // namespace

std::vector<std::string> choose_tcp_addresses(const TcpOptions& options) {
  if (!options.ifname.empty()) return interface_addresses(options.ifname, "interface");
  if (auto names = env_string("TDIST_SOCKET_IFNAME"))
    return interface_addresses(*names, "TDIST_SOCKET_IFNAME");
  if (auto names = env_string("GLOO_SOCKET_IFNAME")) return interface_addresses(*names, "GLOO_SOCKET_IFNAME");
  if (!options.reach_host.empty()) return {local_address_toward(options.reach_host)};
  return {"127.0.0.1"};
}

std::string choose_tcp_address(const TcpOptions& options) {
  return choose_tcp_addresses(options).front();
}

std::unique_ptr<Transport> connect_tcp(Store& store, int rank, int size, const TcpOptions& options) {
  Deadline deadline = deadline_after(options.timeout);
  // " timed out after N ms": the timeout the user set.
  const std::string timed_out =
      ": timed out after " + std::to_string(options.timeout_in_messages.value_or(options.timeout).count()) +
      " ms";
  std::vector<std::vector<Socket>> sockets(static_cast<size_t>(size));
  std::vector<std::string> addresses(static_cast<size_t>(size));
  std::vector<size_t> interfaces(static_cast<size_t>(size), 1);  // the accepting rank's, per pair
  if (size == 1) return std::make_unique<TcpTransport>(rank, size, std::move(sockets), std::move(addresses));
  std::optional<std::string> token = options.token ? options.token : auth::token_from_env();
  if (token && token->empty()) token.reset();

  // One listener per listed interface (gloo's one device per interface);
  // the advertisement lists them all, in the order of the list, after this
  // connect's fresh identity: a connection must name it to be accepted, so
  // one meant for an earlier generation of the group (or another job) is not.
  std::vector<Socket> listeners;
  std::string me;
  for (const std::string& host : choose_tcp_addresses(options)) {
    ListenOptions listen_options;
    listen_options.host = host;
    listeners.push_back(listen_on(0, listen_options));
    me += (me.empty() ? "" : ",") + format_host_port(host, listeners.back().local_port());
  }
  const tcp::Identity my_id = auth::make_nonce();
  addresses[static_cast<size_t>(rank)] = me;
  store.set(address_key(rank), tcp::encode_advertisement(my_id, me));
  TDIST_LOG(DEBUG) << "tcp transport: rank " << rank << " of " << size << " listening on " << me
                   << (token ? ", authenticating with the job's token" : "");

  std::string where = "tcp transport: rank " + std::to_string(rank) + " of " + std::to_string(size);
  for (int peer = 0; peer < rank; ++peer) {
    // Within the group's timeout, not the store's: a peer that never comes
    // (at another generation of the group, say) fails this connect in time.
    try {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SocketClock::now());
      store.wait({address_key(peer)}, std::max(left, std::chrono::milliseconds(1)));
    } catch (const DistTimeoutError& e) {
      throw DistNetworkTimeoutError(where + timed_out + " waiting for rank " + std::to_string(peer) +
                                    " to publish its address (" + e.what() + ")");
    }
    const std::string text = to_string(store.get(address_key(peer)));
    const std::optional<tcp::Advertisement> ad = tcp::parse_advertisement(text);
    if (!ad) {
      throw DistNetworkError(
          where + ": rank " + std::to_string(peer) + " published '" + text.substr(0, 200) +
          "' as its address, not '<identity> host:port,...' (a rank of an older tdist build?)");
    }
    const std::vector<HostPort> targets = parse_address_list(ad->addresses);
    // The connecting rank decides for the pair: connection c goes to the
    // peer's listed interface c % n, and there is at least one connection
    // per interface, so that every listed interface carries its share of
    // the pair's stripes.
    const int connections = std::min(
        kMaxSocketsPerPeer, std::max(sockets_per_peer(options, size), static_cast<int>(targets.size())));
    ConnectOptions connect_options;
    connect_options.domain = ErrorDomain::kNetwork;
    connect_options.what = where + " connecting to rank " + std::to_string(peer);
    if (options.while_waiting) {
      // A peer publishes its address once it listens: one that refuses has
      // died, or given this connect up (TcpOptions::while_waiting).
      connect_options.max_backoff = std::chrono::milliseconds(100);
      connect_options.on_retry = [&](int, int) { options.while_waiting(); };
    }
    for (int c = 0; c < connections; ++c) {
      const HostPort& target = targets[static_cast<size_t>(c) % targets.size()];
      Socket socket = connect_with_retry(target.host, target.port, deadline, connect_options);
      Hello hello{tcp::kHelloMagic,
                  tcp::kWireVersion,
                  static_cast<uint32_t>(rank),
                  static_cast<uint32_t>(size),
                  static_cast<uint32_t>(peer),
                  static_cast<uint32_t>(c),
                  static_cast<uint32_t>(connections),
                  token ? tcp::kHelloAuth : 0,
                  my_id,
                  ad->id};
      tcp::greet_acceptor(socket, hello, token, deadline,
                          connect_options.what + " at " + format_host_port(target.host, target.port) +
                              " (connection " + std::to_string(c) + " of " + std::to_string(connections) +
                              ")");
      sockets[static_cast<size_t>(peer)].push_back(std::move(socket));
    }
    addresses[static_cast<size_t>(peer)] = ad->addresses;
    interfaces[static_cast<size_t>(peer)] = targets.size();
  }
  for (int peer = rank + 1; peer < size; ++peer) interfaces[static_cast<size_t>(peer)] = listeners.size();
  // A higher rank is connected once all of its connections are in.
  auto complete = [&](int peer) {
    const auto& list = sockets[static_cast<size_t>(peer)];
    return !list.empty() && std::all_of(list.begin(), list.end(), [](const Socket& s) { return s.valid(); });
  };
  tcp::GreetingDesk::Config desk_config;
  desk_config.rank = rank;
  desk_config.size = size;
  desk_config.me = my_id;
  desk_config.token = token;
  desk_config.where = where;
  std::vector<std::optional<tcp::Identity>> published(static_cast<size_t>(size));
  desk_config.published = [&](int peer) {
    // Read once: a rank publishes before it connects, and its identity
    // does not change within a connect.
    auto& id = published[static_cast<size_t>(peer)];
    if (!id && store.check({address_key(peer)})) {
      if (auto ad = tcp::parse_advertisement(to_string(store.get(address_key(peer))))) id = ad->id;
    }
    return id;
  };
  tcp::GreetingDesk desk(std::move(desk_config));
  std::vector<pollfd> pfds;
  size_t next = 0;  // the listener to accept from first, taken in turns
  for (int accepted = 0; accepted < size - 1 - rank;) {
    if (options.while_waiting) {
      try {
        options.while_waiting();
      } catch (...) {
        desk.close_all("the accepting rank gave the connect up");
        throw;
      }
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SocketClock::now()).count();
    pfds.clear();
    // Always accepting: a full desk makes room for a new connection (GreetingDesk::add).
    for (const Socket& listener : listeners) pfds.push_back({listener.fd(), POLLIN, 0});
    desk.poll_set(pfds);
    // Wake at least every 100 ms to expire greetings that stalled.
    if (left <= 0 || poll(pfds.data(), pfds.size(), static_cast<int>(std::min<int64_t>(left, 100))) < 0) {
      if (left > 0 && errno == EINTR) continue;
      std::string missing;
      for (int peer = rank + 1; peer < size; ++peer) {
        if (!complete(peer)) missing += " " + std::to_string(peer);
      }
      desk.close_all("the accepting rank timed out");
      throw DistNetworkTimeoutError(where + timed_out + " waiting for ranks" + missing + " to connect to " +
                                    me);
    }
    for (tcp::Admitted& in : desk.progress(pfds.data() + listeners.size())) {
      const int peer = static_cast<int>(in.hello.rank);
      auto& list = sockets[in.hello.rank];
      if (list.empty()) list.resize(in.hello.connections);
      // The desk admits each slot once, with one count per rank; checked
      // again because a mistake would write outside the table.
      if (list.size() != in.hello.connections || in.hello.connection >= list.size() ||
          list[in.hello.connection].valid()) {
        desk.close_all("the accepting rank failed");
        throw DistBackendError(where + ": internal error: rank " + std::to_string(peer) + "'s connection " +
                               std::to_string(in.hello.connection) + " of " +
                               std::to_string(in.hello.connections) + " was admitted into a table of " +
                               std::to_string(list.size()) + " that already held it or cannot");
      }
      if (in.hello.connection == 0) addresses[in.hello.rank] = in.address;
      list[in.hello.connection] = std::move(in.socket);
      if (complete(peer)) ++accepted;  // once per rank: its last slot was just filled
    }
    int error = 0;
    for (size_t i = 0; i < listeners.size(); ++i) {
      Socket socket = accept_connection(listeners[(next + i) % listeners.size()], &error);
      if (socket) desk.add(std::move(socket), deadline);
    }
    next = (next + 1) % listeners.size();
  }
  desk.close_all("every rank of the group is already connected");
  return std::make_unique<TcpTransport>(rank, size, std::move(sockets), std::move(addresses), interfaces,
                                        options.crash_breaks_group, options.loop_spin);
}

}  // namespace tdist::transport
