// tdistrun --restart-policy=failed and --agent-store end to end: the
// launcher hosts the ranks' store, a rank that fails is restarted alone
// with the same rank, and the others keep running (same pids) through it.
// Every wait has a deadline (ChildProcess kills a hung launcher).

#include <gtest/gtest.h>

#include <string>

#include "launcher_process.h"
#include "multirank.h"
#include "tdistrun_helpers.h"

namespace tdist::testing {
namespace {

// The value of "key=" in the one "done rank=R" line of rank R; -1 if there
// is not exactly one.
long done_value(const ChildProcess& p, int rank, const std::string& key) {
  const auto lines =
      lines_with(p.out(), "[rank " + std::to_string(rank) + "]: done rank=" + std::to_string(rank));
  return lines.size() == 1 ? value(lines[0], key) : -1;
}

// The pids rank R printed with "ready pid=P", in order (one per incarnation).
std::vector<long> ready_pids(const ChildProcess& p, int rank) {
  std::string text;
  for (const auto& line : lines_with(p.out(), "[rank " + std::to_string(rank) + "]: ready pid="))
    text += line + "\n";
  return values_after(text, "pid");
}

// Rank 0 (the rank that hosts the store without --agent-store) is killed:
// the store lives on in tdistrun, rank 0 comes back alone with restart
// count 1, and ranks 1 and 2 go on in the same processes and meet it there.
TEST(TdistrunRestartPolicy, AKilledRankIsRestartedAloneAndTheOthersKeepRunning) {
  ChildProcess p(
      launch({"--standalone", "--nproc-per-node", "3", "--restart-policy=failed", "--max-restarts", "1"},
             {"lone-restart", "0", "0"}));
  run_to_end(p);
  EXPECT_EQ(p.exit_code(), 0) << both(p);
  EXPECT_TRUE(contains(p.err(), "was killed by signal SIGKILL (9); restarting rank 0 alone (restart 1 of 1)"))
      << p.err();
  EXPECT_FALSE(contains(p.err(), "stopping")) << p.err();
  EXPECT_EQ(done_value(p, 0, "restart"), 1) << p.out();
  EXPECT_EQ(done_value(p, 0, "torchelastic_restart"), 1) << p.out();
  const auto pids0 = ready_pids(p, 0);
  ASSERT_EQ(pids0.size(), 2U) << p.out();  // two incarnations
  EXPECT_NE(pids0[0], pids0[1]);
  EXPECT_EQ(done_value(p, 0, "pid"), pids0[1]) << p.out();
  for (int r : {1, 2}) {
    EXPECT_EQ(done_value(p, r, "restart"), 0) << p.out();
    const auto pids = ready_pids(p, r);
    ASSERT_EQ(pids.size(), 1U) << p.out();  // never restarted
    EXPECT_EQ(done_value(p, r, "pid"), pids[0]) << p.out();
  }
  EXPECT_EQ(lines_with(p.out(), "agent_store=True").size(), 3U) << p.out();
}

// A rank that keeps failing uses up --max-restarts (counted over the job),
// then the launcher stops the others and exits 1 with the usual report.
TEST(TdistrunRestartPolicy, GivesUpAfterMaxRestartsAndStopsTheOthers) {
  ChildProcess p(
      launch({"--standalone", "--nproc-per-node", "3", "--restart-policy=failed", "--max-restarts", "2"},
             {"lone-restart", "2", "5", "99"}));
  run_to_end(p);
  EXPECT_EQ(p.exit_code(), 1) << both(p);
  EXPECT_TRUE(contains(p.err(), "exited with code 5; restarting rank 2 alone (restart 1 of 2)")) << p.err();
  EXPECT_TRUE(contains(p.err(), "exited with code 5; restarting rank 2 alone (restart 2 of 2)")) << p.err();
  EXPECT_FALSE(contains(p.err(), "restart 3 of")) << p.err();
  EXPECT_TRUE(contains(p.err(), "stopping 2 ranks")) << p.err();
  EXPECT_TRUE(contains(p.err(), "rank 2 fails on incarnation 2")) << p.err();
  EXPECT_TRUE(contains(p.err(), "giving up after 2 restarts")) << p.err();
  EXPECT_TRUE(contains(p.err(), "tdistrun: ---- failure ----")) << p.err();
  EXPECT_EQ(ready_pids(p, 2).size(), 3U) << p.out();
  for (int r : {0, 1}) {
    const auto pids = ready_pids(p, r);
    ASSERT_EQ(pids.size(), 1U) << p.out();
    EXPECT_FALSE(process_alive(static_cast<pid_t>(pids[0])));
  }
}

// Under the default policy the same failure restarts every rank, and the
// agent store (asked for alone) is still the launcher's.
TEST(TdistrunRestartPolicy, AgentStoreAloneKeepsRestartingEveryRank) {
  ChildProcess p(launch({"--standalone", "--nproc-per-node", "2", "--agent-store", "--max-restarts", "1"},
                        {"per-attempt", "3", "0"}));
  run_to_end(p);
  EXPECT_EQ(p.exit_code(), 0) << both(p);
  EXPECT_TRUE(contains(p.err(), "restarting all ranks (restart 1 of 1)")) << p.err();
  EXPECT_EQ(lines_with(p.out(), "attempt=1 rank=").size(), 2U) << p.out();
}

TEST(TdistrunRestartPolicy, ARankOfAnAgentStoreJobMeetsTheOthersThroughIt) {
  ChildProcess p(launch({"--standalone", "--nproc-per-node", "3", "--agent-store"}, {"rendezvous"}));
  run_to_end(p);
  EXPECT_EQ(p.exit_code(), 0) << both(p);
  EXPECT_EQ(lines_with(p.out(), "rdzv rank=").size(), 3U) << p.out();
}

// With several nodes node 0's agent hosts the ranks' store at the port it
// publishes for the attempt; ranks of both nodes meet there as clients.
TEST(TdistrunRestartPolicy, AgentStoreOfTwoNodesIsNode0s) {
  const int port = pick_free_port();
  auto options = [&](int node_rank) {
    return std::vector<std::string>{"--nnodes",
                                    "2",
                                    "--node-rank",
                                    std::to_string(node_rank),
                                    "--master-addr",
                                    "127.0.0.1",
                                    "--master-port",
                                    std::to_string(port),
                                    "--agent-store",
                                    "--nproc-per-node",
                                    "2",
                                    "--join-timeout",
                                    "60"};
  };
  ChildProcess node0(launch(options(0), {"rendezvous"}));
  ChildProcess node1(launch(options(1), {"rendezvous"}));
  ChildProcess::wait_all({&node0, &node1}, deadline());
  ASSERT_FALSE(node0.timed_out() || node1.timed_out()) << both(node0) << both(node1);
  EXPECT_EQ(node0.exit_code(), 0) << both(node0);
  EXPECT_EQ(node1.exit_code(), 0) << both(node1);
  EXPECT_EQ(lines_with(node0.out() + node1.out(), "rdzv rank=").size(), 4U) << both(node0) << both(node1);
}

TEST(TdistrunRestartPolicy, SeveralNodesOrAnUnknownPolicyAreUsageErrors) {
  ChildProcess multi(launch({"--nnodes", "2", "--restart-policy=failed", "--nproc-per-node", "1"}, {"env"}));
  run_to_end(multi);
  EXPECT_EQ(multi.exit_code(), 2) << both(multi);
  EXPECT_TRUE(contains(multi.err(), "--restart-policy=failed needs one node")) << multi.err();
  ChildProcess unknown(launch({"--restart-policy=some", "--nproc-per-node", "1"}, {"env"}));
  run_to_end(unknown);
  EXPECT_EQ(unknown.exit_code(), 2) << both(unknown);
  EXPECT_TRUE(contains(unknown.err(), "--restart-policy")) << unknown.err();
}

}  // namespace
}  // namespace tdist::testing
