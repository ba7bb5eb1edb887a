// tdistrun's torchrun rendezvous options end to end: --nnodes MIN:MAX with
// --rdzv-backend c10d (nodes numbered in join order, late joins up to MAX, a
// start after the last call, a node refused once the job runs that waits for
// the next rendezvous, a refused store host that keeps serving the store,
// restarts that rendezvous again), torchrun's variables, and the usage
// errors. Two tdistrun processes on 127.0.0.1 play two nodes. Tests order
// events through the agents' store, the ranks' output and signals to ranks
// (the per-attempt mode of launcher_worker), never through sleeps.

#include <gtest/gtest.h>

#include <csignal>
#include <set>

#include "common/socket.h"
#include "multirank.h"
#include "tdist/tcp_store.h"
#include "tdistrun_helpers.h"

namespace tdist::testing {
namespace {

std::vector<std::string> c10d_options(int port, const std::string& nnodes, const std::string& conf) {
  return {
      "--nnodes",  nnodes,  "--rdzv-backend", "c10d", "--rdzv-endpoint",  "127.0.0.1:" + std::to_string(port),
      "--rdzv-id", "job42", "--rdzv-conf",    conf,   "--nproc-per-node", "2"};
}

// The pids of the ranks whose output has `needle` on a "ready pid=P" line.
std::vector<pid_t> ready_pids(const ChildProcess& node, const std::string& needle = "ready pid=") {
  std::vector<pid_t> pids;
  for (const std::string& line : lines_with(node.out(), needle)) {
    pids.push_back(static_cast<pid_t>(value(line, "pid")));
  }
  return pids;
}

// A client of the agents' store at 127.0.0.1:port (hosted by a node).
std::unique_ptr<TCPStore> agents_store(int port) {
  TCPStoreOptions options;
  options.port = static_cast<uint16_t>(port);
  options.timeout = std::chrono::seconds(60);
  return std::make_unique<TCPStore>("127.0.0.1", options);
}

// The "rdzv" line of every rank the node printed: {rank: group}.
std::map<long, long> groups_of(const ChildProcess& node) {
  std::map<long, long> groups;
  for (const std::string& line : lines_with(node.out(), "]: rdzv rank=")) {
    EXPECT_EQ(value(line, "world"), 4) << line;
    groups[value(line, "rank")] = value(line, "group");
  }
  return groups;
}

// Two nodes of 2 ranks: each node's ranks are consecutive, and the node
// whose ranks come first is group 0.
void expect_two_nodes(const ChildProcess& a, const ChildProcess& b) {
  std::map<long, long> ga = groups_of(a);
  std::map<long, long> gb = groups_of(b);
  ASSERT_EQ(ga.size(), 2U) << both(a);
  ASSERT_EQ(gb.size(), 2U) << both(b);
  const bool a_first = ga.begin()->first == 0;
  const std::map<long, long>& first = a_first ? ga : gb;
  const std::map<long, long>& second = a_first ? gb : ga;
  EXPECT_EQ(first, (std::map<long, long>{{0, 0}, {1, 0}})) << both(a) << both(b);
  EXPECT_EQ(second, (std::map<long, long>{{2, 1}, {3, 1}})) << both(a) << both(b);
}

TEST(TdistrunRendezvous, C10dNodesNeedNoNodeRankAndTheirFourRanksMeet) {
  const int port = pick_free_port();
  ChildProcess a(launch(c10d_options(port, "2", "join_timeout=60"), {"rendezvous"}));
  ChildProcess b(launch(c10d_options(port, "2:2", "join_timeout=60"), {"rendezvous"}));
  ChildProcess::wait_all({&a, &b}, deadline(std::chrono::seconds(90)));
  ASSERT_FALSE(a.timed_out() || b.timed_out()) << both(a) << both(b);
  ASSERT_EQ(a.exit_code(), 0) << both(a);
  ASSERT_EQ(b.exit_code(), 0) << both(b);
  expect_two_nodes(a, b);
  // A healthy job of a fixed size prints nothing of its own.
  EXPECT_EQ(a.err(), "") << both(a);
  EXPECT_EQ(b.err(), "") << both(b);
}

TEST(TdistrunRendezvous, ALateNodeJoinsUntilMaxAndMaxStartsTheJobAtOnce) {
  const int port = pick_free_port();
  // The last call is longer than the test may take: only reaching MAX can
  // start this job.
  const std::string conf = "join_timeout=60,last_call_timeout=600";
  ChildProcess a(launch(c10d_options(port, "1:2", conf), {"rendezvous"}));
  {
    // B starts once A has joined (its join is in the agents' store).
    TCPStoreOptions options;
    options.port = static_cast<uint16_t>(port);
    options.timeout = std::chrono::seconds(60);
    TCPStore store("127.0.0.1", options);
    store.wait({"tdistrun/job42/rdzv/0/node/0"});
  }
  ChildProcess b(launch(c10d_options(port, "1:2", conf), {"rendezvous"}));
  ChildProcess::wait_all({&a, &b}, deadline(std::chrono::seconds(90)));
  ASSERT_FALSE(a.timed_out() || b.timed_out()) << both(a) << both(b);
  ASSERT_EQ(a.exit_code(), 0) << both(a);
  ASSERT_EQ(b.exit_code(), 0) << both(b);
  expect_two_nodes(a, b);
  EXPECT_EQ(groups_of(a).begin()->first, 0) << "the first node to join is node 0\n" << both(a);
}

TEST(TdistrunRendezvous, MinNodesStartAfterTheLastCall) {
  const int port = pick_free_port();
  const std::string conf = "join_timeout=60,last_call_timeout=0.5";
  ChildProcess a(launch(c10d_options(port, "2:3", conf), {"env"}));
  ChildProcess b(launch(c10d_options(port, "2:3", conf), {"env"}));
  ChildProcess::wait_all({&a, &b}, deadline(std::chrono::seconds(90)));
  ASSERT_FALSE(a.timed_out() || b.timed_out()) << both(a) << both(b);
  ASSERT_EQ(a.exit_code(), 0) << both(a);
  ASSERT_EQ(b.exit_code(), 0) << both(b);
  std::set<long> ranks;
  for (const ChildProcess* node : {&a, &b}) {
    for (const std::string& line : lines_with(node->out(), "]: env RANK=")) {
      EXPECT_EQ(value(line, "WORLD_SIZE"), 4) << line;
      EXPECT_EQ(value(line, "GROUP_WORLD_SIZE"), 2) << line;
      EXPECT_EQ(value(line, "ROLE_WORLD_SIZE"), 4) << line;
      EXPECT_EQ(value(line, "ROLE_RANK"), value(line, "RANK")) << line;
      EXPECT_TRUE(contains(line, "TORCHELASTIC_RUN_ID=job42 ")) << line;
      EXPECT_TRUE(contains(line, "MASTER_ADDR=127.0.0.1 ")) << line;
      ranks.insert(value(line, "RANK"));
    }
  }
  EXPECT_EQ(ranks, (std::set<long>{0, 1, 2, 3})) << both(a) << both(b);
  // The node whose last call ended closed the round: it said so when that
  // wait began (the other may have found the round closed already).
  EXPECT_TRUE(contains(a.err() + b.err(),
                       "tdistrun: 2 node(s) joined run 'job42' (--nnodes 2:3); starting in 0.5 s unless more "
                       "join (last_call_timeout)\n"))
      << both(a) << both(b);
}

TEST(TdistrunRendezvous, TooFewNodesWithinTheJoinTimeoutNameBothSettingsAndNnodesAsTyped) {
  const int port = pick_free_port();
  ChildProcess a(launch(c10d_options(port, "2", "join_timeout=1"), {"env"}));
  run_to_end(a);
  EXPECT_EQ(a.exit_code(), 1) << both(a);
  EXPECT_TRUE(
      contains(a.err(),
               "tdistrun: only 1 node(s) joined run 'job42' within 1 s (--join-timeout, or join_timeout "
               "in --rdzv-conf); --nnodes 2 needs 2\n"))
      << a.err();
}

TEST(TdistrunRendezvous, ANodeArrivingAfterTheJobStartedIsRefused) {
  const int port = pick_free_port();
  const std::string conf = "join_timeout=60,last_call_timeout=0";
  ChildProcess a(launch(c10d_options(port, "1:2", conf), {"block"}));
  ASSERT_TRUE(a.wait_until([&] { return lines_with(a.out(), "ready pid=").size() == 2; },
                           deadline(std::chrono::seconds(60))))
      << both(a);
  ChildProcess b(launch(c10d_options(port, "1:2", conf), {"env"}));
  // Refused, B waits for a next rendezvous; A's run is stopped without one.
  const std::string refused =
      "tdistrun: run 'job42' started with 1 node(s) (--nnodes 1:2) before this node joined; a node cannot "
      "join a job that has started; this node was not admitted and waits for the run's next rendezvous";
  ASSERT_TRUE(b.wait_until([&] { return contains(b.err(), refused); }, deadline(std::chrono::seconds(60))))
      << both(b);
  a.send_signal(SIGTERM);
  ChildProcess::wait_all({&a, &b}, deadline(std::chrono::seconds(60)));
  ASSERT_FALSE(a.timed_out() || b.timed_out()) << both(a) << both(b);
  EXPECT_EQ(b.exit_code(), 1) << both(b);
  EXPECT_TRUE(contains(b.err(), "tdistrun: run 'job42' was stopped without this node (tdistrun on node 0"))
      << b.err();
  EXPECT_FALSE(contains(b.err(), "hosts the node agents' store")) << b.err();
  EXPECT_TRUE(lines_with(b.out(), "env RANK=").empty()) << b.out();
  EXPECT_EQ(a.exit_code(), 143) << both(a);
}

TEST(TdistrunRendezvous, ARefusedNodeJoinsTheNextRendezvousAfterAFailure) {
  const int port = pick_free_port();
  // A starts alone (its last call is 0); its local rank 0 fails when told,
  // and its local rank 1 ignores SIGTERM, so that A stays in attempt 0 until
  // the test kills that rank: B joins attempt 1 first, and A's join then
  // makes MAX.
  auto options = cat({"--max-restarts", "1", "--grace-period", "600"},
                     c10d_options(port, "1:2", "join_timeout=60,last_call_timeout=0"));
  ChildProcess a(launch(options, {"per-attempt", "wait:3/hold", "0"}));
  ASSERT_TRUE(a.wait_until([&] { return ready_pids(a).size() == 2; }, deadline(std::chrono::seconds(60))))
      << both(a);
  ChildProcess b(
      launch(cat({"--max-restarts", "1"}, c10d_options(port, "1:2", "join_timeout=60,last_call_timeout=600")),
             {"per-attempt", "0"}));
  ASSERT_TRUE(b.wait_until([&] { return contains(b.err(), "this node was not admitted and waits"); },
                           deadline(std::chrono::seconds(60))))
      << both(b);
  const std::vector<pid_t> failing = ready_pids(a, "attempt=0");
  ASSERT_EQ(failing.size(), 1U) << both(a);
  kill(failing[0], SIGUSR2);
  {
    auto store = agents_store(port);
    store->wait({"tdistrun/job42/rdzv/1/node/0"});  // B's join of attempt 1
  }
  for (pid_t pid : ready_pids(a)) {
    if (pid != failing[0]) kill(pid, SIGKILL);
  }
  ChildProcess::wait_all({&a, &b}, deadline(std::chrono::seconds(90)));
  ASSERT_FALSE(a.timed_out() || b.timed_out()) << both(a) << both(b);
  EXPECT_EQ(a.exit_code(), 0) << both(a);
  EXPECT_EQ(b.exit_code(), 0) << both(b);
  EXPECT_TRUE(contains(b.err(),
                       "tdistrun: run 'job42' restarts after a failure; this node joins its next rendezvous"))
      << b.err();
  // B joined attempt 1 first: node 0, ranks 0 and 1 of 4.
  EXPECT_EQ(lines_with(b.out(), "attempt=1 rank=0 exit=0").size(), 1U) << both(b);
  EXPECT_EQ(lines_with(b.out(), "attempt=1 rank=1 exit=0").size(), 1U) << both(b);
  EXPECT_EQ(lines_with(a.out(), "attempt=1 rank=2 exit=0").size(), 1U) << both(a);
  EXPECT_EQ(lines_with(a.out(), "attempt=1 rank=3 exit=0").size(), 1U) << both(a);
}

TEST(TdistrunRendezvous, ARefusedStoreHostServesTheStoreUntilTheRunEnds) {
  const int port = pick_free_port();
  // A hosts the store and joins attempt 0 first; its ranks ignore SIGTERM,
  // so after a rank of B fails (told to once A's ranks are ready) A stays in
  // attempt 0 (grace period 600 s) while B alone makes attempt 1 (B's last
  // call is 0). Then the test kills A's ranks: A comes too late for
  // attempt 1, which is running.
  auto a_options = cat({"--max-restarts", "1", "--grace-period", "600"},
                       c10d_options(port, "1:2", "is_host=true,join_timeout=60,last_call_timeout=600"));
  ChildProcess a(launch(a_options, {"per-attempt", "hold"}));
  agents_store(port)->wait({"tdistrun/job42/rdzv/0/node/0"});
  ChildProcess b(
      launch(cat({"--max-restarts", "1"}, c10d_options(port, "1:2", "join_timeout=60,last_call_timeout=0")),
             {"per-attempt", "wait:3", "wait:0"}));
  ASSERT_TRUE(a.wait_until([&] { return ready_pids(a).size() == 2; }, deadline(std::chrono::seconds(60))))
      << both(a);
  ASSERT_TRUE(
      b.wait_until([&] { return !ready_pids(b, "attempt=0").empty(); }, deadline(std::chrono::seconds(60))))
      << both(b);
  kill(ready_pids(b, "attempt=0").front(), SIGUSR2);
  ASSERT_TRUE(b.wait_until([&] { return ready_pids(b, "attempt=1").size() == 2; },
                           deadline(std::chrono::seconds(60))))
      << both(b);
  for (pid_t pid : ready_pids(a)) kill(pid, SIGKILL);
  ASSERT_TRUE(a.wait_until([&] { return contains(a.err(), "and serves it meanwhile"); },
                           deadline(std::chrono::seconds(60))))
      << both(a);
  // B's attempt runs on: A still serves the store. Then it ends well.
  EXPECT_FALSE(b.exited()) << both(b);
  for (pid_t pid : ready_pids(b, "attempt=1")) kill(pid, SIGUSR2);
  ChildProcess::wait_all({&a, &b}, deadline(std::chrono::seconds(60)));
  ASSERT_FALSE(a.timed_out() || b.timed_out()) << both(a) << both(b);
  EXPECT_EQ(b.exit_code(), 0) << both(b);
  EXPECT_FALSE(contains(b.err(), "lost the node agents' store")) << b.err();
  EXPECT_EQ(lines_with(b.out(), "attempt=1 rank=0 exit=0").size(), 1U) << both(b);
  EXPECT_EQ(lines_with(b.out(), "attempt=1 rank=1 exit=0").size(), 1U) << both(b);
  EXPECT_EQ(a.exit_code(), 1) << both(a);
  EXPECT_TRUE(
      contains(a.err(),
               "tdistrun: run 'job42' started with 1 node(s) (--nnodes 1:2) before this node joined; a node "
               "cannot join a job that has started; this node was not admitted and waits for the run's "
               "next rendezvous (after a failure, if restarts are left); it hosts the node agents' store, "
               "which the running nodes need, and serves it meanwhile\n"))
      << a.err();
  EXPECT_TRUE(
      contains(a.err(),
               "tdistrun: run 'job42' ended without this node (every rank exited 0); this node started no "
               "rank\n"))
      << a.err();
  EXPECT_FALSE(contains(a.err(), "start it again")) << a.err();
}

TEST(TdistrunRendezvous, TheLatestRoundNeverGoesBack) {
  // The test hosts the agents' store; both nodes only join it. While their
  // attempt 0 runs, "latest" is raised past the attempt they restart into:
  // their join of attempt 1 must leave it there.
  Socket listener = listen_on(0, ListenOptions{"127.0.0.1"});
  const int port = listener.local_port();
  TCPStoreOptions host;
  host.port = static_cast<uint16_t>(port);
  host.is_master = true;
  host.wait_for_workers = false;
  host.timeout = std::chrono::seconds(60);
  host.master_listen_fd = listener.release();
  TCPStore store("127.0.0.1", host);
  auto options = cat({"--max-restarts", "1"}, c10d_options(port, "2", "is_host=false,join_timeout=60"));
  ChildProcess a(launch(options, {"per-attempt", "wait:3", "0"}));
  ChildProcess b(launch(options, {"per-attempt", "wait:3", "0"}));
  ASSERT_TRUE(a.wait_until([&] { return ready_pids(a).size() == 2; }, deadline(std::chrono::seconds(60))))
      << both(a);
  ASSERT_TRUE(b.wait_until([&] { return ready_pids(b).size() == 2; }, deadline(std::chrono::seconds(60))))
      << both(b);
  EXPECT_EQ(to_string(store.get("tdistrun/job42/latest")), "0");
  store.set("tdistrun/job42/latest", "7");
  kill(ready_pids(a).front(), SIGUSR2);  // exits 3: every node restarts
  ChildProcess::wait_all({&a, &b}, deadline(std::chrono::seconds(90)));
  ASSERT_FALSE(a.timed_out() || b.timed_out()) << both(a) << both(b);
  EXPECT_EQ(a.exit_code(), 0) << both(a);
  EXPECT_EQ(b.exit_code(), 0) << both(b);
  EXPECT_EQ(lines_with(a.out() + b.out(), "attempt=1 rank=").size(), 4U) << both(a) << both(b);
  EXPECT_EQ(to_string(store.get("tdistrun/job42/latest")), "7");
}

TEST(TdistrunRendezvous, ARestartRendezvousesAgain) {
  const int port = pick_free_port();
  const std::string marker = temp_path("marker");
  auto options = cat(c10d_options(port, "2", "join_timeout=60"), {"--max-restarts", "1"});
  ChildProcess a(launch(options, {"fail-once", marker}));
  ChildProcess b(launch(options, {"fail-once", marker}));
  ChildProcess::wait_all({&a, &b}, deadline(std::chrono::seconds(90)));
  unlink(marker.c_str());
  ASSERT_FALSE(a.timed_out() || b.timed_out()) << both(a) << both(b);
  ASSERT_EQ(a.exit_code(), 0) << both(a);
  ASSERT_EQ(b.exit_code(), 0) << both(b);
  std::set<long> ranks;
  for (const ChildProcess* node : {&a, &b}) {
    EXPECT_TRUE(contains(node->err(), "restarting all ranks (restart 1 of 1)")) << node->err();
    for (const std::string& line : lines_with(node->out(), "]: attempt=1 rank=")) {
      EXPECT_TRUE(contains(line, " ok torchelastic_restart=1 ")) << line;
      EXPECT_EQ(value(line, "world"), 4) << line;
      ranks.insert(value(line, "rank"));
    }
  }
  EXPECT_EQ(ranks, (std::set<long>{0, 1, 2, 3})) << both(a) << both(b);
}

TEST(TdistrunRendezvous, EachRankGetsTorchrunsVariables) {
  ChildProcess p(launch({"--nproc-per-node", "2", "--rdzv-id", "myjob", "--role", "trainer", "--max-restarts",
                         "3", "--monitor-interval", "0.1", "--master-port", std::to_string(pick_free_port())},
                        {"env"}));
  run_to_end(p);
  ASSERT_EQ(p.exit_code(), 0) << both(p);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string line = env_line(p, rank);
    ASSERT_FALSE(line.empty()) << both(p);
    EXPECT_EQ(value(line, "ROLE_RANK"), rank) << line;
    EXPECT_EQ(value(line, "ROLE_WORLD_SIZE"), 2) << line;
    EXPECT_EQ(value(line, "TORCHELASTIC_RESTART_COUNT"), 0) << line;
    EXPECT_EQ(value(line, "TORCHELASTIC_MAX_RESTARTS"), 3) << line;
    EXPECT_EQ(value(line, "TDIST_MAX_RESTARTS"), 3) << line;
    EXPECT_TRUE(contains(line, " ROLE_NAME=trainer ")) << line;
    EXPECT_TRUE(contains(line, " TORCHELASTIC_RUN_ID=myjob ")) << line;
    EXPECT_TRUE(contains(line, " TORCHELASTIC_USE_AGENT_STORE=False ")) << line;
  }
}

TEST(TdistrunRendezvous, UsageErrorsSayWhatWasExpected) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nnodes", "3:2"}, "--nnodes 3:2: MIN (3) is larger than MAX (2)"},
      {{"--nnodes", "1:x"}, "--nnodes must be N or MIN:MAX with 1 <= MIN <= MAX, got '1:x'"},
      {{"--nnodes", "1:2:3"}, "got '1:2:3'"},
      {{"--nnodes", "1:2"}, "--nnodes 1:2: a range of nodes needs --rdzv-backend c10d"},
      {{"--rdzv-backend", "etcd"}, "--rdzv-backend must be 'static' or 'c10d', got 'etcd'"},
      {{"--rdzv_endpoint", "127.0.0.1", "--nnodes", "2"},
       "--rdzv-endpoint '127.0.0.1' has no port; the static backend needs HOST:PORT"},
      {{"--rdzv-backend=c10d", "--rdzv-endpoint", "127.0.0.1:"},
       "the port must be a number from 1 to 65535, got ''"},
      {{"--rdzv-backend=c10d", "--rdzv-endpoint", ":29400"},
       "--rdzv-endpoint must be HOST[:PORT], got ':29400'"},
      {{"--rdzv-backend=c10d", "--rdzv-conf", "join_timeout=soon"},
       "--rdzv-conf join_timeout must be a number of seconds, got 'soon'"},
      {{"--rdzv-backend=c10d", "--rdzv-conf", "colour=blue"}, "--rdzv-conf: unknown key 'colour'"},
      {{"--rdzv-backend=c10d", "--rdzv-conf", "is_host"},
       "KEY=VALUE pairs separated by commas, got 'is_host'"},
  };
  std::vector<std::unique_ptr<ChildProcess>> runs;
  std::vector<ChildProcess*> all;
  for (const auto& c : cases) {
    runs.push_back(std::make_unique<ChildProcess>(cat(cat({kTdistrun}, c.first), {kWorker, "env"})));
    all.push_back(runs.back().get());
  }
  ChildProcess::wait_all(all, deadline());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(runs[i]->exit_code(), 2) << cases[i].second << "\n" << both(*runs[i]);
    EXPECT_TRUE(contains(runs[i]->err(), "tdistrun: " + cases[i].second) ||
                contains(runs[i]->err(), cases[i].second))
        << "expected: " << cases[i].second << "\ngot: " << runs[i]->err();
    EXPECT_EQ(runs[i]->err().rfind("tdistrun: ", 0), 0U) << runs[i]->err();
  }
}

}  // namespace
}  // namespace tdist::testing
