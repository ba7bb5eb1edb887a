// TCPStore-specific behaviour: addresses, connecting, timeouts and their
// messages, world_size, multi-tenancy, adopted listen sockets, shutdown. The
// generic store semantics are in the conformance suite. Also the socket layer
// the store is built on (src/common/socket.h).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/socket.h"
#include "multirank.h"
#include "store/tcp/client.h"
#include "store/tcp/server.h"
#include "tdist/errors.h"
#include "tdist/tcp_store.h"

namespace tdist {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr milliseconds kLong = seconds(60);

TCPStoreOptions master_options(std::optional<int> world_size = std::nullopt, milliseconds timeout = kLong) {
  TCPStoreOptions options;
  options.is_master = true;
  options.port = 0;
  options.world_size = world_size;
  options.timeout = timeout;
  return options;
}

TCPStoreOptions client_options(uint16_t port, std::optional<int> world_size = std::nullopt,
                               milliseconds timeout = kLong) {
  TCPStoreOptions options;
  options.port = port;
  options.world_size = world_size;
  options.timeout = timeout;
  return options;
}

// A socket bound to a free loopback port but not listening: connections to
// the port are refused, and nobody else can take the port meanwhile.
Socket bound_not_listening(uint16_t* port, int family = AF_INET) {
  Socket sock(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (family == AF_INET) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(sock.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return {};
  } else {
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_loopback;
    if (::bind(sock.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return {};
  }
  *port = sock.local_port();
  return sock;
}

bool ipv6_loopback_available() {
  uint16_t port = 0;
  return bound_not_listening(&port, AF_INET6).valid();
}

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not found in: " << text;
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

// ---- addresses -------------------------------------------------------------------

TEST(TCPStore, PortZeroPicksAndReportsAFreePort) {
  TCPStore master("127.0.0.1", master_options());
  ASSERT_NE(master.port(), 0);
  EXPECT_TRUE(master.is_master());
  TCPStore client("127.0.0.1", client_options(master.port()));
  EXPECT_FALSE(client.is_master());
  EXPECT_EQ(client.port(), master.port());
  master.set("k", "v");
  EXPECT_EQ(to_string(client.get("k")), "v");
}

TEST(TCPStore, WorksOverIPv4Loopback) {
  TCPStore master("127.0.0.1", master_options());
  TCPStore client("127.0.0.1", client_options(master.port()));
  client.set("ipv4", "yes");
  EXPECT_EQ(to_string(master.get("ipv4")), "yes");
}

TEST(TCPStore, WorksOverIPv6Loopback) {
  if (!ipv6_loopback_available()) GTEST_SKIP() << "::1 cannot be bound on this host";
  TCPStore master("::1", master_options());
  TCPStore client("::1", client_options(master.port()));
  client.set("ipv6", "yes");
  EXPECT_EQ(to_string(master.get("ipv6")), "yes");
}

TEST(TCPStore, WorksWithAHostName) {
  TCPStore master("localhost", master_options());
  TCPStore client("localhost", client_options(master.port()));
  client.set("name", "localhost");
  EXPECT_EQ(to_string(master.get("name")), "localhost");
}

TEST(TCPStore, MasterListeningEverywhereServesIPv4AndIPv6ClientsAtOnce) {
  if (!ipv6_loopback_available()) GTEST_SKIP() << "::1 cannot be bound on this host";
  TCPStoreOptions options = master_options();
  options.listen_host = "::";  // every interface, dual-stack
  TCPStore master("127.0.0.1", options);
  TCPStore v6("::1", client_options(master.port()));
  v6.set("from", "v6");
  EXPECT_EQ(to_string(master.get("from")), "v6");
}

TEST(TCPStore, RejectsInvalidArguments) {
  EXPECT_THROW(TCPStore("127.0.0.1", client_options(0)), DistInvalidArgument);
  EXPECT_THROW(TCPStore("", master_options()), DistInvalidArgument);
  EXPECT_THROW(TCPStore("127.0.0.1", master_options(0)), DistInvalidArgument);
}

// ---- connecting --------------------------------------------------------------------

TEST(TCPStore, ClientStartedBeforeServerRetriesThenConnects) {
  uint16_t port = 0;
  Socket reserved = bound_not_listening(&port);
  ASSERT_TRUE(reserved.valid());
  std::promise<void> started;
  auto client = std::async(std::launch::async, [&] {
    started.set_value();
    TCPStore store("127.0.0.1", client_options(port));
    return to_string(store.get("hello"));
  });
  started.get_future().wait();
  // The master adopts the reserved socket: until now connections were refused.
  TCPStoreOptions options = master_options();
  options.port = port;
  options.master_listen_fd = reserved.release();
  TCPStore master("127.0.0.1", options);
  master.set("hello", "world");
  EXPECT_EQ(client.get(), "world");
}

TEST(TCPStore, NoServerTimesOutNamingHostPortAndTimeWaited) {
  uint16_t port = 0;
  Socket reserved = bound_not_listening(&port);
  ASSERT_TRUE(reserved.valid());
  try {
    TCPStore store("127.0.0.1", client_options(port, std::nullopt, milliseconds(300)));
    FAIL() << "connected to a port nobody listens on";
  } catch (const DistStoreTimeoutError& e) {
    std::string what = e.what();
    EXPECT_TRUE(contains(what, "127.0.0.1"));
    EXPECT_TRUE(contains(what, std::to_string(port)));
    EXPECT_TRUE(contains(what, "after waiting"));
    EXPECT_TRUE(contains(what, " ms"));
    EXPECT_TRUE(contains(what, "refused"));
    EXPECT_NE(dynamic_cast<const DistTimeoutError*>(&e), nullptr);
  }
}

TEST(TCPStore, UnknownHostNameFailsAtOnceNamingTheHost) {
  std::string what = error_of([] { TCPStore("no-such-host.invalid", client_options(1234)); });
  EXPECT_TRUE(contains(what, "no-such-host.invalid"));
}

TEST(TCPStore, PortInUseByAnotherMasterIsANamedError) {
  TCPStore first("127.0.0.1", master_options());
  TCPStoreOptions options = master_options();
  options.port = first.port();
  try {
    TCPStore second("127.0.0.1", options);
    FAIL() << "two servers on one port";
  } catch (const DistStoreError& e) {
    EXPECT_TRUE(contains(std::string(e.what()), std::to_string(first.port())));
    EXPECT_TRUE(contains(std::string(e.what()), "in use"));
  }
}

// ---- timeouts ------------------------------------------------------------------------

TEST(TCPStore, GetTimeoutIsAStoreAndATimeoutErrorNamingKeyTimeoutAndServer) {
  TCPStore store("127.0.0.1", master_options(std::nullopt, milliseconds(200)));
  try {
    store.get("never-set");
    FAIL() << "get of a missing key returned";
  } catch (const DistStoreError& e) {
    std::string what = e.what();
    EXPECT_NE(dynamic_cast<const DistTimeoutError*>(&e), nullptr);
    EXPECT_TRUE(contains(what, "get"));
    EXPECT_TRUE(contains(what, "'never-set'"));
    EXPECT_TRUE(contains(what, "200 ms"));
    EXPECT_TRUE(contains(what, "127.0.0.1:" + std::to_string(store.port())));
  }
  EXPECT_THROW(store.get("never-set"), DistTimeoutError);
}

TEST(TCPStore, WaitTimeoutNamesOnlyTheKeysStillMissing) {
  TCPStore store("127.0.0.1", master_options());
  store.set("present", "1");
  std::string what = error_of([&] { store.wait({"present", "absent"}, milliseconds(150)); });
  EXPECT_TRUE(contains(what, "wait"));
  EXPECT_TRUE(contains(what, "'absent'"));
  EXPECT_FALSE(contains(what, "'present'"));
  EXPECT_TRUE(contains(what, "150 ms"));
  EXPECT_TRUE(contains(what, "127.0.0.1:" + std::to_string(store.port())));
  EXPECT_THROW(store.wait({"absent"}, milliseconds(10)), DistStoreTimeoutError);
}

TEST(TCPStore, SetTimeoutChangesTheDefaultOfGetAndWait) {
  TCPStore store("127.0.0.1", master_options());
  store.set_timeout(milliseconds(120));
  EXPECT_TRUE(contains(error_of([&] { store.get("x"); }), "120 ms"));
  EXPECT_TRUE(contains(error_of([&] { store.wait({"x"}); }), "120 ms"));
}

TEST(TCPStore, ConnectionStaysUsableAfterTimeouts) {
  TCPStore store("127.0.0.1", master_options());
  for (int i = 0; i < 5; ++i) {
    store.set_timeout(milliseconds(1 + 10 * i));
    EXPECT_THROW(store.get("late"), DistStoreError) << "round " << i;
  }
  // Cancelled waiters are gone from the server: setting the key now must not
  // send replies this client would mistake for the answers below.
  store.set_timeout(kLong);
  store.set("late", "now");
  EXPECT_EQ(to_string(store.get("late")), "now");
  EXPECT_EQ(store.add("n", 5), 5);
  EXPECT_EQ(to_string(store.get("late")), "now");
}

// ---- waiting without polling ----------------------------------------------------------------

TEST(TCPStore, WaitIsAnsweredByTheServerWhenAnotherThreadSetsTheKey) {
  auto server = TCPServer::start({});
  TCPStoreClient waiter("127.0.0.1", server->port(), kLong);
  TCPStoreClient setter("127.0.0.1", server->port(), kLong);
  uint64_t before = waiter.requests_sent();
  auto waiting = std::async(std::launch::async, [&] {
    waiter.wait({"a", "b"}, kLong);
    return waiter.get("b", kLong);
  });
  setter.set("a", to_bytes("1"), kLong);
  setter.set("b", to_bytes("2"), kLong);
  EXPECT_EQ(to_string(waiting.get()), "2");
  // One WAIT and one GET: the client never polled.
  EXPECT_EQ(waiter.requests_sent() - before, 2u);
}

TEST(TCPStore, GetWaitsForTheKey) {
  TCPStore master("127.0.0.1", master_options());
  TCPStore client("127.0.0.1", client_options(master.port()));
  auto got = std::async(std::launch::async, [&] { return to_string(client.get("later")); });
  master.set("later", "here");
  EXPECT_EQ(got.get(), "here");
}

TEST(TCPStore, OthersConnectedCountsTheOtherUsersOfTheMastersServer) {
  TCPStore master("127.0.0.1", master_options());
  EXPECT_EQ(master.others_connected(), 0);
  {
    TCPStore first("127.0.0.1", client_options(master.port()));
    TCPStore second("127.0.0.1", client_options(master.port()));
    // Each client's constructor had an answer from the server: both counted.
    EXPECT_EQ(master.others_connected(), 2);
    EXPECT_EQ(first.others_connected(), -1);  // a client serves nobody
  }
  // The server notices the closed connections on its next turns.
  const auto deadline = std::chrono::steady_clock::now() + kLong;
  while (master.others_connected() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_EQ(master.others_connected(), 0);
}

// ---- world_size ------------------------------------------------------------------------------

TEST(TCPStore, MasterWaitsForWorkersAndNamesHowManyJoined) {
  try {
    TCPStore master("127.0.0.1", master_options(2, milliseconds(300)));
    FAIL() << "the master did not wait for the missing worker";
  } catch (const DistStoreTimeoutError& e) {
    EXPECT_TRUE(contains(std::string(e.what()), "1 of 2"));
  }
}

TEST(TCPStore, AllWorkersJoinTheMaster) {
  uint16_t port = 0;
  Socket reserved = bound_not_listening(&port);
  ASSERT_TRUE(reserved.valid());
  constexpr int kWorld = 4;
  EXPECT_EQ(testing::run_ranks(testing::Mode::kThreads, kWorld,
                               [&](int rank) {
                                 if (rank == 0) {
                                   TCPStoreOptions options = master_options(kWorld);
                                   options.port = port;
                                   options.master_listen_fd = reserved.release();
                                   TCPStore master("127.0.0.1", options);
                                   // Everyone joined before the constructor returned.
                                   EXPECT_EQ(master.add(TCPStore::kInitKey, 0), kWorld);
                                   master.wait({"done/1", "done/2", "done/3"});
                                 } else {
                                   TCPStore worker("127.0.0.1", client_options(port, kWorld));
                                   worker.set("done/" + std::to_string(rank), "1");
                                 }
                               }),
            "");
}

TEST(TCPStore, WaitForWorkersFalseReturnsAtOnce) {
  TCPStoreOptions options = master_options(3, milliseconds(100));
  options.wait_for_workers = false;
  TCPStore master("127.0.0.1", options);
  EXPECT_EQ(master.add(TCPStore::kInitKey, 0), 1);
}

TEST(TCPStore, NumKeysCountsTheInitKeyAsTheSpecSays) {
  TCPStore store("127.0.0.1", 0, 1, true, seconds(30));
  store.set("first_key", "first_value");
  EXPECT_EQ(store.num_keys(), 2);
  EXPECT_TRUE(store.delete_key("first_key"));
  EXPECT_FALSE(store.delete_key("bad_key"));
  EXPECT_EQ(store.num_keys(), 1);
}

TEST(TCPStore, AddOnAValueNamesTheKey) {
  TCPStore store("127.0.0.1", master_options());
  store.set("x", "text");
  try {
    store.add("x", 1);
    FAIL() << "add on a set() key succeeded";
  } catch (const DistStoreError& e) {
    EXPECT_TRUE(contains(std::string(e.what()), "TCPStore add: key 'x' holds a value written by set()"));
  }
  EXPECT_EQ(to_string(store.get("x")), "text");  // still usable
}

TEST(TCPStore, LargeValuesRoundTrip) {
  TCPStore master("127.0.0.1", master_options());
  TCPStore client("127.0.0.1", client_options(master.port()));
  Bytes big(24 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131 + 7);
  client.set("big", big);
  EXPECT_EQ(master.get("big"), big);
  EXPECT_EQ(client.compare_set("big", big, to_bytes("small")), to_bytes("small"));
}

// ---- multi-tenancy and adopted sockets ------------------------------------------------------------

TEST(TCPStore, MultiTenantMastersShareOneServer) {
  TCPStoreOptions options = master_options();
  options.multi_tenant = true;
  auto first = std::make_unique<TCPStore>("127.0.0.1", options);
  options.port = first->port();
  TCPStore second("127.0.0.1", options);
  EXPECT_EQ(second.port(), first->port());
  first->set("shared", "yes");
  EXPECT_EQ(to_string(second.get("shared")), "yes");
  // The server lives as long as any tenant does.
  first.reset();
  second.set("after", "first left");
  TCPStore client("127.0.0.1", client_options(second.port()));
  EXPECT_EQ(to_string(client.get("after")), "first left");
}

TEST(TCPStore, MasterListensOnAnAdoptedSocket) {
  uint16_t port = 0;
  Socket bound = bound_not_listening(&port);
  ASSERT_TRUE(bound.valid());
  TCPStore master("127.0.0.1", port, std::nullopt, true, kLong, true, false, bound.release());
  EXPECT_EQ(master.port(), port);
  TCPStore client("127.0.0.1", client_options(port));
  client.set("via", "fd");
  EXPECT_EQ(to_string(master.get("via")), "fd");
}

TEST(TCPStore, AdoptedSocketOnAnotherPortIsRejected) {
  uint16_t port = 0;
  Socket bound = bound_not_listening(&port);
  ASSERT_TRUE(bound.valid());
  uint16_t other = port == 65535 ? 1024 : port + 1;
  std::string what = error_of(
      [&] { TCPStore("127.0.0.1", other, std::nullopt, true, kLong, true, false, bound.release()); });
  EXPECT_TRUE(contains(what, std::to_string(other)));
}

// ---- shutdown and threads --------------------------------------------------------------------------

TEST(TCPStore, ServerShutdownWhileAClientWaitsIsAnErrorNotAHang) {
  auto master = std::make_unique<TCPStore>("127.0.0.1", master_options());
  uint16_t port = master->port();
  TCPStore client("127.0.0.1", client_options(port, std::nullopt, seconds(600)));
  client.set("ready", "1");
  auto waiting = std::async(std::launch::async, [&] { return error_of([&] { client.wait({"never"}); }); });
  master.reset();
  // A hang here would outlive the test's deadline; the wait timeout is 600 s.
  std::string what = waiting.get();
  EXPECT_TRUE(contains(what, "127.0.0.1:" + std::to_string(port)));
  EXPECT_TRUE(contains(what, "connection"));
  EXPECT_THROW(client.set("after", "x"), DistStoreError);
}

TEST(TCPStore, OneStoreUsedFromManyThreads) {
  TCPStore master("127.0.0.1", master_options());
  TCPStore shared("127.0.0.1", client_options(master.port()));
  constexpr int kThreads = 16;
  constexpr int kOps = 100;
  EXPECT_EQ(testing::run_ranks(testing::Mode::kThreads, kThreads,
                               [&](int rank) {
                                 std::string mine = "t/" + std::to_string(rank);
                                 for (int i = 0; i < kOps; ++i) {
                                   shared.add("total", 1);
                                   shared.set(mine, std::to_string(i));
                                   if (to_string(shared.get(mine)) != std::to_string(i)) {
                                     throw std::runtime_error("thread " + std::to_string(rank) +
                                                              " read back the wrong value");
                                   }
                                 }
                                 // Wait on a key another thread sets, through the same connection.
                                 shared.wait({"t/" + std::to_string((rank + 1) % kThreads)});
                               }),
            "");
  EXPECT_EQ(master.add("total", 0), kThreads * kOps);
}

// ---- the socket layer ------------------------------------------------------------------------------

TEST(Socket, ParsesHostPortForms) {
  auto v4 = parse_host_port("10.1.2.3:29500");
  EXPECT_EQ(v4.host, "10.1.2.3");
  EXPECT_EQ(v4.port, 29500);
  auto v6 = parse_host_port("[fe80::1%eth0]:80");
  EXPECT_EQ(v6.host, "fe80::1%eth0");
  EXPECT_EQ(v6.port, 80);
  auto name = parse_host_port("node-7.cluster:0");
  EXPECT_EQ(name.host, "node-7.cluster");
  EXPECT_EQ(name.port, 0);
  EXPECT_THROW(parse_host_port("::1:80"), DistInvalidArgument);
  EXPECT_THROW(parse_host_port("host"), DistInvalidArgument);
  EXPECT_THROW(parse_host_port("host:65536"), DistInvalidArgument);
  EXPECT_THROW(parse_host_port("host:12x"), DistInvalidArgument);
  EXPECT_THROW(parse_host_port(":80"), DistInvalidArgument);
  EXPECT_THROW(parse_host_port("[::1]80"), DistInvalidArgument);
  EXPECT_EQ(format_host_port("::1", 5), "[::1]:5");
  EXPECT_EQ(format_host_port("a.b", 5), "a.b:5");
  EXPECT_TRUE(is_ipv6_literal("::1"));
  EXPECT_FALSE(is_ipv6_literal("127.0.0.1"));
}

TEST(Socket, ResolvesLiteralsAndNames) {
  auto v4 = resolve("127.0.0.1", 7);
  ASSERT_FALSE(v4.empty());
  EXPECT_EQ(v4.front().to_string(), "127.0.0.1:7");
  EXPECT_FALSE(resolve("localhost", 7).empty());
  EXPECT_THROW(resolve("no-such-host.invalid", 7), DistNetworkError);
}

TEST(Socket, ConnectRetriesUntilTheServerListens) {
  uint16_t port = 0;
  Socket reserved = bound_not_listening(&port);
  ASSERT_TRUE(reserved.valid());
  std::promise<void> refused;
  std::atomic<bool> signalled{false};
  ConnectOptions options;
  options.domain = ErrorDomain::kNetwork;
  options.on_retry = [&](int, int error) {
    if (error == ECONNREFUSED && !signalled.exchange(true)) refused.set_value();
  };
  auto client = std::async(std::launch::async, [&] {
    return connect_with_retry("127.0.0.1", port, deadline_after(kLong), options);
  });
  refused.get_future().wait();  // at least one attempt was refused
  ASSERT_EQ(::listen(reserved.fd(), 16), 0);
  Socket sock = client.get();
  EXPECT_TRUE(sock.valid());
  EXPECT_EQ(sock.peer(), "127.0.0.1:" + std::to_string(port));
}

TEST(Socket, ConnectTimeoutUsesTheCallersErrorDomain) {
  uint16_t port = 0;
  Socket reserved = bound_not_listening(&port);
  ConnectOptions options;
  options.domain = ErrorDomain::kNetwork;
  EXPECT_THROW(connect_with_retry("127.0.0.1", port, deadline_after(milliseconds(50)), options),
               DistNetworkTimeoutError);
  options.domain = ErrorDomain::kStore;
  EXPECT_THROW(connect_with_retry("127.0.0.1", port, deadline_after(milliseconds(50)), options),
               DistStoreTimeoutError);
}

TEST(Socket, DualStackListenerAcceptsIPv4AndIPv6) {
  Socket listener = listen_on(0);
  uint16_t port = listener.local_port();
  ASSERT_NE(port, 0);
  Socket v4 = connect_with_retry("127.0.0.1", port, deadline_after(kLong));
  EXPECT_TRUE(v4.valid());
  if (ipv6_loopback_available() && listener.local_address().family() == AF_INET6) {
    Socket v6 = connect_with_retry("::1", port, deadline_after(kLong));
    EXPECT_TRUE(v6.valid());
  }
  ASSERT_TRUE(listener.wait_readable(deadline_after(kLong)));
  int error = 0;
  Socket accepted = accept_connection(listener, &error);
  ASSERT_TRUE(accepted.valid()) << errno_text(error);
  EXPECT_TRUE(contains(accepted.peer(), "127.0.0.1:"));
}

TEST(Socket, SendAndReceiveWithDeadlines) {
  Socket listener = listen_on(0, ListenOptions{"127.0.0.1"});
  Socket a = connect_with_retry("127.0.0.1", listener.local_port(), deadline_after(kLong));
  ASSERT_TRUE(listener.wait_readable(deadline_after(kLong)));
  int error = 0;
  Socket b = accept_connection(listener, &error);
  ASSERT_TRUE(b.valid());
  std::vector<uint8_t> out(3 << 20);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i);
  std::vector<uint8_t> in(out.size());
  auto sender =
      std::async(std::launch::async, [&] { a.send_all(out.data(), out.size(), deadline_after(kLong)); });
  b.recv_all(in.data(), in.size(), deadline_after(kLong));
  sender.get();
  EXPECT_EQ(in, out);
  uint8_t byte = 0;
  EXPECT_THROW(b.recv_all(&byte, 1, deadline_after(milliseconds(20))), DistNetworkTimeoutError);
  a.close();
  try {
    b.recv_all(in.data(), 10, deadline_after(kLong));
    FAIL() << "read from a closed connection";
  } catch (const DistNetworkError& e) {
    EXPECT_TRUE(contains(std::string(e.what()), "0 of 10"));
  }
}

TEST(Socket, LocalAddressTowardLoopbackIsLoopback) {
  EXPECT_EQ(local_address_toward("127.0.0.1"), "127.0.0.1");
  if (ipv6_loopback_available()) {
    EXPECT_EQ(local_address_toward("::1"), "::1");
  }
}

TEST(Socket, AdoptRejectsANonSocket) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[1]);
  EXPECT_THROW(adopt_listening_socket(fds[0], 0), DistNetworkError);  // closes fds[0]
}

}  // namespace
}  // namespace tdist
