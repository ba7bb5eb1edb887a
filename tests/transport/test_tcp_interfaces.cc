// The TCP transport on a list of interfaces (TcpOptions::ifname,
// TDIST_SOCKET_IFNAME / GLOO_SOCKET_IFNAME "lo,lo"): one listener per listed
// interface, every pair's connections spread over the accepting rank's
// listeners, messages intact. Loopback only.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "multirank.h"
#include "tdist/errors.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_wire.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

// The inodes of this process's sockets (/proc/self/fd links "socket:[N]").
std::set<std::string> own_socket_inodes() {
  std::set<std::string> inodes;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
    if (!error && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  return inodes;
}

// Established IPv4 connections of this process whose local port is `port`
// (/proc/net/tcp: "sl local rem st tx:rx tr:when retrnsmt uid timeout inode",
// hex "ADDR:PORT", st 01). Only this process's: the table is the whole
// network namespace's, and a test running beside this one may still hold
// connections accepted on the same port number by a listener it has closed.
int established_on(uint16_t port) {
  const std::set<std::string> own = own_socket_inodes();
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // the header
  int count = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
    const size_t colon = local.find(':');
    if (colon == std::string::npos || state != "01" || own.count(inode) == 0) continue;
    if (std::stoul(local.substr(colon + 1), nullptr, 16) == port) ++count;
  }
  return count;
}

std::vector<HostPort> advertised(Store& store, int rank) {
  std::vector<HostPort> list;
  // "<identity> host:port,host:port" (tcp_wire.h)
  auto ad = transport::tcp::parse_advertisement(to_string(store.get("tcp/addr/" + std::to_string(rank))));
  if (!ad) throw std::runtime_error("rank " + std::to_string(rank) + " published no valid advertisement");
  std::istringstream in(ad->addresses);
  for (std::string item; std::getline(in, item, ',');) list.push_back(parse_host_port(item));
  return list;
}

TEST(TcpInterfaces, ATwiceListedInterfaceGetsTwoListenersAndEveryPairUsesBoth) {
  for (int n : {2, 4}) {
    std::string failures = run_with_store(Mode::kThreads, n, [&](Store& store, int rank) -> KeepAlive {
      transport::TcpOptions options;
      options.timeout = 30s;
      options.ifname = "lo,lo";
      options.sockets_per_peer = 1;  // still one connection per listed interface
      std::shared_ptr<transport::Transport> t = transport::connect_tcp(store, rank, n, options);
      const std::vector<HostPort> mine = advertised(store, rank);
      if (mine.size() != 2 || mine[0].host != "127.0.0.1" || mine[1].host != "127.0.0.1" ||
          mine[0].port == mine[1].port) {
        throw std::runtime_error("rank " + std::to_string(rank) + " advertised " +
                                 to_string(store.get("tcp/addr/" + std::to_string(rank))));
      }
      // Every higher rank made a connection to each of my listeners. At
      // least: under load this process has held 3 where 1 was expected, for
      // a cause not traced yet (issue 43's closing note).
      for (const HostPort& listener : mine) {
        const int established = established_on(listener.port);
        if (established < n - 1 - rank) {
          throw std::runtime_error("rank " + std::to_string(rank) + ": " + std::to_string(established) +
                                   " connections on port " + std::to_string(listener.port) +
                                   ", expected at least " + std::to_string(n - 1 - rank));
        }
      }
      // Messages on both sides of both stripe thresholds (64 KiB for a pair
      // whose accepting rank lists two interfaces, as here; 1 MiB
      // otherwise), one after another on the same pairs, cross intact: both
      // ends of each pair cut (or not) every one of them the same way.
      const size_t multi = transport::tcp::kMultiInterfaceStripeMinBytes;
      const size_t sizes[] = {multi - 1, multi, multi + 4097, transport::tcp::kStripeMinBytes * 2 + 13};
      for (size_t bytes : sizes) {
        auto value = [&](size_t i, int from, int to) {
          return static_cast<uint8_t>(i * 7 + static_cast<size_t>(from) * 31 + static_cast<size_t>(to) +
                                      bytes);
        };
        std::vector<std::vector<uint8_t>> out;
        std::vector<std::vector<uint8_t>> in;
        std::vector<transport::RequestPtr> requests;
        for (int peer = 0; peer < n; ++peer) {
          if (peer == rank) continue;
          out.emplace_back(bytes);
          for (size_t i = 0; i < bytes; ++i) out.back()[i] = value(i, rank, peer);
          in.emplace_back(bytes);
          requests.push_back(t->irecv(peer, 9, in.back().data(), bytes));
          requests.push_back(t->isend(peer, 9, out.back().data(), bytes));
        }
        for (auto& r : requests) {
          if (!r->wait_until(transport::Clock::now() + 30s)) throw std::runtime_error("a message timed out");
        }
        size_t k = 0;
        for (int peer = 0; peer < n; ++peer) {
          if (peer == rank) continue;
          for (size_t i = 0; i < bytes; ++i) {
            if (in[k][i] != value(i, peer, rank)) {
              throw std::runtime_error("from rank " + std::to_string(peer) + ", " + std::to_string(bytes) +
                                       " bytes: byte " + std::to_string(i) + " is wrong");
            }
          }
          ++k;
        }
      }
      return t;
    });
    EXPECT_EQ(failures, "") << n << " ranks";
  }
}

TEST(TcpInterfaces, EveryListedNameIsCheckedAndAnEmptyOneIsRefused) {
  transport::TcpOptions options;
  options.ifname = "lo,lo";
  EXPECT_EQ(transport::choose_tcp_addresses(options), (std::vector<std::string>{"127.0.0.1", "127.0.0.1"}));
  for (const auto& [list, expected] : {std::pair<std::string, std::string>{"lo,nosuch0", "'nosuch0'"},
                                       {"nosuch0,lo", "'nosuch0'"},
                                       {"lo,,lo", "got an empty name"},
                                       {"lo,", "got an empty name"}}) {
    options.ifname = list;
    try {
      transport::choose_tcp_addresses(options);
      ADD_FAILURE() << "'" << list << "' was accepted";
    } catch (const DistInvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(expected), std::string::npos) << what;
      if (expected == "'nosuch0'") {
        EXPECT_NE(what.find("no such network interface with an IP address; this host has:"),
                  std::string::npos)
            << what;
        EXPECT_NE(what.find(" lo"), std::string::npos) << what;
      }
    }
  }
}

}  // namespace
}  // namespace tdist::testing
