// Where the TCPStore server listens (docs/stores.md, "Listening address"):
// on the addresses of the host it was given, so MASTER_ADDR=127.0.0.1 is
// reachable from this machine only; on every interface only when asked.

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "store/tcp/server.h"
#include "store_attack.h"
#include "tdist/errors.h"
#include "tdist/tcp_store.h"

namespace tdist {
namespace {

using std::chrono::milliseconds;

// An IPv4 address of this host other than loopback, if it has one.
std::optional<std::string> non_loopback_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (ifaddrs* a = list; a != nullptr && !found; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    auto* in = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    found = text;
  }
  ::freeifaddrs(list);
  return found;
}

// Whether a plain connect() to address:port succeeds (no retry: a refusal
// is the answer).
bool reachable(const std::string& address, uint16_t port) {
  Socket sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
  return ::connect(sock.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

TCPStoreOptions master_options() {
  TCPStoreOptions options;
  options.is_master = true;
  options.timeout = store_attack::kLong;
  return options;
}

TEST(StoreListen, LoopbackHostListensOnLoopbackOnly) {
  TCPServerOptions options;
  options.host = "127.0.0.1";
  auto server = TCPServer::start(options);
  EXPECT_EQ(server->listen_addresses(),
            std::vector<std::string>{"127.0.0.1:" + std::to_string(server->port())});
  EXPECT_TRUE(reachable("127.0.0.1", server->port()));
  auto other = non_loopback_ipv4();
  if (!other) GTEST_SKIP() << "this host has no non-loopback IPv4 address to try";
  EXPECT_FALSE(reachable(*other, server->port())) << "the store answered on " << *other;
}

TEST(StoreListen, MasterStoreListensOnItsHostOnly) {
  auto other = non_loopback_ipv4();
  if (!other) GTEST_SKIP() << "this host has no non-loopback IPv4 address to try";
  TCPStore master("127.0.0.1", master_options());
  master.set("k", "v");
  EXPECT_FALSE(reachable(*other, master.port()));
  // And the other way round: a master given the outside address is not
  // reachable on loopback.
  TCPStore outside(*other, master_options());
  EXPECT_TRUE(reachable(*other, outside.port()));
  EXPECT_FALSE(reachable("127.0.0.1", outside.port()));
}

TEST(StoreListen, EveryInterfaceWhenAsked) {
  auto other = non_loopback_ipv4();
  if (!other) GTEST_SKIP() << "this host has no non-loopback IPv4 address to try";
  TCPStoreOptions options = master_options();
  options.listen_host = "0.0.0.0";
  TCPStore master("127.0.0.1", options);
  TCPStoreOptions client;
  client.port = master.port();
  client.timeout = store_attack::kLong;
  TCPStore remote(*other, client);
  remote.set("from", "outside");
  EXPECT_EQ(to_string(master.get("from")), "outside");
}

TEST(StoreListen, EnvironmentVariableOpensEveryInterface) {
  auto other = non_loopback_ipv4();
  if (!other) GTEST_SKIP() << "this host has no non-loopback IPv4 address to try";
  // NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread reads the environment here
  ::setenv("TDIST_STORE_LISTEN_HOST", "0.0.0.0", 1);
  std::optional<TCPStore> master;
  try {
    master.emplace("127.0.0.1", master_options());
  } catch (...) {
    // NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread reads the environment here
    ::unsetenv("TDIST_STORE_LISTEN_HOST");
    // meanwhile
    throw;
  }
  // NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread reads the environment here
  ::unsetenv("TDIST_STORE_LISTEN_HOST");
  EXPECT_TRUE(reachable(*other, master->port()));
}

// A name is listened on at every address it resolves to.
TEST(StoreListen, NameListensOnEachOfItsAddresses) {
  TCPServerOptions options;
  options.host = "localhost";
  auto server = TCPServer::start(options);
  std::vector<std::string> expected;
  for (const auto& address : resolve("localhost", server->port())) {
    if (std::find(expected.begin(), expected.end(), address.to_string()) == expected.end())
      expected.push_back(address.to_string());
  }
  std::vector<std::string> got = server->listen_addresses();
  std::sort(expected.begin(), expected.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, expected);
}

// Debian's /etc/hosts maps the hostname to a loopback address (127.0.1.1):
// a store given that name is reachable from this machine only, and says so.
TEST(StoreListen, HostnameResolvingToLoopbackIsWarnedAbout) {
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof(name) - 1), 0);
  bool loopback_only = true;
  for (const auto& address : resolve(name, 0)) {
    std::string host = address.host();
    loopback_only = loopback_only && (host.rfind("127.", 0) == 0 || host == "::1");
  }
  if (!loopback_only || std::string(name) == "localhost")
    GTEST_SKIP() << "'" << name << "' resolves to a non-loopback address here";
  TCPServerOptions options;
  options.host = name;
  ::testing::internal::CaptureStderr();
  auto server = TCPServer::start(options);
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("resolves on this host only to loopback"), std::string::npos) << log;
}

TEST(StoreListen, AddressNotOfThisHostIsAClearError) {
  TCPServerOptions options;
  options.host = "192.0.2.123";  // TEST-NET-1: not an address of this host
  try {
    TCPServer::start(options);
    ADD_FAILURE() << "listened on an address this host does not have";
  } catch (const DistStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("192.0.2.123"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tdist
