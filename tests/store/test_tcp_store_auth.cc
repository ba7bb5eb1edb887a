// TCPStore authentication (docs/security.md): with a token, the server runs
// auth.h's mutual handshake on every connection before any request; clients
// without the token, or with another, are refused and logged with their
// address; a client with a token refuses a server that cannot prove it.

#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/auth.h"
#include "fake_store_server.h"
#include "store/tcp/server.h"
#include "tdist/errors.h"
#include "tdist/tcp_store.h"

namespace tdist {
namespace {

using std::chrono::milliseconds;
using tcpstore::Command;

constexpr milliseconds kLong = store_attack::kLong;

TCPStoreOptions master_with(std::optional<std::string> token) {
  TCPStoreOptions options;
  options.is_master = true;
  options.timeout = kLong;
  options.auth_token = std::move(token);
  return options;
}

TCPStoreOptions client_with(uint16_t port, std::optional<std::string> token) {
  TCPStoreOptions options;
  options.port = port;
  options.timeout = milliseconds(5000);
  options.auth_token = std::move(token);
  return options;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const DistStoreError& e) {
    return e.what();
  }
  return "(no DistStoreError)";
}

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not found in: " << text;
}

TEST(StoreAuth, ClientWithTheTokenIsAccepted) {
  std::string token = auth::generate_token();
  TCPStore master("127.0.0.1", master_with(token));
  TCPStore client("127.0.0.1", client_with(master.port(), token));
  client.set("k", "v");
  EXPECT_EQ(to_string(master.get("k")), "v");
  EXPECT_EQ(to_string(client.get("k")), "v");
}

TEST(StoreAuth, ClientWithAWrongTokenIsRefusedAndLogged) {
  TCPStore master("127.0.0.1", master_with("right token"));
  master.set("secret", "rank 0's address");
  ::testing::internal::CaptureStderr();
  std::string error = error_of([&] { TCPStore("127.0.0.1", client_with(master.port(), "wrong token")); });
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(error, "authentication failed: wrong token"));
  EXPECT_TRUE(contains(error, "127.0.0.1:" + std::to_string(master.port())));
  EXPECT_TRUE(contains(log, "refused client 127.0.0.1:"));
  EXPECT_TRUE(contains(log, "wrong token"));
  EXPECT_EQ(to_string(master.get("secret")), "rank 0's address");
}

TEST(StoreAuth, ClientWithoutATokenIsRefusedAndLogged) {
  TCPStore master("127.0.0.1", master_with("the token"));
  ::testing::internal::CaptureStderr();
  std::string error = error_of([&] { TCPStore("127.0.0.1", client_with(master.port(), "")); });
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(error, "the store at 127.0.0.1:" + std::to_string(master.port()) +
                                  " requires authentication: set TDIST_AUTH_TOKEN"));
  EXPECT_TRUE(contains(log, "refused client 127.0.0.1:"));
  EXPECT_TRUE(contains(log, "without authenticating"));
}

// What the intruder did: read and overwrite a rank's key with raw
// requests. Every request before the handshake is refused and the
// connection closed; the store is untouched.
TEST(StoreAuth, RawRequestsWithoutTheHandshakeGetNothing) {
  TCPStore master("127.0.0.1", master_with("the token"));
  master.set("rank0/address", "10.0.0.1:1234");
  for (Command command : {Command::kGet, Command::kSet, Command::kAuthProof}) {
    Socket sock = store_attack::raw_connect(master.port());
    std::vector<uint8_t> frame = command == Command::kSet
                                     ? store_attack::set_frame(1, "rank0/address", "evil:1")
                                     : store_attack::key_frame(command, 1, "rank0/address");
    store_attack::send_best_effort(sock, frame);
    std::vector<uint8_t> reply = store_attack::read_reply(sock);
    EXPECT_EQ(reply[4], static_cast<uint8_t>(tcpstore::Status::kError));
    std::string text(reply.begin(), reply.end());
    EXPECT_EQ(text.find("10.0.0.1"), std::string::npos);
    EXPECT_TRUE(store_attack::closed_by_server(sock, kLong));
  }
  EXPECT_EQ(to_string(master.get("rank0/address")), "10.0.0.1:1234");
}

TEST(StoreAuth, ClientWithATokenRefusesAServerWithoutAuthentication) {
  TCPStore master("127.0.0.1", master_with(""));
  std::string error = error_of([&] { TCPStore("127.0.0.1", client_with(master.port(), "my token")); });
  EXPECT_TRUE(contains(error, "the store at 127.0.0.1:" + std::to_string(master.port()) +
                                  " does not authenticate but this client has a token"));
}

// An impostor that knows the protocol but not the token: it sends a nonce,
// accepts whatever proof comes and answers with a made-up one. The client
// must refuse it, and nothing of the token may have reached it.
TEST(StoreAuth, ClientRefusesAServerThatCannotProveTheToken) {
  const std::string token = "a token the impostor would like to learn";
  FakeStoreServer fake([](FakeStoreServer& self, Socket& sock) {
    std::vector<uint8_t> begin = self.read_request(sock);
    tcpstore::FrameWriter hello(static_cast<uint8_t>(tcpstore::Status::kOk), store_attack::reply_id(begin));
    hello.u8(1);
    auth::Nonce nonce = auth::make_nonce();
    hello.raw(nonce.data(), nonce.size());
    std::vector<uint8_t> bytes = hello.finish();
    sock.send_all(bytes.data(), bytes.size(), deadline_after(kLong));
    std::vector<uint8_t> proof = self.read_request(sock);
    tcpstore::FrameWriter fake_proof(static_cast<uint8_t>(tcpstore::Status::kOk),
                                     store_attack::reply_id(proof));
    auth::Proof made_up = auth::client_proof("guess", "store", nonce, nonce);
    fake_proof.raw(made_up.data(), made_up.size());
    bytes = fake_proof.finish();
    sock.send_all(bytes.data(), bytes.size(), deadline_after(kLong));
  });
  std::string error = error_of([&] { TCPStoreClient("127.0.0.1", fake.port(), kLong, token); });
  EXPECT_TRUE(contains(error, "could not prove it holds this client's token"));
  std::vector<uint8_t> sent = fake.received();
  EXPECT_EQ(std::string(sent.begin(), sent.end()).find(token), std::string::npos);
  EXPECT_EQ(sent.size(), 2 * tcpstore::kHeaderBytes + tcpstore::kAuthProofPayload)
      << "AUTH_BEGIN and AUTH_PROOF only: no request before the server proved itself";
}

// By default both sides take the token from the environment, as under
// tdistrun.
TEST(StoreAuth, TokenComesFromTheEnvironmentByDefault) {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread reads the environment here
  ::setenv("TDIST_AUTH_TOKEN", "from the environment", 1);
  std::optional<TCPStore> master;
  std::string refused;
  try {
    master.emplace("127.0.0.1", master_with(std::nullopt));
    TCPStore client("127.0.0.1", client_with(master->port(), std::nullopt));
    client.set("k", "v");
    refused = error_of([&] { TCPStore("127.0.0.1", client_with(master->port(), "")); });
  } catch (...) {
    // NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread reads the environment here
    ::unsetenv("TDIST_AUTH_TOKEN");
    throw;
  }
  // NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread reads the environment here
  ::unsetenv("TDIST_AUTH_TOKEN");
  EXPECT_EQ(to_string(master->get("k")), "v");
  EXPECT_TRUE(contains(refused, "requires authentication"));
}

// Every new connection of a client's pool authenticates, not just the first.
TEST(StoreAuth, EveryPooledConnectionAuthenticates) {
  TCPServerOptions options;
  options.auth_token = "pool token";
  auto server = TCPServer::start(options);
  TCPStoreClient client("127.0.0.1", server->port(), kLong, std::string("pool token"));
  // A parked GET holds the first connection; the SET then needs a second.
  std::thread waiter([&] { EXPECT_EQ(to_string(client.get("later", kLong)), "now"); });
  Deadline deadline = deadline_after(kLong);
  while (server->stats().waiters_parked < 1 && SocketClock::now() < deadline) std::this_thread::yield();
  client.set("later", to_bytes("now"), kLong);
  waiter.join();
  EXPECT_EQ(server->stats().connections_accepted, 2u);
  EXPECT_EQ(server->stats().auth_refusals, 0u);
}

}  // namespace
}  // namespace tdist
