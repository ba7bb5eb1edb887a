// tdistrun's torchrun rendezvous options end to end: --nnodes MIN:MAX with
// --rdzv-backend c10d (nodes numbered in join order, late joins up to MAX, a
// start after the last call, a node refused once the job runs, restarts that
// rendezvous again), torchrun's variables, and the usage errors. Two
// tdistrun processes on 127.0.0.1 play two nodes.

#include <gtest/gtest.h>

#include <csignal>
#include <set>

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
}

TEST(TdistrunRendezvous, ANodeArrivingAfterTheJobStartedIsRefused) {
  const int port = pick_free_port();
  const std::string conf = "join_timeout=60,last_call_timeout=0";
  ChildProcess a(launch(c10d_options(port, "1:2", conf), {"block"}));
  ASSERT_TRUE(a.wait_until([&] { return lines_with(a.out(), "ready pid=").size() == 2; },
                           deadline(std::chrono::seconds(60))))
      << both(a);
  ChildProcess b(launch(c10d_options(port, "1:2", conf), {"env"}));
  run_to_end(b);
  EXPECT_EQ(b.exit_code(), 1) << both(b);
  EXPECT_TRUE(contains(b.err(),
                       "tdistrun: run 'job42' started with 1 node(s) (--nnodes 1:2) before this node "
                       "joined; a node cannot join a job that has started"))
      << b.err();
  EXPECT_TRUE(lines_with(b.out(), "env RANK=").empty()) << b.out();
  a.send_signal(SIGTERM);
  run_to_end(a);
  EXPECT_EQ(a.exit_code(), 143) << both(a);
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
