// spawn(): ranks as forked processes with the launch environment, failures
// named by rank; and launch_environment() for the launchers it understands.

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

#include "multirank.h"
#include "tdist/errors.h"
#include "tdist/rendezvous.h"
#include "tdist/spawn.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

// spawn() blocks the test; if it ever hangs, SIGALRM ends the test binary
// (its ranks die with it through PR_SET_PDEATHSIG) and ctest reports it.
class Spawn : public ::testing::Test {
 protected:
  void SetUp() override { alarm(60); }
  void TearDown() override { alarm(0); }
};

std::string env(const char* name) {
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
  return value != nullptr ? value : "";
}

void expect_env(const char* name, const std::string& expected) {
  if (env(name) != expected) {
    throw std::runtime_error(std::string(name) + " is '" + env(name) + "', expected '" + expected + "'");
  }
}

TEST_F(Spawn, EveryRankSeesItsEnvironmentAndTheRanksMeet) {
  for (int n : {1, 2, 5}) {
    spawn(
        [n](int rank) {
          expect_env("RANK", std::to_string(rank));
          expect_env("LOCAL_RANK", std::to_string(rank));
          expect_env("WORLD_SIZE", std::to_string(n));
          expect_env("LOCAL_WORLD_SIZE", std::to_string(n));
          expect_env("MASTER_ADDR", "127.0.0.1");
          auto r = rendezvous("env://", -1, -1, 30s);
          if (r.rank != rank || r.world_size != n) throw std::runtime_error("rendezvous gave the wrong rank");
          r.store->add("sum", rank + 1);
          exit_barrier(*r.store, rank, n);
          if (rank == 0 && r.store->add("sum", 0) != n * (n + 1) / 2) throw std::runtime_error("bad sum");
        },
        n);
  }
}

// What spawn() raised for `fn` on `nprocs` ranks, with a short grace period.
std::string spawn_error(const std::function<void(int)>& fn, int nprocs = 3) {
  SpawnOptions options;
  options.grace_period = 200ms;
  try {
    spawn(fn, nprocs, options);
  } catch (const DistError& e) {
    return e.what();
  }
  return "no error";
}

TEST_F(Spawn, AFailingRankIsNamedWithItsMessageAndTheOthersAreStopped) {
  std::string what = spawn_error(
      [](int rank) {
        if (rank == 2) throw DistInvalidArgument("boom from rank two");
        pause();  // until stopped
      },
      4);
  EXPECT_NE(what.find("spawn: rank 2 raised: boom from rank two"), std::string::npos) << what;
  EXPECT_NE(what.find("world size 4; the other ranks were stopped"), std::string::npos) << what;
}

TEST_F(Spawn, ExitCodesAndSignalsAreNamed) {
  std::string exited = spawn_error([](int rank) {
    if (rank == 1) _exit(7);
    pause();
  });
  EXPECT_NE(exited.find("spawn: rank 1 exited with code 7 (world size 3"), std::string::npos) << exited;
  std::string killed = spawn_error([](int rank) {
    if (rank == 0) kill(getpid(), SIGKILL);
    // Rank 2 ignores SIGTERM: SIGKILL after the grace period stops it.
    if (rank == 2) std::signal(SIGTERM, SIG_IGN);
    pause();
  });
  EXPECT_NE(killed.find("spawn: rank 0 was killed by signal SIGKILL (9)"), std::string::npos) << killed;
  EXPECT_EQ(killed.find("rank 2"), std::string::npos) << "rank 2 was stopped, it did not fail: " << killed;
}

TEST_F(Spawn, AHungRankIsKilledAtTheTimeout) {
  SpawnOptions options;
  options.timeout = 300ms;
  try {
    spawn(
        [](int rank) {
          if (rank == 1) pause();
        },
        2, options);
    FAIL() << "spawn returned although rank 1 hung";
  } catch (const DistTimeoutError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("spawn: rank 1 of 2 still running after the timeout of 300 ms"), std::string::npos)
        << what;
  }
}

TEST_F(Spawn, RejectsBadArguments) {
  EXPECT_THROW(spawn([](int) {}, 0), DistInvalidArgument);
  EXPECT_THROW(spawn(std::function<void(int)>(), 2), DistInvalidArgument);
  SpawnOptions options;
  options.master_port = 70000;
  EXPECT_THROW(spawn([](int) {}, 1, options), DistInvalidArgument);
}

// ---- launch_environment() ----

const char* const kLaunchVariables[] = {"RANK",
                                        "WORLD_SIZE",
                                        "LOCAL_RANK",
                                        "LOCAL_WORLD_SIZE",
                                        "OMPI_COMM_WORLD_RANK",
                                        "OMPI_COMM_WORLD_SIZE",
                                        "OMPI_COMM_WORLD_LOCAL_RANK",
                                        "OMPI_COMM_WORLD_LOCAL_SIZE",
                                        "PMI_RANK",
                                        "PMI_SIZE",
                                        "MPI_LOCALRANKID",
                                        "MPI_LOCALNRANKS",
                                        "SLURM_PROCID",
                                        "SLURM_NTASKS",
                                        "SLURM_STEP_NUM_TASKS",
                                        "SLURM_LOCALID",
                                        "SLURM_STEP_TASKS_PER_NODE",
                                        "SLURM_TASKS_PER_NODE",
                                        "SLURM_NODEID"};

// launch_environment() in a child with exactly `vars` set, as
// "rank/world/local/local_world from SOURCE".
std::string launch_environment_with(const std::vector<std::pair<const char*, const char*>>& vars) {
  auto outcomes = run_forked(
      1,
      [&](int) {
        // NOLINTBEGIN(concurrency-mt-unsafe): a forked child with one thread
        for (const char* name : kLaunchVariables) unsetenv(name);
        for (auto [name, value] : vars) setenv(name, value, 1);
        // NOLINTEND(concurrency-mt-unsafe)
        LaunchEnvironment e = launch_environment();
        throw std::runtime_error(std::to_string(e.rank) + "/" + std::to_string(e.world_size) + "/" +
                                 std::to_string(e.local_rank) + "/" + std::to_string(e.local_world_size) +
                                 " from " + e.rank_source);
      },
      30s);
  return outcomes[0].error;
}

TEST(LaunchEnvironment, ReadsTdistrunOpenMpiPmiAndSlurm) {
  EXPECT_EQ(launch_environment_with({}), "-1/-1/-1/-1 from ");
  EXPECT_EQ(launch_environment_with(
                {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}}),
            "3/8/1/2 from RANK");
  EXPECT_EQ(launch_environment_with({{"OMPI_COMM_WORLD_RANK", "5"},
                                     {"OMPI_COMM_WORLD_SIZE", "6"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}}),
            "5/6/2/3 from OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(launch_environment_with(
                {{"PMI_RANK", "1"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "4"}}),
            "1/4/1/4 from PMI_RANK");
  EXPECT_EQ(launch_environment_with({{"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "9"}, {"SLURM_LOCALID", "3"}}),
            "7/9/3/-1 from SLURM_PROCID");
  // srun's per-step count wins over the allocation's.
  EXPECT_EQ(launch_environment_with({{"SLURM_PROCID", "1"},
                                     {"SLURM_NTASKS", "16"},
                                     {"SLURM_STEP_NUM_TASKS", "2"},
                                     {"SLURM_LOCALID", "0"}}),
            "1/2/0/-1 from SLURM_PROCID");
  // srun's local world size: this node's entry of the step's tasks per node.
  EXPECT_EQ(launch_environment_with({{"SLURM_PROCID", "3"},
                                     {"SLURM_STEP_NUM_TASKS", "4"},
                                     {"SLURM_LOCALID", "1"},
                                     {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                                     {"SLURM_NODEID", "1"}}),
            "3/4/1/2 from SLURM_PROCID");
  EXPECT_EQ(launch_environment_with({{"SLURM_PROCID", "7"},
                                     {"SLURM_NTASKS", "8"},
                                     {"SLURM_LOCALID", "0"},
                                     {"SLURM_TASKS_PER_NODE", "3(x2),1,1"},
                                     {"SLURM_NODEID", "2"}}),
            "7/8/0/1 from SLURM_PROCID");
  // Uneven nodes without SLURM_NODEID, and a list not in srun's form: unknown.
  EXPECT_EQ(launch_environment_with({{"SLURM_PROCID", "0"}, {"SLURM_STEP_TASKS_PER_NODE", "3,1"}}),
            "0/-1/-1/-1 from SLURM_PROCID");
  for (const char* malformed : {"2(y2)", "2(x2", "2(x2junk", "2(x2)junk", "(x2)", "2(x)", "-1", "2,,3", "2,",
                                "0", "99999999999", ""}) {
    EXPECT_EQ(launch_environment_with({{"SLURM_PROCID", "0"}, {"SLURM_STEP_TASKS_PER_NODE", malformed}}),
              "0/-1/-1/-1 from SLURM_PROCID")
        << malformed;
  }
  // Many nodes cost nothing: the list is walked, not expanded.
  EXPECT_EQ(launch_environment_with({{"SLURM_PROCID", "0"},
                                     {"SLURM_STEP_TASKS_PER_NODE", "1(x2000000000),3(x2000000000)"},
                                     {"SLURM_NODEID", "2000000001"}}),
            "0/-1/-1/3 from SLURM_PROCID");
  // tdistrun's (and torchrun's) variables win over the others.
  EXPECT_EQ(
      launch_environment_with(
          {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
      "0/2/-1/-1 from RANK");
  EXPECT_NE(launch_environment_with({{"OMPI_COMM_WORLD_RANK", "x"}})
                .find("OMPI_COMM_WORLD_RANK must be an integer"),
            std::string::npos);
}

}  // namespace
}  // namespace tdist::testing
