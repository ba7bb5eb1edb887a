// Who the TCP transport lets in (tcp_handshake.h): connections that are not
// from a rank of this generation of the group, or cannot prove the job's
// token, are refused with a warning while the real group connects and
// exchanges correct data; a rank refuses a listener that cannot prove the
// token. Each intruder runs as one more rank of the harness (a thread, or a
// forked process) beside the real group, which waits for it where the
// order matters, so every refusal is seen by a rank still accepting.

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <optional>
#include <string>

#include "admission_harness.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;
using namespace admission;  // NOLINT(google-build-using-namespace): the shared harness
namespace tcp = transport::tcp;

class TcpAdmission : public ::testing::TestWithParam<std::tuple<Mode, int>> {
 protected:
  Mode mode() const { return std::get<0>(GetParam()); }
  int n() const { return std::get<1>(GetParam()); }
  // Runs and checks that the group completed and rank 0 warned with `reason`.
  void expect_refused(Scenario s, const std::string& reason) {
    s.n = n();
    std::string log;
    EXPECT_EQ(run(mode(), s, &log), "");
    EXPECT_NE(log.find("tcp transport: rank 0 of " + std::to_string(n()) +
                       ": refused a connection from 127.0.0.1:"),
              std::string::npos)
        << log;
    EXPECT_NE(log.find(reason), std::string::npos) << log;
  }
};

TEST_P(TcpAdmission, AForeignClientSendingGarbageIsRefused) {
  Scenario s;
  s.gate = 1;
  s.intrude = [](Store& store) {
    const char request[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    expect_in(send_raw(store, 0, request, sizeof(request) - 1), "not a tdist greeting", "the refusal");
  };
  expect_refused(s, "not a tdist greeting (it begins with bytes 47455420)");
}

TEST_P(TcpAdmission, APeerOfTheOlderWireVersionIsRefusedByName) {
  Scenario s;
  s.gate = 1;
  s.intrude = [&](Store& store) {
    // What a build before identities sent: magic "tdst", rank, size, connection, connections.
    const uint32_t v1[5] = {tcp::kHelloMagicV1, 1, static_cast<uint32_t>(n()), 0, 1};
    expect_in(send_raw(store, 0, v1, sizeof(v1)), "older build", "the refusal");
  };
  expect_refused(s, "a tdist peer of an older build (wire version 1");
}

TEST_P(TcpAdmission, AGreetingForAnotherGenerationOrJobIsRefused) {
  Scenario s;
  s.intrude = [&](Store& store) {
    // Rank 1's real identity, but a listener identity that is not rank 0's
    // of this connect (what a rank of an earlier generation would send).
    const std::string error =
        pose(store, 0, 1, n(), std::nullopt, [](tcp::Hello& h) { h.to = tdist::auth::make_nonce(); });
    expect_in(error, "the connection was refused: it is not of this generation of the group",
              "the intruder's error");
  };
  expect_refused(s, "it is not of this generation of the group: it names listener identity ");
}

TEST_P(TcpAdmission, AGreetingWithAnotherRanksIdentityIsRefused) {
  Scenario s;
  s.intrude = [&](Store& store) {
    const std::string error =
        pose(store, 0, 1, n(), std::nullopt, [](tcp::Hello& h) { h.from = tdist::auth::make_nonce(); });
    expect_in(error, "is not the one rank 1 published", "the intruder's error");
  };
  expect_refused(s, "it says it is rank 1 but its identity ");
}

TEST_P(TcpAdmission, ARankThatHasNotPublishedCannotBeClaimed) {
  Scenario s;
  s.gate = 1;
  s.intrude = [&](Store& store) {
    // Rank n-1 is held back: it has published nothing yet.
    tcp::Identity rank0 = advertised(store, 0).id;
    Socket socket = dial(store, 0);
    tcp::Hello hello{tcp::kHelloMagic,
                     tcp::kWireVersion,
                     static_cast<uint32_t>(n() - 1),
                     static_cast<uint32_t>(n()),
                     0,
                     0,
                     1,
                     0,
                     tdist::auth::make_nonce(),
                     rank0};
    try {
      tcp::greet_acceptor(socket, hello, std::nullopt, deadline_after(20s), "intruder");
      throw std::runtime_error("a rank that has not published was admitted");
    } catch (const DistNetworkError& e) {
      expect_in(e.what(), "has not published an address", "the intruder's error");
    }
  };
  expect_refused(s, "which has not published an address in this group's store");
}

TEST_P(TcpAdmission, ADuplicateOfAnAdmittedRankIsRefused) {
  Scenario s;
  s.intrude = [&](Store& store) {
    // Rank 1 accepts only once rank 0 has admitted it: its refusal of this
    // garbage says that rank 1's connections to rank 0 are all in.
    expect_in(send_raw(store, 1, "xxxx", 4), "not a tdist greeting", "rank 1's refusal");
    const std::string error = pose(store, 0, 1, n(), std::nullopt, [](tcp::Hello& h) { h.connections = 2; });
    expect_in(error, "is already established (a duplicate of that rank)", "the intruder's error");
  };
  expect_refused(s, "rank 1's connection 0 is already established (a duplicate of that rank)");
}

TEST_P(TcpAdmission, AClientWithoutTheTokenIsRefusedWhenOneIsRequired) {
  Scenario s;
  s.token = kToken;
  s.intrude = [&](Store& store) {
    const std::string error = pose(store, 0, 1, n(), std::nullopt);
    expect_in(error,
              "this rank requires the job's token (TDIST_AUTH_TOKEN is set here) and rank 1 offers none",
              "the intruder's error");
  };
  expect_refused(s, "requires the job's token (TDIST_AUTH_TOKEN is set here) and rank 1 offers none");
}

TEST_P(TcpAdmission, AClientWithAWrongTokenIsRefused) {
  Scenario s;
  s.token = kToken;
  s.intrude = [&](Store& store) {
    const std::string error = pose(store, 0, 1, n(), std::string("not-the-token"));
    expect_in(error, "rank 1's proof of the job's token is wrong", "the intruder's error");
  };
  expect_refused(s, "rank 1's proof of the job's token is wrong (does it have another TDIST_AUTH_TOKEN?)");
}

TEST_P(TcpAdmission, AGroupWithTheTokenConnectsAndExchanges) {
  Scenario s;
  s.n = n();
  s.token = kToken;
  s.gate = n();
  s.intrude = [](Store&) {};
  std::string log;
  EXPECT_EQ(run(mode(), s, &log), "");
  EXPECT_EQ(log.find("refused"), std::string::npos) << log;
}

INSTANTIATE_TEST_SUITE_P(Ranks, TcpAdmission,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(3, 5)),
                         [](const auto& p) {
                           return std::string(mode_name(std::get<0>(p.param))) + "_" +
                                  std::to_string(std::get<1>(p.param));
                         });

TEST(TcpAdmissionSizes, AGroupOfOneOrTwoOrEightWithTheTokenConnects) {
  for (int n : {1, 2, 8}) {
    Scenario s;
    s.n = n;
    s.token = kToken;
    s.gate = n;
    s.intrude = [](Store&) {};
    std::string log;
    EXPECT_EQ(run(Mode::kThreads, s, &log), "") << n << " ranks";
  }
}

// A listener posing as rank 0 (its address written over rank 0's in the
// store): rank 1, which has the token, refuses it before sending anything
// but the greeting and its own proof, and says why. `fake` plays rank 0 on
// an accepted connection and returns what it received.
void expect_fake_refused(Mode mode, const std::function<std::string(const Socket&)>& fake,
                         const std::string& reason) {
  std::string failures = run_with_store(mode, 2, [&](Store& store, int rank) -> KeepAlive {
    if (rank == 0) {
      Socket listener = listen_on(0, ListenOptions{"127.0.0.1"});
      store.set("tcp/addr/0",
                tcp::encode_advertisement(tdist::auth::make_nonce(),
                                          format_host_port("127.0.0.1", listener.local_port())));
      Socket socket;
      while (!socket) {
        int error = 0;
        if (!listener.wait_readable(deadline_after(20s))) throw std::runtime_error("rank 1 never connected");
        socket = accept_connection(listener, &error);
      }
      socket.set_nonblocking(false);
      const std::string got = fake(socket);
      // Then only the end of the stream: rank 1 sent no data.
      char extra = 0;
      try {
        socket.recv_all(&extra, 1, deadline_after(20s));
        throw std::runtime_error("rank 1 sent more after refusing the listener");
      } catch (const DistTimeoutError&) {
        throw;
      } catch (const DistNetworkError&) {
      }
      if (got.find(kToken) != std::string::npos) throw std::runtime_error("the token travelled in the clear");
      return nullptr;
    }
    transport::TcpOptions options;
    options.timeout = 20s;
    options.token = kToken;
    try {
      transport::connect_tcp(store, 1, 2, options);
    } catch (const DistNetworkError& e) {
      expect_in(e.what(), "tcp transport: rank 1 of 2 connecting to rank 0 at 127.0.0.1:", "rank 1's error");
      expect_in(e.what(), reason, "rank 1's error");
      return nullptr;
    }
    throw std::runtime_error("rank 1 connected to a listener that does not hold the token");
  });
  EXPECT_EQ(failures, "") << mode_name(mode);
}

std::string read_hello(const Socket& socket) {
  std::string got(sizeof(tcp::Hello), '\0');
  socket.recv_all(got.data(), got.size(), deadline_after(20s));
  return got;
}

TEST(TcpAdmissionFakeListener, OneThatAcceptsWithoutAProofIsRefused) {
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    expect_fake_refused(
        mode,
        [](const Socket& socket) {
          std::string got = read_hello(socket);
          const std::string accept = tcp::encode_reply(tcp::ReplyKind::kAccept, "");
          socket.send_all(accept.data(), accept.size(), deadline_after(20s));
          return got;
        },
        "accepted the connection without proving the job's token");
  }
}

TEST(TcpAdmissionFakeListener, OneThatChallengesButCannotProveTheTokenIsRefused) {
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    expect_fake_refused(
        mode,
        [](const Socket& socket) {
          std::string got = read_hello(socket);
          const tdist::auth::Nonce nonce = tdist::auth::make_nonce();
          const std::string challenge =
              tcp::encode_reply(tcp::ReplyKind::kChallenge,
                                std::string_view(reinterpret_cast<const char*>(nonce.data()), nonce.size()));
          socket.send_all(challenge.data(), challenge.size(), deadline_after(20s));
          std::string answer(tdist::auth::kNonceBytes + tdist::auth::kProofBytes, '\0');
          socket.recv_all(answer.data(), answer.size(), deadline_after(20s));
          got += answer;
          const std::string accept =
              tcp::encode_reply(tcp::ReplyKind::kAccept, std::string(tdist::auth::kProofBytes, 'p'));
          socket.send_all(accept.data(), accept.size(), deadline_after(20s));
          return got;
        },
        "the listener's proof of the job's token is wrong");
  }
}

// A real rank 0 without the token: it refuses rank 1's demand, rank 1 says
// why, and rank 0 times out naming rank 1.
TEST(TcpAdmissionFakeListener, ARankWithoutTheTokenAndOneWithItRefuseEachOther) {
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    std::string failures = run_with_store(mode, 2, [&](Store& store, int rank) -> KeepAlive {
      transport::TcpOptions options;
      options.timeout = rank == 0 ? 3s : 20s;
      options.token = rank == 0 ? "" : kToken;
      try {
        transport::connect_tcp(store, rank, 2, options);
      } catch (const DistNetworkTimeoutError& e) {
        if (rank != 0) throw;
        expect_in(e.what(), "waiting for ranks 1 to connect", "rank 0's error");
        return nullptr;
      } catch (const DistNetworkError& e) {
        if (rank != 1) throw;
        expect_in(e.what(),
                  "the connection was refused: rank 1 requires authentication, and this rank has no token",
                  "rank 1's error");
        return nullptr;
      }
      throw std::runtime_error("rank " + std::to_string(rank) + " connected");
    });
    EXPECT_EQ(failures, "") << mode_name(mode);
  }
}

// A client that connects and says nothing holds no slot past the greeting's
// time, and the group connects meanwhile.
TEST(TcpAdmissionSilent, ASilentClientDoesNotHoldUpTheGroup) {
  Scenario s;
  s.n = 3;
  s.gate = 1;
  std::optional<Socket> silent;
  s.intrude = [&](Store& store) { silent = dial(store, 0); };
  std::string log;
  const auto start = SocketClock::now();
  EXPECT_EQ(run(Mode::kThreads, s, &log), "");
  // The group did not wait for the silent client's greeting time to end.
  EXPECT_LT(SocketClock::now() - start, tcp::kGreetingTimeout);
  EXPECT_NE(log.find("refused a connection from 127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find("every rank of the group is already connected"), std::string::npos) << log;
}

// A lower rank that never publishes its address (it is at another
// generation of the group, or never started) fails the connect at the
// transport's timeout, not the store's, naming that rank.
TEST(TcpAdmissionSetup, ALowerRankThatNeverPublishesFailsTheConnectAtTheTransportsTimeout) {
  HashStore store;
  store.set_timeout(60s);
  transport::TcpOptions options;
  options.timeout = 1s;
  options.token = "";
  const auto start = SocketClock::now();
  std::string error;
  try {
    transport::connect_tcp(store, 1, 2, options);
  } catch (const DistNetworkTimeoutError& e) {
    error = e.what();
  }
  // The error came at the transport's timeout, long before the store's.
  EXPECT_LT(SocketClock::now() - start, 30s);
  EXPECT_NE(
      error.find("tcp transport: rank 1 of 2: timed out after 1000 ms waiting for rank 0 to publish its "
                 "address"),
      std::string::npos)
      << error;
}

}  // namespace
}  // namespace tdist::testing
