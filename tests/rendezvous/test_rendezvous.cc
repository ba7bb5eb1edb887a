// Rendezvous end to end: every init_method, ranks as threads and processes.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "multirank.h"
#include "tdist/errors.h"
#include "tdist/rendezvous.h"
#include "tdist/tcp_store.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

bool ipv6_loopback_works() {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_loopback;
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// Each rank checks what rendezvous gave it and that the store is shared.
void check_shared_store(const RendezvousResult& r, int rank, int n) {
  if (r.rank != rank || r.world_size != n) {
    throw std::runtime_error("got rank " + std::to_string(r.rank) + " of " + std::to_string(r.world_size));
  }
  r.store->set("hello/" + std::to_string(rank), std::to_string(rank));
  for (int peer = 0; peer < n; ++peer) {
    if (to_string(r.store->get("hello/" + std::to_string(peer))) != std::to_string(peer)) {
      throw std::runtime_error("wrong value from rank " + std::to_string(peer));
    }
  }
  exit_barrier(*r.store, rank, n);
}

class RendezvousRanks : public ::testing::TestWithParam<std::tuple<Mode, int>> {
 protected:
  Mode mode() const { return std::get<0>(GetParam()); }
  int n() const { return std::get<1>(GetParam()); }
};

TEST_P(RendezvousRanks, TcpIpv4WithRankAndWorldSizeArguments) {
  std::string url = "tcp://127.0.0.1:" + std::to_string(pick_free_port());
  EXPECT_EQ(run_ranks(mode(), n(),
                      [&](int rank) { check_shared_store(rendezvous(url, rank, n(), 30s), rank, n()); }),
            "");
}

TEST_P(RendezvousRanks, TcpIpv6WithQueryParameters) {
  if (!ipv6_loopback_works()) GTEST_SKIP() << "no IPv6 loopback here";
  int port = pick_free_port();
  EXPECT_EQ(run_ranks(mode(), n(),
                      [&](int rank) {
                        std::string url = "tcp://[::1]:" + std::to_string(port) +
                                          "?rank=" + std::to_string(rank) +
                                          "&world_size=" + std::to_string(n());
                        check_shared_store(rendezvous(url, -1, -1, 30s), rank, n());
                      }),
            "");
}

TEST_P(RendezvousRanks, TcpHostName) {
  std::string url = "tcp://localhost:" + std::to_string(pick_free_port());
  EXPECT_EQ(run_ranks(mode(), n(),
                      [&](int rank) { check_shared_store(rendezvous(url, rank, n(), 30s), rank, n()); }),
            "");
}

TEST_P(RendezvousRanks, File) {
  std::string path = temp_path("rdzv");
  EXPECT_EQ(run_ranks(mode(), n(),
                      [&](int rank) {
                        check_shared_store(rendezvous("file://" + path, rank, n(), 30s), rank, n());
                      }),
            "");
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "the file outlived its users";
}

INSTANTIATE_TEST_SUITE_P(Ranks, RendezvousRanks,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(1, 2, 3, 5, 8)),
                         [](const auto& p) {
                           return std::string(mode_name(std::get<0>(p.param))) + "_" +
                                  std::to_string(std::get<1>(p.param));
                         });

// env:// reads process-wide variables, so its ranks are processes.
class EnvRendezvous : public ::testing::TestWithParam<int> {};

TEST_P(EnvRendezvous, ReadsMasterAddrPortRankWorldSize) {
  int n = GetParam();
  int port = pick_free_port();
  EXPECT_EQ(describe_failures(run_forked(n,
                                         [&](int rank) {
                                           setenv("MASTER_ADDR", "127.0.0.1", 1);
                                           setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
                                           setenv("RANK", std::to_string(rank).c_str(), 1);
                                           setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
                                           check_shared_store(rendezvous("env://", -1, -1, 30s), rank, n);
                                         })),
            "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, EnvRendezvous, ::testing::Values(1, 2, 3, 5, 8));

// Every variable env:// may read: tdistrun's, then other launchers'.
const char* const kLauncherVariables[] = {
    "MASTER_ADDR",          "MASTER_PORT", "RANK",     "WORLD_SIZE",   "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE", "PMI_RANK",    "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
    "SLURM_STEP_NUM_TASKS"};

// Runs `body` in a child with exactly the given environment variables set
// (among those env:// reads) and returns the error it raised.
std::string env_error(const std::vector<std::pair<const char*, const char*>>& vars, int rank = -1,
                      int world_size = -1) {
  auto outcomes = run_forked(1, [&](int) {
    for (const char* name : kLauncherVariables) unsetenv(name);
    for (auto [name, value] : vars) setenv(name, value, 1);
    try {
      rendezvous("env://", rank, world_size, 2s);
    } catch (const DistInvalidArgument& e) {
      throw;
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("wrong error type: ") + e.what());
    }
    throw std::runtime_error("no error");
  });
  return outcomes[0].error;
}

TEST(EnvRendezvousErrors, MissingOrInvalidVariablesAreNamed) {
  EXPECT_NE(env_error({{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}, {"WORLD_SIZE", "2"}})
                .find("RANK is not set"),
            std::string::npos);
  EXPECT_NE(env_error({{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}, {"RANK", "0"}})
                .find("WORLD_SIZE is not set"),
            std::string::npos);
  EXPECT_NE(env_error({{"MASTER_ADDR", "127.0.0.1"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}})
                .find("MASTER_PORT is not set"),
            std::string::npos);
  EXPECT_NE(
      env_error({{"MASTER_PORT", "1"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}}).find("MASTER_ADDR is not set"),
      std::string::npos);
  EXPECT_NE(env_error({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "99999"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}})
                .find("MASTER_PORT must be a port number from 1 to 65535, got '99999'"),
            std::string::npos);
  EXPECT_NE(env_error({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"RANK", "one"}, {"WORLD_SIZE", "2"}})
                .find("RANK must be an integer, got 'one'"),
            std::string::npos);
  EXPECT_NE(env_error({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"RANK", "2"}, {"WORLD_SIZE", "2"}})
                .find("rank must be in [0, 2), got 2"),
            std::string::npos);
  // Arguments win over the environment: rank 5 of 2 comes from the argument.
  EXPECT_NE(env_error({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}}, 5)
                .find("got 5"),
            std::string::npos);
}

// MASTER_PORT must be a whole number in 1..65535; the error names the
// variable and quotes the value as it is, so stray characters show.
TEST(EnvRendezvousErrors, AMasterPortThatIsNotAPortIsQuoted) {
  for (const char* value : {"29500x", "", "70000", "0", "-5", " ", "29 500", "0x7000"}) {
    std::string error =
        env_error({{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", value}, {"RANK", "0"}, {"WORLD_SIZE", "1"}});
    EXPECT_NE(
        error.find("env:// rendezvous: environment variable MASTER_PORT must be a port number from 1 to "
                   "65535, got '" +
                   std::string(value) + "'"),
        std::string::npos)
        << "MASTER_PORT='" << value << "': " << error;
  }
}

// Blanks around the number are ignored, as torch's int(MASTER_PORT) does.
TEST(EnvRendezvous, AMasterPortWithBlanksAroundItIsReadAsTorchReadsIt) {
  int port = pick_free_port();
  EXPECT_EQ(describe_failures(
                run_forked(1,
                           [&](int rank) {
                             for (const char* name : kLauncherVariables) unsetenv(name);
                             setenv("MASTER_ADDR", "127.0.0.1", 1);
                             setenv("MASTER_PORT", (" " + std::to_string(port) + "\t").c_str(), 1);
                             setenv("RANK", "0", 1);
                             setenv("WORLD_SIZE", "1", 1);
                             auto r = rendezvous("env://", -1, -1, 30s);
                             auto* tcp = dynamic_cast<TCPStore*>(r.store.get());
                             if (tcp == nullptr || tcp->port() != port)
                               throw std::runtime_error("not the store at port " + std::to_string(port));
                             check_shared_store(r, rank, 1);
                           })),
            "");
}

// -1 means "not given" (then the URL or the environment says); any other
// negative rank or world size is a mistake, named as one.
TEST(RendezvousErrors, AnExplicitNegativeRankOrWorldSizeIsInvalidNotMissing) {
  auto error_of = [](const std::function<void()>& call) -> std::string {
    try {
      call();
    } catch (const DistInvalidArgument& e) {
      return e.what();
    }
    return "no DistInvalidArgument";
  };
  EXPECT_EQ(error_of([] { rendezvous("tcp://127.0.0.1:1", -2, 2); }),
            "tcp:// rendezvous: rank -2 is invalid: a rank is >= 0 (-1 means not given)");
  EXPECT_EQ(error_of([] { rendezvous("file:///tmp/x", -3, 2); }),
            "file:// rendezvous: rank -3 is invalid: a rank is >= 0 (-1 means not given)");
  EXPECT_EQ(error_of([] { rendezvous("tcp://127.0.0.1:1?rank=0&world_size=2", 0, -2); }),
            "tcp:// rendezvous: world_size -2 is invalid: it must be positive (-1 means not given)");
  // env://: with RANK and WORLD_SIZE set, -2 must not fall back on them.
  const std::vector<std::pair<const char*, const char*>> vars = {
      {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}};
  EXPECT_NE(env_error(vars, -2).find("env:// rendezvous: rank -2 is invalid"), std::string::npos)
      << env_error(vars, -2);
  EXPECT_NE(env_error(vars, 0, -2).find("env:// rendezvous: world_size -2 is invalid"), std::string::npos)
      << env_error(vars, 0, -2);
  // -1 still means "not given".
  EXPECT_NE(error_of([] { rendezvous("tcp://127.0.0.1:1", -1, 2); }).find("rank was not given"),
            std::string::npos);
}

TEST(RendezvousErrors, TcpAndFileNeedRankAndWorldSize) {
  EXPECT_THROW(rendezvous("tcp://127.0.0.1:1", -1, 2), DistInvalidArgument);
  EXPECT_THROW(rendezvous("tcp://127.0.0.1:1", 0, -1), DistInvalidArgument);
  EXPECT_THROW(rendezvous("file:///tmp/x", -1, 2), DistInvalidArgument);
  EXPECT_THROW(rendezvous("tcp://127.0.0.1:1", 3, 2), DistInvalidArgument);
}

TEST(RendezvousErrors, AnUnreachableMasterIsAStoreTimeoutNamingHostAndPort) {
  int port = pick_free_port();  // nobody listens there
  try {
    rendezvous("tcp://127.0.0.1:" + std::to_string(port), 1, 2, 300ms);
    FAIL() << "rendezvous with no master returned";
  } catch (const DistStoreTimeoutError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("127.0.0.1"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(port)), std::string::npos) << what;
  }
}

TEST(RendezvousExplicitStore, ValidatesRankAndWorldSize) {
  auto store = std::make_shared<HashStore>();
  auto r = rendezvous(store, 1, 3);
  EXPECT_EQ(r.store, store);
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.world_size, 3);
  EXPECT_THROW(rendezvous(std::shared_ptr<Store>(), 0, 1), DistInvalidArgument);
  EXPECT_THROW(rendezvous(store, 3, 3), DistInvalidArgument);
  EXPECT_THROW(rendezvous(store, -1, 3), DistInvalidArgument);
  EXPECT_THROW(rendezvous(store, 0, 0), DistInvalidArgument);
}

// Ranks started by other launchers: Open MPI's mpirun, MPICH/PMI, Slurm's
// srun. They give rank and size but no master, so MASTER_ADDR/PORT are set.
struct OtherLauncher {
  const char* name;
  const char* rank_variable;
  const char* size_variable;
};

class EnvRendezvousOtherLaunchers : public ::testing::TestWithParam<OtherLauncher> {};

TEST_P(EnvRendezvousOtherLaunchers, ReadsTheirRankAndSize) {
  const OtherLauncher launcher = GetParam();
  const int n = 3;
  int port = pick_free_port();
  EXPECT_EQ(describe_failures(run_forked(n,
                                         [&](int rank) {
                                           for (const char* name : kLauncherVariables) unsetenv(name);
                                           setenv("MASTER_ADDR", "127.0.0.1", 1);
                                           setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
                                           setenv(launcher.rank_variable, std::to_string(rank).c_str(), 1);
                                           setenv(launcher.size_variable, std::to_string(n).c_str(), 1);
                                           check_shared_store(rendezvous("env://", -1, -1, 30s), rank, n);
                                         })),
            "");
}

INSTANTIATE_TEST_SUITE_P(
    Launchers, EnvRendezvousOtherLaunchers,
    ::testing::Values(OtherLauncher{"OpenMpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                      OtherLauncher{"Pmi", "PMI_RANK", "PMI_SIZE"},
                      OtherLauncher{"Slurm", "SLURM_PROCID", "SLURM_NTASKS"},
                      OtherLauncher{"SlurmStep", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS"}),
    [](const auto& p) { return std::string(p.param.name); });

TEST(EnvRendezvousErrors, OtherLaunchersNamedAndMasterStillNeeded) {
  // Nothing set: the message lists every variable that would have done.
  std::string none = env_error({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(none.find("RANK is not set (nor OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID)"),
            std::string::npos)
      << none;
  // mpirun gives the rank but not the master: the error says what to export.
  std::string no_addr =
      env_error({{"MASTER_PORT", "1"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_NE(no_addr.find("MASTER_ADDR is not set"), std::string::npos) << no_addr;
  EXPECT_NE(no_addr.find("the rank came from OMPI_COMM_WORLD_RANK"), std::string::npos) << no_addr;
  std::string no_port = env_error({{"MASTER_ADDR", "h"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}});
  EXPECT_NE(no_port.find("MASTER_PORT is not set; the rank came from SLURM_PROCID"), std::string::npos)
      << no_port;
  // RANK and WORLD_SIZE win over other launchers' variables: rank 5 of 2
  // comes from RANK although OMPI_COMM_WORLD_RANK says 0.
  EXPECT_NE(env_error({{"MASTER_ADDR", "h"},
                       {"MASTER_PORT", "1"},
                       {"RANK", "5"},
                       {"WORLD_SIZE", "2"},
                       {"OMPI_COMM_WORLD_RANK", "0"},
                       {"OMPI_COMM_WORLD_SIZE", "2"}})
                .find("got 5"),
            std::string::npos);
  EXPECT_NE(env_error({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"PMI_RANK", "x"}, {"PMI_SIZE", "2"}})
                .find("PMI_RANK must be an integer, got 'x'"),
            std::string::npos);
}

}  // namespace
}  // namespace tdist::testing
