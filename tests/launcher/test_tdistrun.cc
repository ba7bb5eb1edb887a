// tdistrun end to end: the launcher runs launcher_worker (or sh, or a Python
// script) as its ranks, and the tests read what the ranks and the launcher
// print. Every wait has a deadline (ChildProcess kills a hung launcher).
// About 640 lines in one file: 25 short cases on one launcher harness.

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "common/cpus.h"
#include "launcher_process.h"
#include "multirank.h"
#include "tdistrun_helpers.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

// ---- environment and options ----

TEST(TdistrunEnvironment, EachRankGetsItsRanksAndTheMaster) {
  ChildProcess p(launch({"--standalone", "--nproc-per-node", "3"}, {"env", "a", "b"}));
  run_to_end(p);
  ASSERT_EQ(p.exit_code(), 0) << both(p);
  std::set<long> ports;
  for (int rank = 0; rank < 3; ++rank) {
    std::string line = env_line(p, rank);
    ASSERT_FALSE(line.empty()) << "no env line of rank " << rank << "\n" << both(p);
    EXPECT_EQ(value(line, "LOCAL_RANK"), rank) << line;
    EXPECT_EQ(value(line, "WORLD_SIZE"), 3) << line;
    EXPECT_EQ(value(line, "LOCAL_WORLD_SIZE"), 3) << line;
    EXPECT_EQ(value(line, "GROUP_RANK"), 0) << line;
    EXPECT_EQ(value(line, "GROUP_WORLD_SIZE"), 1) << line;
    EXPECT_EQ(value(line, "TDIST_RESTART_COUNT"), 0) << line;
    EXPECT_TRUE(contains(line, "MASTER_ADDR=127.0.0.1 ")) << line;
    EXPECT_TRUE(contains(line, " args=a,b")) << line;
    ports.insert(value(line, "MASTER_PORT"));
  }
  ASSERT_EQ(ports.size(), 1U) << "ranks got different MASTER_PORTs\n" << p.out();
  EXPECT_GT(*ports.begin(), 0);
  EXPECT_LE(*ports.begin(), 65535);
  // Below the range the kernel takes outgoing connections' ports from (when
  // there is room), so none of them can take it before the store listens.
  if (const int low = launcher::ephemeral_port_low(); low > 20000) {
    EXPECT_LT(*ports.begin(), low);
  }
}

TEST(TdistrunEnvironment, LocalRankArgumentOnlyWithNoUseEnv) {
  ChildProcess plain(launch({"--standalone", "--nproc-per-node", "2"}, {"env", "x"}));
  ChildProcess use_env(launch({"--standalone", "--nproc-per-node", "2", "--use-env"}, {"env", "x"}));
  ChildProcess with_arg(launch({"--standalone", "--nproc-per-node", "2", "--no-use-env"}, {"env", "x"}));
  ChildProcess underscore(launch({"--standalone", "--nproc-per-node", "2", "--no_use_env"}, {"env", "x"}));
  ChildProcess::wait_all({&plain, &use_env, &with_arg, &underscore}, deadline());
  for (const ChildProcess* p : {&plain, &use_env, &with_arg, &underscore})
    ASSERT_EQ(p->exit_code(), 0) << both(*p);
  for (int rank = 0; rank < 2; ++rank) {
    // As torchrun: the program reads LOCAL_RANK; its arguments are its own.
    for (const ChildProcess* p : {&plain, &use_env}) {
      EXPECT_TRUE(contains(env_line(*p, rank), "local_rank_arg=none args=x")) << p->out();
      EXPECT_EQ(value(env_line(*p, rank), "LOCAL_RANK"), rank);
    }
    // torch.distributed.launch's way, asked for: --local-rank=N right after
    // the program, before its own arguments.
    for (const ChildProcess* p : {&with_arg, &underscore}) {
      EXPECT_TRUE(contains(env_line(*p, rank), "local_rank_arg=" + std::to_string(rank) + " args=x"))
          << p->out();
    }
  }
}

TEST(TdistrunOptions, BothSpellingsOfEveryFlag) {
  int port = pick_free_port();
  ChildProcess underscores(launch({"--nproc_per_node=2", "--nnodes", "1", "--node_rank", "0", "--master_addr",
                                   "127.0.0.1", "--master_port", std::to_string(port), "--max_restarts", "0",
                                   "--use_env", "--grace_period", "2", "--join_timeout", "10"},
                                  {"env"}));
  run_to_end(underscores);
  int port2 = pick_free_port();
  ChildProcess hyphens(launch({"--nproc-per-node", "2", "--nnodes=1", "--node-rank=0",
                               "--master-addr=127.0.0.1", "--master-port=" + std::to_string(port2),
                               "--max-restarts=0", "--use-env", "--grace-period=2", "--join-timeout=10"},
                              {"env"}));
  run_to_end(hyphens);
  for (auto [p, expected_port] : {std::pair{&underscores, port}, std::pair{&hyphens, port2}}) {
    ASSERT_EQ(p->exit_code(), 0) << both(*p);
    for (int rank = 0; rank < 2; ++rank) {
      std::string line = env_line(*p, rank);
      // One node without --standalone: the ranks' master is --master-addr:--master-port.
      EXPECT_EQ(value(line, "MASTER_PORT"), expected_port) << line;
      EXPECT_TRUE(contains(line, "local_rank_arg=none")) << line;
    }
  }
}

TEST(TdistrunOptions, UsageErrorsAreExplained) {
  ChildProcess no_program({kTdistrun, "--nproc-per-node", "2"});
  ChildProcess unknown({kTdistrun, "--nproc-per-nod", "2", kWorker, "env"});
  ChildProcess missing({kTdistrun, "--standalone", "no-such-program-for-tdistrun"});
  ChildProcess bad_nproc({kTdistrun, "--nproc-per-node", "zero", kWorker, "env"});
  ChildProcess bad_node({kTdistrun, "--nnodes", "2", "--node-rank", "2", kWorker, "env"});
  ChildProcess no_nodes({kTdistrun, "--nnodes", "0", kWorker, "env"});
  ChildProcess bad_bind({kTdistrun, "--bind-to", "socket", kWorker, "env"});
  ChildProcess help({kTdistrun, "--help"});
  ChildProcess::wait_all(
      {&no_program, &unknown, &missing, &bad_nproc, &bad_node, &no_nodes, &bad_bind, &help}, deadline());
  EXPECT_EQ(help.exit_code(), 0);
  EXPECT_TRUE(contains(help.out(), "--bind-to")) << help.out();
  EXPECT_TRUE(contains(help.out(), "Usage: tdistrun [OPTIONS] PROGRAM [ARGS...]\n")) << help.out();
  EXPECT_EQ(no_program.exit_code(), 2);
  EXPECT_TRUE(contains(no_program.err(), "no PROGRAM given")) << no_program.err();
  EXPECT_EQ(unknown.exit_code(), 2);
  EXPECT_TRUE(contains(unknown.err(), "--nproc-per-nod")) << unknown.err();
  EXPECT_EQ(missing.exit_code(), 1);
  EXPECT_TRUE(contains(missing.err(), "'no-such-program-for-tdistrun' not found in PATH")) << missing.err();
  EXPECT_EQ(bad_nproc.exit_code(), 2);
  EXPECT_TRUE(contains(bad_nproc.err(), "--nproc-per-node must be")) << bad_nproc.err();
  EXPECT_EQ(bad_node.exit_code(), 2);
  EXPECT_TRUE(contains(bad_node.err(), "--node-rank must be in [0, 2), got 2")) << bad_node.err();
  EXPECT_EQ(no_nodes.exit_code(), 2);
  EXPECT_TRUE(contains(no_nodes.err(), "--nnodes must be N or MIN:MAX with 1 <= MIN <= MAX, got '0'"))
      << no_nodes.err();
  EXPECT_EQ(bad_bind.exit_code(), 2);
  EXPECT_TRUE(contains(bad_bind.err(), "--bind-to: socket not in {auto,none,core}")) << bad_bind.err();
  // Every message names the launcher, those of its option parser too.
  for (const ChildProcess* p :
       {&no_program, &unknown, &missing, &bad_nproc, &bad_node, &no_nodes, &bad_bind}) {
    EXPECT_EQ(p->err().rfind("tdistrun: ", 0), 0U) << p->err();
  }
}

TEST(TdistrunOptions, AProgramPathThatDoesNotExistIsSaidSo) {
  const std::string plain = temp_path("plain-file");
  { std::ofstream(plain) << "not a program\n"; }
  chmod(plain.c_str(), 0644);
  ChildProcess absent({kTdistrun, "--standalone", "/nonexistent-dir-for-tdistrun/prog"});
  ChildProcess not_executable({kTdistrun, "--standalone", plain});
  ChildProcess::wait_all({&absent, &not_executable}, deadline());
  unlink(plain.c_str());
  EXPECT_EQ(absent.exit_code(), 1);
  EXPECT_TRUE(contains(absent.err(),
                       "tdistrun: program '/nonexistent-dir-for-tdistrun/prog': No such file or directory"))
      << absent.err();
  EXPECT_EQ(not_executable.exit_code(), 1);
  EXPECT_TRUE(contains(not_executable.err(), "tdistrun: '" + plain + "' is not an executable file"))
      << not_executable.err();
}

// The test's (and so tdistrun's) "Cpus_allowed_list:" line from
// /proc/self/status, as grep prints it.
std::string own_allowed_list() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) return line;
  }
  return "";
}

// Lines of `text` equal to `line`.
size_t count_lines(const std::string& text, const std::string& line) {
  auto lines = lines_with(text, line);
  return static_cast<size_t>(std::count(lines.begin(), lines.end(), line));
}

// "0-2,5" -> {0, 1, 2, 5} (the kernel's CPU list format).
std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    const size_t dash = part.find('-');
    const int first = std::stoi(part.substr(0, dash));
    const int last = dash == std::string::npos ? first : std::stoi(part.substr(dash + 1));
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  return cpus;
}

// Starts `args` with the test narrowed to CPU `cpu`, so the child inherits
// that mask; the test's own mask is restored however the start ends. Null if
// the mask could not be changed.
std::unique_ptr<ChildProcess> start_on_one_cpu(int cpu, const std::vector<std::string>& args) {
  cpu_set_t all;
  if (sched_getaffinity(0, sizeof(all), &all) != 0) return nullptr;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0) return nullptr;
  struct Restore {
    const cpu_set_t& all;
    ~Restore() { sched_setaffinity(0, sizeof(all), &all); }
  } restore{all};
  return std::make_unique<ChildProcess>(args);
}

TEST(TdistrunBinding, BindToCorePinsLocalRankIToTheIthAllowedCpu) {
  const std::vector<int> cpus = detail::allowed_cpus();  // the test's, and so tdistrun's
  ASSERT_FALSE(cpus.empty());
  const int ranks = static_cast<int>(cpus.size()) + 1;  // one more than CPUs: the ranks wrap around
  ChildProcess bound({kTdistrun, "--standalone", "--use-env", "--bind-to", "core", "--nproc-per-node",
                      std::to_string(ranks), "/bin/grep", "Cpus_allowed_list", "/proc/self/status"});
  ChildProcess unbound({kTdistrun, "--standalone", "--use-env", "--bind-to", "none", "--nproc-per-node", "2",
                        "/bin/grep", "Cpus_allowed_list", "/proc/self/status"});
  ChildProcess::wait_all({&bound, &unbound}, deadline());
  ASSERT_EQ(bound.exit_code(), 0) << both(bound);
  ASSERT_EQ(unbound.exit_code(), 0) << both(unbound);
  for (int rank = 0; rank < ranks; ++rank) {
    const std::string cpu = std::to_string(cpus[static_cast<size_t>(rank) % cpus.size()]);
    EXPECT_EQ(count_lines(bound.out(), "[rank " + std::to_string(rank) + "]: Cpus_allowed_list:\t" + cpu), 1U)
        << bound.out();
  }
  // With --bind-to none the ranks may run wherever tdistrun may.
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(count_lines(unbound.out(), "[rank " + std::to_string(rank) + "]: " + own_allowed_list()), 1U)
        << unbound.out();
  }
  // The i-th CPU tdistrun may use, not CPU number i: with the test (and so
  // tdistrun) narrowed to the last CPU, every rank runs there.
  auto started = start_on_one_cpu(
      cpus.back(), {kTdistrun, "--standalone", "--use-env", "--bind-to", "core", "--nproc-per-node", "2",
                    "/bin/grep", "Cpus_allowed_list", "/proc/self/status"});
  ASSERT_TRUE(started) << "sched_setaffinity failed";
  ChildProcess& narrowed = *started;
  run_to_end(narrowed);
  ASSERT_EQ(narrowed.exit_code(), 0) << both(narrowed);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(count_lines(narrowed.out(), "[rank " + std::to_string(rank) + "]: Cpus_allowed_list:\t" +
                                              std::to_string(cpus.back())),
              1U)
        << narrowed.out();
  }
}

// The default, --bind-to auto: ranks that do not outnumber the CPUs get
// disjoint shares of them, together all of them (as mpirun binds 2 ranks);
// more ranks than CPUs are left to the scheduler, as mpirun leaves them.
TEST(TdistrunBinding, ByDefaultRanksShareTheCpusOutUnlessTheyOutnumberThem) {
  const std::vector<int> cpus = detail::allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  const int fitting = std::min<int>(static_cast<int>(cpus.size()), 2);
  const int outnumbering = static_cast<int>(cpus.size()) + 1;
  ChildProcess shared({kTdistrun, "--standalone", "--use-env", "--nproc-per-node", std::to_string(fitting),
                       "/bin/grep", "Cpus_allowed_list", "/proc/self/status"});
  ChildProcess crowded({kTdistrun, "--standalone", "--use-env", "--nproc-per-node",
                        std::to_string(outnumbering), "/bin/grep", "Cpus_allowed_list", "/proc/self/status"});
  ChildProcess::wait_all({&shared, &crowded}, deadline());
  ASSERT_EQ(shared.exit_code(), 0) << both(shared);
  ASSERT_EQ(crowded.exit_code(), 0) << both(crowded);
  const auto shares = detail::share_cpus(cpus, fitting);
  std::vector<int> given;
  for (int rank = 0; rank < fitting; ++rank) {
    const auto& share = shares[static_cast<size_t>(rank)];
    // The kernel's list form of one run or single CPUs: compare as sets.
    const std::string prefix = "[rank " + std::to_string(rank) + "]: Cpus_allowed_list:\t";
    const auto lines = lines_with(shared.out(), prefix);
    ASSERT_EQ(lines.size(), 1U) << shared.out();
    const std::vector<int> got = parse_cpu_list(lines[0].substr(prefix.size()));
    EXPECT_EQ(got, share) << shared.out();
    given.insert(given.end(), got.begin(), got.end());
  }
  std::sort(given.begin(), given.end());
  EXPECT_EQ(given, cpus) << "every CPU given out once: " << shared.out();
  for (int rank = 0; rank < outnumbering; ++rank) {
    EXPECT_EQ(count_lines(crowded.out(), "[rank " + std::to_string(rank) + "]: " + own_allowed_list()), 1U)
        << crowded.out();
  }
}

// --nproc-per-node auto (or cpu): one rank per CPU tdistrun may run on
// (taskset, a cgroup's cpuset), not per CPU of the machine.
TEST(TdistrunOptions, NprocAutoStartsOneRankPerCpuTheLauncherMayUse) {
  const std::vector<int> cpus = detail::allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  const std::vector<std::string> print_world = {"/bin/sh", "-c", "echo world $WORLD_SIZE"};
  ChildProcess all_cpus(
      cat({kTdistrun, "--standalone", "--use-env", "--nproc-per-node", "auto"}, print_world));
  auto started = start_on_one_cpu(
      cpus.back(), cat({kTdistrun, "--standalone", "--use-env", "--nproc-per-node", "cpu"}, print_world));
  ASSERT_TRUE(started) << "sched_setaffinity failed";
  ChildProcess& one_cpu = *started;
  ChildProcess::wait_all({&all_cpus, &one_cpu}, deadline());
  ASSERT_EQ(all_cpus.exit_code(), 0) << both(all_cpus);
  ASSERT_EQ(one_cpu.exit_code(), 0) << both(one_cpu);
  EXPECT_EQ(lines_with(all_cpus.out(), "world " + std::to_string(cpus.size())).size(), cpus.size())
      << all_cpus.out();
  EXPECT_EQ(lines_with(one_cpu.out(), "]: world ").size(), 1U) << one_cpu.out();
  EXPECT_EQ(lines_with(one_cpu.out(), "[rank 0]: world 1").size(), 1U) << one_cpu.out();
}

TEST(TdistrunOutput, LinesArePrefixedAndStreamsKeptApart) {
  ChildProcess p({kTdistrun, "--standalone", "--use-env", "--nproc-per-node", "2", "/bin/sh", "-c",
                  "echo out $RANK; echo err $RANK >&2; printf 'no newline %s' $RANK"});
  run_to_end(p);
  ASSERT_EQ(p.exit_code(), 0) << both(p);
  for (int rank = 0; rank < 2; ++rank) {
    std::string r = std::to_string(rank);
    EXPECT_EQ(lines_with(p.out(), "[rank " + r + "]: out " + r).size(), 1U) << p.out();
    EXPECT_EQ(lines_with(p.out(), "[rank " + r + "]: no newline " + r).size(), 1U) << p.out();
    EXPECT_EQ(lines_with(p.err(), "[rank " + r + "]: err " + r).size(), 1U) << p.err();
    EXPECT_TRUE(lines_with(p.out(), "err " + r).empty()) << p.out();
  }
}

TEST(TdistrunOutput, LogDirGetsOneFilePerRankAndStreamTeeCopiesToConsole) {
  std::string dir = temp_path("logs");
  ChildProcess quiet(launch({"--standalone", "--nproc-per-node", "2", "--log-dir", dir + "/q"}, {"env"}));
  ChildProcess tee(
      launch({"--standalone", "--nproc-per-node", "2", "--log_dir", dir + "/t", "--tee"}, {"env"}));
  ChildProcess::wait_all({&quiet, &tee}, deadline());
  ASSERT_EQ(quiet.exit_code(), 0) << both(quiet);
  ASSERT_EQ(tee.exit_code(), 0) << both(tee);
  EXPECT_TRUE(lines_with(quiet.out(), "env RANK=").empty()) << quiet.out();
  EXPECT_EQ(lines_with(tee.out(), "env RANK=").size(), 2U) << tee.out();
  for (const std::string sub : {"/q", "/t"}) {
    for (int rank = 0; rank < 2; ++rank) {
      std::string stem = dir + sub + "/attempt_0/rank_" + std::to_string(rank);
      std::ifstream out(stem + ".stdout.log");
      std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
      EXPECT_EQ(text.rfind("env RANK=" + std::to_string(rank) + " ", 0), 0U) << stem << ": " << text;
      EXPECT_TRUE(std::filesystem::exists(stem + ".stderr.log")) << stem;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(TdistrunPython, PyProgramsRunUnderTdistPython) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "/usr/bin/python3 is missing";
  // The interpreter TDIST_PYTHON names (else python3 in PATH) runs them.
  std::string script = temp_path("script") + ".py";
  {
    std::ofstream out(script);
    out << "import os, sys\n"
           "print('py rank=%s argv=%s exe=%s' % (os.environ['RANK'], ','.join(sys.argv[1:]), "
           "sys.executable))\n";
  }
  ChildProcess p({kTdistrun, "--standalone", "--nproc-per-node", "2", script, "--foo"},
                 {"TDIST_PYTHON=/usr/bin/python3"});
  run_to_end(p);
  unlink(script.c_str());
  ASSERT_EQ(p.exit_code(), 0) << both(p);
  for (int rank = 0; rank < 2; ++rank) {
    std::string r = std::to_string(rank);
    EXPECT_EQ(
        lines_with(p.out(), "[rank " + r + "]: py rank=" + r + " argv=--foo exe=/usr/bin/python3").size(), 1U)
        << p.out();
  }
}

#ifdef TDIST_BUILT_FOR_PYTHON
TEST(TdistrunPython, WithoutTdistPythonTheInterpreterTdistWasBuiltForRunsPythonPrograms) {
  // A first python3 in PATH that is not the one the build used (Debian's)
  // must not be the one that runs them: it may lack torch and tdist.
  std::string script = temp_path("script") + ".py";
  {
    std::ofstream out(script);
    out << "import os, sys\nprint('py rank=%s exe=%s' % (os.environ['RANK'], sys.executable))\n";
  }
  const std::vector<std::string> env = {"TDIST_PYTHON=", "PATH=/usr/bin:/bin"};
  ChildProcess by_suffix({kTdistrun, "--standalone", "--nproc-per-node", "2", script}, env);
  ChildProcess by_name({kTdistrun, "--standalone", "--nproc-per-node", "2", "python3", script}, env);
  run_to_end(by_suffix);
  run_to_end(by_name);
  unlink(script.c_str());
  for (const ChildProcess* p : {&by_suffix, &by_name}) {
    ASSERT_EQ(p->exit_code(), 0) << both(*p);
    for (int rank = 0; rank < 2; ++rank) {
      std::string r = std::to_string(rank);
      EXPECT_EQ(
          lines_with(p->out(), "[rank " + r + "]: py rank=" + r + " exe=" + TDIST_BUILT_FOR_PYTHON).size(),
          1U)
          << p->out();
    }
  }
}
#endif

// ---- failures ----

TEST(TdistrunFailure, AFailingRankIsReportedWithItsStderrAndTheOthersAreStopped) {
  ChildProcess p(launch({"--standalone", "--use-env", "--nproc-per-node", "3"}, {"fail", "1", "3"}));
  run_to_end(p);
  EXPECT_EQ(p.exit_code(), 1) << both(p);
  EXPECT_TRUE(contains(p.err(), "tdistrun: rank 1 (local rank 1, pid ")) << p.err();
  EXPECT_TRUE(contains(p.err(), ") exited with code 3")) << p.err();
  EXPECT_TRUE(contains(p.err(), "stopping 2 ranks")) << p.err();
  // The report repeats the last 20 of the 25 stderr lines.
  std::string report = p.err().substr(std::min(p.err().size(), p.err().find("---- failure")));
  EXPECT_TRUE(contains(report, "last 20 lines of rank 1's stderr:")) << report;
  EXPECT_TRUE(contains(report, "  [rank 1]: error line 6 of rank 1\n")) << report;
  EXPECT_TRUE(contains(report, "  [rank 1]: error line 25 of rank 1\n")) << report;
  EXPECT_FALSE(contains(report, "error line 5 of rank 1\n")) << report;
  auto pids = values_after(p.out(), "pid");
  ASSERT_EQ(pids.size(), 2U) << p.out();
  for (long pid : pids)
    EXPECT_FALSE(process_alive(static_cast<pid_t>(pid))) << "rank pid " << pid << " survived";
}

TEST(TdistrunFailure, ARankKilledBySignalIsReportedByTheSignalName) {
  ChildProcess p(launch({"--standalone", "--use-env", "--nproc-per-node", "2"}, {"selfkill", "1"}));
  run_to_end(p);
  EXPECT_EQ(p.exit_code(), 1) << both(p);
  EXPECT_TRUE(contains(p.err(), "rank 1 (local rank 1, pid ")) << p.err();
  EXPECT_TRUE(contains(p.err(), "was killed by signal SIGKILL (9)")) << p.err();
  EXPECT_TRUE(contains(p.err(), "  [rank 1]: about to kill myself")) << p.err();
  for (long pid : values_after(p.out(), "pid")) EXPECT_FALSE(process_alive(static_cast<pid_t>(pid)));
}

TEST(TdistrunFailure, ProgramThatCannotBeExecutedFailsEveryRank) {
  std::string file = temp_path("not-exec");
  { std::ofstream(file) << "#!/nonexistent/interpreter\n"; }
  chmod(file.c_str(), 0755);
  ChildProcess p({kTdistrun, "--standalone", "--nproc-per-node", "1", file});
  run_to_end(p);
  unlink(file.c_str());
  EXPECT_EQ(p.exit_code(), 1) << both(p);
  EXPECT_TRUE(contains(p.err(), "exited with code 127")) << p.err();
  EXPECT_TRUE(contains(p.err(), "cannot execute " + file)) << p.err();
}

// ---- restarts ----

TEST(TdistrunRestart, AGroupThatFailsOnceIsRestarted) {
  std::string marker = temp_path("marker");
  ChildProcess p(launch({"--standalone", "--use-env", "--nproc-per-node", "2", "--max-restarts", "2"},
                        {"fail-once", marker}));
  run_to_end(p);
  unlink(marker.c_str());
  EXPECT_EQ(p.exit_code(), 0) << both(p);
  EXPECT_TRUE(contains(p.err(), "first attempt fails on purpose")) << p.err();
  EXPECT_TRUE(contains(p.err(), "rank 0 (local rank 0, pid ")) << p.err();
  EXPECT_TRUE(contains(p.err(), "restarting all ranks (restart 1 of 2)")) << p.err();
  EXPECT_FALSE(contains(p.err(), "restart 2 of 2")) << p.err();
  EXPECT_EQ(lines_with(p.out(), "[rank 0]: attempt=1 rank=0 ok").size(), 1U) << p.out();
  EXPECT_EQ(lines_with(p.out(), "[rank 1]: attempt=1 rank=1 ok").size(), 1U) << p.out();
}

TEST(TdistrunRestart, GivesUpAfterMaxRestarts) {
  ChildProcess p(launch({"--standalone", "--use-env", "--nproc-per-node", "2", "--max-restarts", "1"},
                        {"fail", "0", "6"}));
  run_to_end(p);
  EXPECT_EQ(p.exit_code(), 1) << both(p);
  EXPECT_TRUE(contains(p.err(), "---- failure (attempt 1 of 2) ----")) << p.err();
  EXPECT_TRUE(contains(p.err(), "restarting all ranks (restart 1 of 1)")) << p.err();
  EXPECT_TRUE(contains(p.err(), "---- failure (attempt 2 of 2) ----")) << p.err();
  EXPECT_TRUE(contains(p.err(), "giving up after 1 restart")) << p.err();
  EXPECT_EQ(lines_with(p.err(), "exited with code 6").size(), 4U) << p.err();  // 2 notices + 2 reports
}

// ---- signals ----

TEST(TdistrunSignals, CtrlCStopsEveryRankAndWhatTheyStartedAndExits130) {
  ChildProcess p(launch({"--standalone", "--use-env", "--nproc-per-node", "3"}, {"block", "--grandchild"}));
  ASSERT_TRUE(p.wait_until([&] { return lines_with(p.out(), "ready pid=").size() == 3; }, deadline()))
      << both(p);
  auto pids = values_after(p.out(), "pid");
  auto grandchildren = values_after(p.out(), "grandchild");
  ASSERT_EQ(pids.size(), 3U);
  ASSERT_EQ(grandchildren.size(), 3U);
  p.send_signal(SIGINT);
  run_to_end(p);
  EXPECT_EQ(p.exit_code(), 130) << both(p);
  EXPECT_TRUE(contains(p.err(), "got SIGINT; stopping every rank")) << p.err();
  EXPECT_FALSE(contains(p.err(), "---- failure")) << "stopped ranks are not failures\n" << p.err();
  for (long pid : pids) EXPECT_FALSE(process_alive(static_cast<pid_t>(pid))) << "rank pid " << pid;
  // SIGKILLed with their process group before the launcher exited.
  for (long pid : grandchildren) EXPECT_TRUE(wait_until_gone(static_cast<pid_t>(pid), deadline(10s))) << pid;
}

TEST(TdistrunSignals, SigtermExits143AndRanksIgnoringItAreKilledAfterTheGracePeriod) {
  ChildProcess p(launch({"--standalone", "--use-env", "--nproc-per-node", "2", "--grace-period", "0.3"},
                        {"block", "--ignore-term"}));
  ASSERT_TRUE(p.wait_until([&] { return lines_with(p.out(), "ready pid=").size() == 2; }, deadline()))
      << both(p);
  auto pids = values_after(p.out(), "pid");
  p.send_signal(SIGTERM);
  run_to_end(p);
  EXPECT_EQ(p.exit_code(), 143) << both(p);
  EXPECT_TRUE(contains(p.err(), "2 ranks still running after 0.3 s; sending SIGKILL")) << p.err();
  for (long pid : pids) EXPECT_FALSE(process_alive(static_cast<pid_t>(pid))) << "rank pid " << pid;
}

TEST(TdistrunSignals, ASecondCtrlCKillsAtOnce) {
  ChildProcess p(launch({"--standalone", "--use-env", "--nproc-per-node", "2", "--grace-period", "600"},
                        {"block", "--ignore-term"}));
  ASSERT_TRUE(p.wait_until([&] { return lines_with(p.out(), "ready pid=").size() == 2; }, deadline()))
      << both(p);
  p.send_signal(SIGINT);
  ASSERT_TRUE(p.wait_until([&] { return contains(p.err(), "stopping 2 ranks"); }, deadline())) << both(p);
  p.send_signal(SIGINT);
  run_to_end(p, 30s);  // far less than the grace period
  EXPECT_EQ(p.exit_code(), 130) << both(p);
  EXPECT_TRUE(contains(p.err(), "got SIGINT again; killing every rank now")) << p.err();
}

// ---- several nodes on this host ----

std::vector<std::string> node_options(int port, int node_rank) {
  return {"--nnodes",
          "2",
          "--node-rank",
          std::to_string(node_rank),
          "--master-addr",
          "127.0.0.1",
          "--master-port",
          std::to_string(port),
          "--nproc-per-node",
          "2",
          "--use-env",
          "--join-timeout",
          "60"};
}

TEST(TdistrunMultiNode, TwoNodesAgreeOnGlobalRanksAndTheRanksMeet) {
  int port = pick_free_port();
  ChildProcess node0(launch(node_options(port, 0), {"rendezvous"}));
  ChildProcess node1(launch(node_options(port, 1), {"rendezvous"}));
  ChildProcess::wait_all({&node0, &node1}, deadline());
  ASSERT_FALSE(node0.timed_out() || node1.timed_out()) << both(node0) << both(node1);
  ASSERT_EQ(node0.exit_code(), 0) << both(node0);
  ASSERT_EQ(node1.exit_code(), 0) << both(node1);
  std::set<long> ports;
  for (int rank = 0; rank < 4; ++rank) {
    const ChildProcess& node = rank < 2 ? node0 : node1;
    std::string r = std::to_string(rank);
    auto lines = lines_with(node.out(), "[rank " + r + "]: rdzv rank=" + r +
                                            " world=4 local=" + std::to_string(rank % 2) +
                                            " group=" + std::to_string(rank / 2) + " port=");
    ASSERT_EQ(lines.size(), 1U) << both(node);
    ports.insert(value(lines[0], "port"));
  }
  // The ranks' MASTER_PORT is agreed through the agents' store; it is not
  // the agents' own port.
  ASSERT_EQ(ports.size(), 1U);
  EXPECT_NE(*ports.begin(), port);
}

// Without --node-rank the second node is a second node 0. Both nodes must
// say so at once: the join timeout here is far beyond the test's deadline,
// so a node that waited for it fails the test.
TEST(TdistrunMultiNode, AForgottenNodeRankIsSaidOnBothNodes) {
  int port = pick_free_port();
  auto options = node_options(port, 0);
  options.back() = "600";  // --join-timeout
  ChildProcess node0(launch(options, {"env"}));
  auto forgot = options;
  forgot.erase(forgot.begin() + 2, forgot.begin() + 4);  // --node-rank 0
  ChildProcess node1(launch(forgot, {"env"}));
  ChildProcess::wait_all({&node0, &node1}, deadline());
  ASSERT_FALSE(node0.timed_out() || node1.timed_out()) << both(node0) << both(node1);
  EXPECT_EQ(node0.exit_code(), 1) << both(node0);
  EXPECT_EQ(node1.exit_code(), 1) << both(node1);
  // Whichever bound the port first hosts the store; the other cannot, and
  // says why, and the host hears it from the store.
  const ChildProcess& host = contains(node0.err(), "could not host") ? node1 : node0;
  const ChildProcess& other = &host == &node0 ? node1 : node0;
  EXPECT_TRUE(contains(other.err(),
                       "which makes it the node that hosts the store at --master-addr; every other "
                       "node needs its own --node-rank in [1, 2)"))
      << other.err();
  EXPECT_TRUE(contains(host.err(), "was also started as --node-rank 0")) << host.err();
  EXPECT_TRUE(contains(host.err(), "give every node but this one its own --node-rank in [1, 2)"))
      << host.err();
  // node1 is the one without --node-rank: its message says so, or the
  // host's message about it does.
  EXPECT_TRUE(contains(node1.err(), &other == &node1 ? "(the default: --node-rank was not given)"
                                                     : "was also started as --node-rank 0"))
      << node1.err();
  EXPECT_TRUE(contains(node0.err(), &other == &node1 ? "(it was not given --node-rank)"
                                                     : "this node was given --node-rank 0, which"))
      << node0.err();
}

TEST(TdistrunMultiNode, TwoNodesClaimingOneRankAreSaidOnEveryNode) {
  int port = pick_free_port();
  auto options = [&](int node) {
    auto o = node_options(port, node);
    o[1] = "3";        // --nnodes
    o.back() = "600";  // --join-timeout
    return o;
  };
  ChildProcess node0(launch(options(0), {"env"}));
  ChildProcess first(launch(options(1), {"env"}));
  ChildProcess second(launch(options(1), {"env"}));
  ChildProcess::wait_all({&node0, &first, &second}, deadline());
  for (const ChildProcess* p : {&node0, &first, &second}) {
    ASSERT_FALSE(p->timed_out()) << both(*p);
    EXPECT_EQ(p->exit_code(), 1) << both(*p);
    EXPECT_TRUE(contains(p->err(), "two tdistruns were started with --node-rank 1 of --nnodes 3"))
        << p->err();
    EXPECT_TRUE(contains(p->err(), "give every node its own --node-rank in [0, 3)")) << p->err();
  }
}

TEST(TdistrunMultiNode, AFailureOnOneNodeStopsBoth) {
  int port = pick_free_port();
  ChildProcess node0(launch(node_options(port, 0), {"fail", "3", "5"}));
  ChildProcess node1(launch(node_options(port, 1), {"fail", "3", "5"}));
  ChildProcess::wait_all({&node0, &node1}, deadline());
  ASSERT_FALSE(node0.timed_out() || node1.timed_out()) << both(node0) << both(node1);
  EXPECT_EQ(node1.exit_code(), 1) << both(node1);
  EXPECT_TRUE(contains(node1.err(), "rank 3 (local rank 1 on node 1 (")) << node1.err();
  EXPECT_TRUE(contains(node1.err(), "exited with code 5")) << node1.err();
  EXPECT_EQ(node0.exit_code(), 1) << both(node0);
  EXPECT_TRUE(contains(node0.err(), "node 1 reports: rank 3 (local rank 1 on node 1")) << node0.err();
  for (long pid : values_after(node0.out() + node1.out(), "pid")) {
    EXPECT_FALSE(process_alive(static_cast<pid_t>(pid))) << "rank pid " << pid;
  }
}

TEST(TdistrunMultiNode, BothNodesRestartTogether) {
  int port = pick_free_port();
  std::string marker = temp_path("marker");
  auto options = [&](int node) { return cat(node_options(port, node), {"--max-restarts", "1"}); };
  ChildProcess node0(launch(options(0), {"fail-once", marker}));
  ChildProcess node1(launch(options(1), {"fail-once", marker}));
  ChildProcess::wait_all({&node0, &node1}, deadline());
  unlink(marker.c_str());
  ASSERT_EQ(node0.exit_code(), 0) << both(node0);
  ASSERT_EQ(node1.exit_code(), 0) << both(node1);
  EXPECT_TRUE(contains(node1.err(), "node 0 reports: rank 0 (local rank 0 on node 0")) << node1.err();
  for (int rank = 0; rank < 4; ++rank) {
    const ChildProcess& node = rank < 2 ? node0 : node1;
    std::string r = std::to_string(rank);
    EXPECT_EQ(lines_with(node.out(), "[rank " + r + "]: attempt=1 rank=" + r + " ok").size(), 1U)
        << both(node);
  }
}

}  // namespace
}  // namespace tdist::testing
