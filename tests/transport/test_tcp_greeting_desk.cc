// The acceptor's greeting desk (tcp_handshake.h) driven directly, one poll
// at a time, so that what arrives in one poll is exact rather than a race:
// two greetings for one slot handled in the same poll admit one connection
// (the accept loop stores each admitted socket at its slot, and a second
// one for the slot overwrote the first, or with another count was written
// outside the rank's table); a full desk makes room for a new connection
// by refusing its oldest silent one.

#include <gtest/gtest.h>
#include <poll.h>

#include <optional>
#include <string>
#include <vector>

#include "admission_harness.h"
#include "common/socket.h"
#include "tdist/errors.h"
#include "tdist/logging.h"
#include "transport/tcp/tcp_handshake.h"
#include "transport/tcp/tcp_wire.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;
using admission::reply;
namespace tcp = transport::tcp;

// Rank 0 of a group of 3 accepting on a loopback listener; every rank has
// published an identity.
class GreetingDeskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto& id : ids_) id = auth::make_nonce();
    level_ = log_level();
    set_log_level(LogLevel::kError);  // every refusal warns; the tests read the replies
    tcp::GreetingDesk::Config config;
    config.rank = 0;
    config.size = 3;
    config.me = ids_[0];
    config.where = "desk test";
    config.published = [this](int rank) -> std::optional<tcp::Identity> {
      return ids_[static_cast<size_t>(rank)];
    };
    desk_.emplace(std::move(config));
  }
  void TearDown() override { set_log_level(level_); }

  // A connection to the listener, added to the desk; returns the client's end.
  Socket connect_one() {
    ConnectOptions options;
    options.domain = ErrorDomain::kNetwork;
    Socket client = connect_with_retry("127.0.0.1", listener_.local_port(), deadline_after(20s), options);
    Socket server;
    while (!server) {
      if (!listener_.wait_readable(deadline_after(20s))) throw std::runtime_error("no connection came");
      int error = 0;
      server = accept_connection(listener_, &error);
    }
    desk_->add(std::move(server), deadline_after(60s));
    return client;
  }

  tcp::Hello hello(uint32_t rank, uint32_t connection, uint32_t connections) const {
    return tcp::Hello{tcp::kHelloMagic, tcp::kWireVersion, rank, 3,          0,
                      connection,       connections,       0,    ids_[rank], ids_[0]};
  }

  // Polls the desk until every connection in it has something to read, then
  // hands that one poll's results to progress().
  std::vector<tcp::Admitted> progress_all_at_once() {
    std::vector<pollfd> fds;
    desk_->poll_set(fds);
    const auto deadline = SocketClock::now() + 20s;
    for (;;) {
      for (pollfd& p : fds) p.revents = 0;
      if (poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) throw std::runtime_error("poll failed");
      bool all = true;
      for (const pollfd& p : fds) all = all && (p.revents & POLLIN) != 0;
      if (all) return desk_->progress(fds.data());
      if (SocketClock::now() > deadline) throw std::runtime_error("the greetings never arrived");
    }
  }

  std::array<tcp::Identity, 3> ids_{};
  Socket listener_ = listen_on(0, ListenOptions{"127.0.0.1"});
  std::optional<tcp::GreetingDesk> desk_;
  LogLevel level_ = LogLevel::kInfo;
};

void send_hello(const Socket& client, const tcp::Hello& h) {
  client.send_all(&h, sizeof(h), deadline_after(20s));
}

TEST_F(GreetingDeskTest, TwoGreetingsForOneSlotInOnePollAdmitOnlyTheFirst) {
  Socket a = connect_one();
  Socket b = connect_one();
  send_hello(a, hello(1, 0, 2));
  send_hello(b, hello(1, 0, 2));
  const std::vector<tcp::Admitted> admitted = progress_all_at_once();
  ASSERT_EQ(admitted.size(), 1u);
  EXPECT_EQ(admitted[0].hello.rank, 1u);
  EXPECT_EQ(admitted[0].hello.connection, 0u);
  EXPECT_EQ(reply(a), "");
  EXPECT_EQ(reply(b), "rank 1's connection 0 is already established (a duplicate of that rank)");
  EXPECT_EQ(desk_->pending(), 0u);

  // The rank's other slot is still free, and then taken too.
  Socket c = connect_one();
  Socket d = connect_one();
  send_hello(c, hello(1, 1, 2));
  send_hello(d, hello(1, 1, 2));
  EXPECT_EQ(progress_all_at_once().size(), 1u);
  EXPECT_EQ(reply(c), "");
  EXPECT_EQ(reply(d), "rank 1's connection 1 is already established (a duplicate of that rank)");
}

TEST_F(GreetingDeskTest, TwoGreetingsOfOneRankWithOtherCountsInOnePollAdmitOnlyTheFirst) {
  // Connection 3 of 4 after 0 of 1: the accept loop sized rank 1's table
  // for one connection and then stored the second at index 3.
  Socket a = connect_one();
  Socket b = connect_one();
  send_hello(a, hello(1, 0, 1));
  send_hello(b, hello(1, 3, 4));
  const std::vector<tcp::Admitted> admitted = progress_all_at_once();
  ASSERT_EQ(admitted.size(), 1u);
  EXPECT_EQ(admitted[0].hello.connections, 1u);
  EXPECT_EQ(reply(a), "");
  EXPECT_EQ(reply(b), "rank 1 announced 1 connections before and 4 now");
}

TEST_F(GreetingDeskTest, SlotsOfDifferentRanksDoNotCollide) {
  Socket a = connect_one();
  Socket b = connect_one();
  send_hello(a, hello(1, 0, 1));
  send_hello(b, hello(2, 0, 1));
  EXPECT_EQ(progress_all_at_once().size(), 2u);
  EXPECT_EQ(reply(a), "");
  EXPECT_EQ(reply(b), "");
}

TEST_F(GreetingDeskTest, AFullDeskRefusesItsOldestSilentConnectionToLetANewOneIn) {
  std::vector<Socket> silent;
  for (size_t i = 0; i < tcp::kMaxGreetings; ++i) silent.push_back(connect_one());
  ASSERT_EQ(desk_->pending(), tcp::kMaxGreetings);
  Socket real = connect_one();
  EXPECT_EQ(desk_->pending(), tcp::kMaxGreetings);
  // The oldest was refused and told why; the next oldest still waits.
  const std::string why = reply(silent[0]);
  EXPECT_NE(why.find("it had not completed its greeting when 256 connections were in their greeting, and it "
                     "was the oldest of them (0 bytes of a greeting came)"),
            std::string::npos)
      << why;
  EXPECT_FALSE(silent[1].wait_readable(SocketClock::now()));
  // The new connection is served: its greeting is admitted.
  send_hello(real, hello(1, 0, 1));
  std::vector<pollfd> fds;
  desk_->poll_set(fds);
  std::vector<tcp::Admitted> admitted;
  const auto deadline = SocketClock::now() + 20s;
  while (admitted.empty() && SocketClock::now() < deadline) {
    for (pollfd& p : fds) p.revents = 0;
    ASSERT_GE(poll(fds.data(), fds.size(), 100), 0);
    admitted = desk_->progress(fds.data());
    fds.clear();
    desk_->poll_set(fds);
  }
  ASSERT_EQ(admitted.size(), 1u);
  EXPECT_EQ(admitted[0].hello.rank, 1u);
  EXPECT_EQ(reply(real), "");
}

TEST_F(GreetingDeskTest, AFullDeskRefusesASilentConnectionBeforeOneThatIsProvingTheToken) {
  // With a token, a connection whose greeting passed awaits its proof; a
  // newer silent one is refused first.
  tcp::GreetingDesk::Config config;
  config.rank = 0;
  config.size = 3;
  config.me = ids_[0];
  config.token = "desk-token";
  config.where = "desk test";
  config.published = [this](int rank) -> std::optional<tcp::Identity> {
    return ids_[static_cast<size_t>(rank)];
  };
  desk_.emplace(std::move(config));
  Socket proving = connect_one();
  tcp::Hello h = hello(1, 0, 1);
  h.flags = tcp::kHelloAuth;
  send_hello(proving, h);
  progress_all_at_once();  // the greeting passes; a challenge goes out
  std::vector<Socket> silent;
  for (size_t i = 1; i < tcp::kMaxGreetings; ++i) silent.push_back(connect_one());
  Socket newest = connect_one();
  EXPECT_EQ(desk_->pending(), tcp::kMaxGreetings);
  EXPECT_NE(reply(silent[0]).find("it was the oldest of them (0 bytes of a greeting came)"),
            std::string::npos);
  // The connection proving the token still has only its challenge to read.
  tcp::ReplyHeader header{};
  proving.recv_all(&header, sizeof(header), deadline_after(20s));
  EXPECT_EQ(header.kind, static_cast<uint32_t>(tcp::ReplyKind::kChallenge));
  auth::Nonce nonce{};
  proving.recv_all(nonce.data(), nonce.size(), deadline_after(20s));
  EXPECT_FALSE(proving.wait_readable(SocketClock::now()));
}

}  // namespace
}  // namespace tdist::testing
