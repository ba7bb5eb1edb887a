// The TCP transport's accept loop (tcp_connect.cc) under two attacks by a
// client that can read the store and has no token: greetings for one slot
// that arrive in the same poll (the loop admitted both, then wrote outside
// a rank's table or counted the rank twice and stopped waiting for a rank
// that never came), and a desk full of silent clients (the real ranks
// waited in the listen backlog until the silent ones timed out).

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "admission_harness.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;
using namespace admission;  // NOLINT(google-build-using-namespace): the shared harness
namespace tcp = transport::tcp;

// Whether every thread of process `pid` is stopped (by SIGSTOP).
bool all_stopped(pid_t pid) {
  const std::filesystem::path dir = "/proc/" + std::to_string(pid) + "/task";
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator(dir, error)) {
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    // "tid (comm) S ...": the state follows the last ')'.
    const size_t paren = line.rfind(')');
    if (paren == std::string::npos || paren + 2 >= line.size()) continue;  // the thread just ended
    const char state = line[paren + 2];
    if (state != 'T' && state != 't') return false;
  }
  if (error) throw std::runtime_error("cannot read " + dir.string() + ": " + error.message());
  return true;
}

// Stops process `pid` for as long as it lives: what is sent to it meanwhile
// is all readable at its next poll.
class Stopped {
 public:
  explicit Stopped(pid_t pid) : pid_(pid) {
    if (kill(pid_, SIGSTOP) != 0) throw std::runtime_error("SIGSTOP failed");
    const auto deadline = SocketClock::now() + 20s;
    while (!all_stopped(pid_)) {
      if (SocketClock::now() > deadline) throw std::runtime_error("rank 0 did not stop");
      poll(nullptr, 0, 1);
    }
  }
  ~Stopped() { kill(pid_, SIGCONT); }
  Stopped(const Stopped&) = delete;
  Stopped& operator=(const Stopped&) = delete;

 private:
  pid_t pid_;
};

// A real rank 0 of a group of `n` (a forked process) and a fake rank 1
// (another one) that publishes an identity and sends two greetings, `first`
// and `second`, so that rank 0 reads both in one poll: their beginnings go
// first, a refused probe then shows that rank 0 has both connections in its
// desk, and the rest is sent while rank 0 is stopped. `check_rank0` judges
// rank 0's connect (it gets the transport, or the error it raised) and
// `check_replies` the replies to the two greetings.
void race(int n, uint32_t first_connection, uint32_t first_count, uint32_t second_connection,
          uint32_t second_count, const std::function<void(const std::string& rank0_error)>& check_rank0,
          const std::function<void(const std::string&, const std::string&)>& check_replies) {
  const LogLevel level = log_level();
  set_log_level(LogLevel::kWarning);
  const std::string failures = run_with_store(Mode::kProcesses, 2, [&](Store& store, int rank) -> KeepAlive {
    if (rank == 0) {
      store.set("pid0", std::to_string(getpid()));
      transport::TcpOptions options;
      options.timeout = 3s;
      options.token = "";
      std::string error;
      std::shared_ptr<transport::Transport> t;
      try {
        t = transport::connect_tcp(store, 0, n, options);
      } catch (const DistError& e) {
        error = e.what();
      }
      check_rank0(error);
      return t;
    }
    store.wait({"pid0", "tcp/addr/0"}, 20s);
    const pid_t pid0 = std::stoi(to_string(store.get("pid0")));
    const tcp::Identity mine = auth::make_nonce();
    store.set("tcp/addr/1", tcp::encode_advertisement(mine, "127.0.0.1:1"));
    auto greeting = [&](uint32_t connection, uint32_t count) {
      return tcp::Hello{tcp::kHelloMagic,
                        tcp::kWireVersion,
                        1,
                        static_cast<uint32_t>(n),
                        0,
                        connection,
                        count,
                        0,
                        mine,
                        advertised(store, 0).id};
    };
    const tcp::Hello hellos[2] = {greeting(first_connection, first_count),
                                  greeting(second_connection, second_count)};
    constexpr size_t kHead = 8;  // magic and version: not yet a whole greeting
    Socket sockets[2] = {dial(store, 0), dial(store, 0)};
    for (int i = 0; i < 2; ++i) sockets[i].send_all(&hellos[i], kHead, deadline_after(20s));
    // Rank 0 accepts in order; its refusal of this probe says both
    // connections above are in its desk, their beginnings read.
    expect_in(send_raw(store, 0, "xxxx", 4), "not a tdist greeting", "the probe's refusal");
    {
      Stopped stopped(pid0);
      for (int i = 0; i < 2; ++i) {
        sockets[i].send_all(reinterpret_cast<const uint8_t*>(&hellos[i]) + kHead, sizeof(tcp::Hello) - kHead,
                            deadline_after(20s));
      }
    }
    check_replies(reply(sockets[0]), reply(sockets[1]));
    auto kept = std::make_shared<std::vector<Socket>>();
    for (Socket& socket : sockets) kept->push_back(std::move(socket));
    return kept;
  });
  set_log_level(level);
  EXPECT_EQ(failures, "");
}

TEST(TcpAdmissionRace, TwoGreetingsOfOneRankWithOtherCountsInOnePollAdmitOne) {
  // Connection 0 of 1, then 3 of 4: rank 0 stored the second at index 3 of
  // a table of 1 (out of bounds; rank 0 crashed or corrupted its heap).
  race(
      2, 0, 1, 3, 4,
      [](const std::string& error) {
        if (!error.empty()) throw std::runtime_error("rank 0 failed: " + error);
      },
      [](const std::string& first, const std::string& second) {
        if (!first.empty()) throw std::runtime_error("the first greeting was refused: " + first);
        expect_in(second, "rank 1 announced 1 connections before and 4 now", "the second greeting's refusal");
      });
}

TEST(TcpAdmissionRace, TwoGreetingsForOneSlotInOnePollAdmitOneAndTheRankCountsOnce) {
  // Both connection 0 of 1 in a group of 3: rank 0 counted rank 1 twice and
  // returned without rank 2, which never connected.
  race(
      3, 0, 1, 0, 1,
      [](const std::string& error) {
        expect_in(error, "tcp transport: rank 0 of 3: timed out after 3000 ms waiting for ranks 2 to connect",
                  "rank 0's error (it must still wait for rank 2)");
      },
      [](const std::string& first, const std::string& second) {
        if (!first.empty()) throw std::runtime_error("the first greeting was refused: " + first);
        expect_in(second, "rank 1's connection 0 is already established (a duplicate of that rank)",
                  "the second greeting's refusal");
      });
}

// The real group connects while a desk's worth of silent clients holds
// every greeting slot of rank 0: the real ranks' connections take the
// places of the oldest silent ones instead of waiting for them to time out.
class TcpAdmissionFlood : public ::testing::TestWithParam<Mode> {};

TEST_P(TcpAdmissionFlood, ADeskFullOfSilentClientsDoesNotKeepTheGroupOut) {
  Scenario s;
  s.n = 3;
  s.gate = 1;  // ranks 1 and 2 connect after the silent clients
  std::vector<Socket> silent;
  s.intrude = [&](Store& store) {
    // Connected before the real ranks, so ahead of them in rank 0's backlog.
    for (size_t i = 0; i < tcp::kMaxGreetings; ++i) silent.push_back(dial(store, 0));
  };
  std::string log;
  const auto start = SocketClock::now();
  EXPECT_EQ(run(GetParam(), s, &log), "");
  // Before, the group connected only once the silent clients' greeting time
  // had run out.
  EXPECT_LT(SocketClock::now() - start, tcp::kGreetingTimeout);
  EXPECT_EQ(log.find("did not complete its greeting in time"), std::string::npos) << log.substr(0, 4000);
  EXPECT_NE(log.find("connections were in their greeting, and it was the oldest of them (0 bytes of a "
                     "greeting came); it made room for a new connection"),
            std::string::npos)
      << log.substr(0, 4000);
}

INSTANTIATE_TEST_SUITE_P(Modes, TcpAdmissionFlood, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& p) { return std::string(mode_name(p.param)); });

}  // namespace
}  // namespace tdist::testing
