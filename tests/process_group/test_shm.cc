// The shared-memory side of tdist's backend on one host: who gets shared
// memory and which paths (single copy, rings), that no segment survives a
// run, killed ranks included, and how a rank waits (test_shm_hosts.cc:
// groups spanning hosts). The collectives
// themselves run through the whole conformance suite (test_collectives.cc)
// over shared memory, TCP and small buffers; see CMakeLists.txt.

#include <gtest/gtest.h>

#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include "common/cpus.h"
#include "pg_harness.h"
#include "process_group/tdist_backend.h"
#include "shm_groups.h"
#include "tdist/errors.h"
#include "tdist/file_store.h"
#include "transport/shm/shm_group.h"
#include "transport/shm/shm_segment.h"
#include "transport/shm/shm_sync.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;
namespace shm = transport::shm;

// Names in /dev/shm created by process `pid` (tdist-<uid>-<pid>-...).
std::set<std::string> segments_of(pid_t pid) {
  std::set<std::string> out;
  std::string prefix =
      std::string(shm::segment_prefix()) + std::to_string(getuid()) + "-" + std::to_string(pid) + "-";
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) {
      if (std::string(e->d_name).rfind(prefix, 0) == 0) out.insert(e->d_name);
    }
    closedir(dir);
  }
  return out;
}

TEST(Shm, RanksOnOneHostUseSharedMemoryAndTcpModeDoesNot) {
  for (const char* mode : {"auto", "tcp"}) {
    std::string path = temp_path("shm_mode");
    auto outcomes = forked_groups(
        3, path, [&](int) { setenv("TDIST_TRANSPORT", mode, 1); },
        [&](ProcessGroup& pg, Store&, int) {
          check(uses_shm(pg) == (std::string(mode) == "auto"),
                std::string("wrong transport in mode ") + mode);
          Tensor t = make_tensor(DType::kInt64, 5, [&](int64_t i) { return double(i + pg.rank()); });
          pg.all_reduce(t, ReduceOp::SUM)->wait();
          for (int64_t i = 0; i < 5; ++i) check(real_at(t, i) == double(3 * i + 3), "wrong sum");
        });
    EXPECT_EQ(describe_failures(outcomes), "") << mode;
    unlink(path.c_str());
  }
}

// Whether this process may read a forked child's memory with
// process_vm_readv: computed here the plain way, to check the group's probe.
bool kernel_lets_us_read_a_child() {
  const uint64_t value = 0x7d157e5eedULL;
  int fds[2];
  if (pipe(fds) != 0) return false;
  pid_t child = fork();
  if (child == 0) {
    close(fds[1]);
    char c;
    ssize_t ignored = read(fds[0], &c, 1);  // EOF once the parent is done (or dead)
    (void)ignored;
    _exit(0);
  }
  uint64_t seen = 0;
  iovec mine{&seen, sizeof(seen)};
  iovec theirs{const_cast<uint64_t*>(&value), sizeof(value)};
  bool ok =
      process_vm_readv(child, &mine, 1, &theirs, 1, 0) == static_cast<ssize_t>(sizeof(seen)) && seen == value;
  close(fds[1]);
  close(fds[0]);
  waitpid(child, nullptr, 0);
  return ok;
}

TEST(Shm, SingleCopyIsUsedWhereTheKernelAllowsItUnlessTurnedOff) {
  const bool allowed = kernel_lets_us_read_a_child();
  for (const char* setting : {"1", "0"}) {
    const bool expected = allowed && std::string(setting) == "1";
    std::string path = temp_path("shm_single_copy");
    auto outcomes = forked_groups(
        3, path, [&](int) { setenv("TDIST_SHM_SINGLE_COPY", setting, 1); },
        [&](ProcessGroup& pg, Store&, int rank) {
          check(dynamic_cast<ProcessGroupTdist&>(pg).single_copy() == expected,
                std::string("single copy ") + (expected ? "not " : "") +
                    "used with TDIST_SHM_SINGLE_COPY=" + setting);
          // 64 KiB blocks: single copy if it is on, the buffers if not.
          const int64_t block = 16384;
          Tensor in =
              make_tensor(DType::kFloat32, block, [&](int64_t i) { return double(rank * 100000 + i); });
          Tensor out = Tensor::zeros(DType::kFloat32, {3 * block});
          pg.all_gather_into_tensor(out, in)->wait();
          for (int r = 0; r < 3; ++r) {
            check_elements(
                out, r * block, block, [&](int64_t i) { return double(r * 100000 + i); },
                "all_gather block of rank " + std::to_string(r));
          }
        });
    EXPECT_EQ(describe_failures(outcomes), "") << "TDIST_SHM_SINGLE_COPY=" << setting;
    unlink(path.c_str());
  }
}

// An all_gather of `count` floats per rank over two ranks, checked.
void all_gather_two_ranks(ProcessGroup& pg, int rank, int64_t count) {
  Tensor in = make_tensor(DType::kFloat32, count, [&](int64_t i) { return double(rank * 1000 + i % 17); });
  Tensor out = Tensor::zeros(DType::kFloat32, {2 * count});
  pg.all_gather_into_tensor(out, in)->wait();
  for (int r = 0; r < 2; ++r) {
    check_elements(
        out, r * count, count, [&](int64_t i) { return double(r * 1000 + i % 17); }, "all_gather");
  }
}

TEST(Shm, RanksWithDifferentCpuAffinityTakeTheSamePaths) {
  // Whether ranks outnumber cores changes which sizes copy directly; a rank
  // pinned to one core sees itself oversubscribed where its peer does not.
  // The group agrees on one answer at creation, else the two would take
  // different paths (stale data on one, a hang on the other).
  std::string path = temp_path("shm_affinity");
  auto outcomes = forked_groups(
      2, path,
      [&](int rank) {
        if (rank != 1) return;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(0, &one);
        sched_setaffinity(0, sizeof(one), &one);
      },
      [&](ProcessGroup& pg, Store&, int rank) {
        for (int64_t count : {int64_t{4096}, int64_t{16384}, int64_t{65536}}) {
          Tensor b =
              make_tensor(DType::kFloat32, count, [&](int64_t i) { return double(rank * 7 + i % 13); });
          pg.broadcast(b, 0)->wait();
          check_elements(
              b, 0, count, [&](int64_t i) { return double(i % 13); }, "broadcast");
          all_gather_two_ranks(pg, rank, count);
          Tensor sent = make_tensor(DType::kFloat32, 2 * count,
                                    [&](int64_t i) { return double(rank * 100 + (i / count) * 10 + i % 7); });
          Tensor got = Tensor::zeros(DType::kFloat32, {2 * count});
          pg.all_to_all_single(got, sent, {}, {})->wait();
          for (int r = 0; r < 2; ++r) {
            check_elements(
                got, r * count, count,
                [&](int64_t i) { return double(r * 100 + rank * 10 + (rank * count + i) % 7); },
                "all_to_all");
          }
        }
      });
  EXPECT_EQ(describe_failures(outcomes), "");
  unlink(path.c_str());
}

TEST(Shm, RanksThatJudgeTheKernelsCopyDifferentlyTakeRankZerosPaths) {
  // Whether the kernel's copy is slow narrows the single-copy windows (a
  // 1 MiB all_reduce goes through the buffers instead). Rank 0 decides for
  // the group: here it calls the copy slow and rank 1 fast, and every size
  // must still meet on one path and come out right.
  if (!kernel_lets_us_read_a_child()) GTEST_SKIP() << "single copy is not available here";
  std::string path = temp_path("shm_kernel_copy");
  auto outcomes = forked_groups(
      2, path, [&](int rank) { setenv("TDIST_SHM_KERNEL_COPY_SLOW", rank == 0 ? "1" : "0", 1); },
      [&](ProcessGroup& pg, Store&, int rank) {
        for (int64_t count : {int64_t{16384}, int64_t{262144}, int64_t{1048576}}) {
          Tensor t = make_tensor(DType::kFloat32, count, [&](int64_t i) { return double(rank + i % 11); });
          pg.all_reduce(t, ReduceOp::SUM)->wait();
          check_elements(
              t, 0, count, [&](int64_t i) { return double(1 + 2 * (i % 11)); }, "all_reduce");
          all_gather_two_ranks(pg, rank, count);
        }
      });
  EXPECT_EQ(describe_failures(outcomes), "");
  unlink(path.c_str());
}

TEST(Shm, RanksWithDifferentRingThresholdsTakeRankZerosPaths) {
  // TDIST_SHM_RING_BYTES decides which broadcasts and gathers go through a
  // ring of slots instead of rounds. Rank 0's value holds for the group:
  // here only rank 1 sets it, then only rank 0, and every size must still
  // meet on one path and come out right.
  for (int setter : {1, 0}) {
    SCOPED_TRACE("TDIST_SHM_RING_BYTES set on rank " + std::to_string(setter));
    std::string path = temp_path("shm_ring");
    auto outcomes = forked_groups(
        2, path,
        [&](int rank) {
          setenv("TDIST_SHM_SINGLE_COPY", "0", 1);
          if (rank == setter) setenv("TDIST_SHM_RING_BYTES", "1", 1);
        },
        [&](ProcessGroup& pg, Store&, int rank) {
          for (int64_t count : {int64_t{100}, int64_t{65536}, int64_t{300000}}) {
            Tensor b =
                make_tensor(DType::kFloat32, count, [&](int64_t i) { return double(rank * 7 + i % 13); });
            pg.broadcast(b, 1)->wait();
            check_elements(
                b, 0, count, [&](int64_t i) { return double(7 + i % 13); }, "broadcast");
            all_gather_two_ranks(pg, rank, count);
          }
        });
    EXPECT_EQ(describe_failures(outcomes), "");
    unlink(path.c_str());
  }
}

TEST(Shm, RingWritersMayStoreTheirChunksEitherWay) {
  // How writers store their ring chunks (ordinary or streaming stores,
  // rank 0's TDIST_SHM_HANDOFF or the probes' verdict) must not change the
  // bytes readers read. Rank 1's value is ignored (rank 0's holds). Enough
  // chunks (300000 floats: 10 broadcast slots of 128 KiB, 3 gather slots of
  // 512 KiB, each call) for the probe rounds to come round again.
  for (const char* mode : {"streamed", "cached", "auto"}) {
    SCOPED_TRACE(std::string("rank 0 ") + mode);
    std::string path = temp_path("shm_handoff");
    auto outcomes = forked_groups(
        2, path,
        [&](int rank) {
          setenv("TDIST_SHM_SINGLE_COPY", "0", 1);
          setenv("TDIST_SHM_RING_BYTES", "1", 1);
          setenv("TDIST_SHM_HANDOFF", rank == 0 ? mode : "cached", 1);
        },
        [&](ProcessGroup& pg, Store&, int rank) {
          for (int call = 0; call < 30; ++call) {
            const int64_t count = call % 3 == 0 ? 300'000 : 65'536 + call;
            const int root = call % 2;
            Tensor b = make_tensor(DType::kFloat32, count,
                                   [&](int64_t i) { return double(rank * 7 + call + i % 13); });
            pg.broadcast(b, root)->wait();
            check_elements(
                b, 0, count, [&](int64_t i) { return double(root * 7 + call + i % 13); }, "broadcast");
            all_gather_two_ranks(pg, rank, count);
          }
        });
    EXPECT_EQ(describe_failures(outcomes), "");
    unlink(path.c_str());
  }
}

TEST(Shm, ABadHandoffSettingFailsTheGroupsCreationSayingWhatItTakes) {
  std::string path = temp_path("shm_handoff_bad");
  auto outcomes = forked_groups(
      2, path,
      [&](int) {
        setenv("TDIST_SHM_SINGLE_COPY", "0", 1);
        setenv("TDIST_SHM_HANDOFF", "fast", 1);
      },
      [&](ProcessGroup&, Store&, int rank) {
        check(false, "rank " + std::to_string(rank) + " made a group");
      });
  for (size_t rank = 0; rank < outcomes.size(); ++rank) {
    EXPECT_FALSE(outcomes[rank].ok) << "rank " << rank;
    EXPECT_NE(outcomes[rank].error.find("TDIST_SHM_HANDOFF must be auto, cached or streamed, got 'fast'"),
              std::string::npos)
        << "rank " << rank << ": " << outcomes[rank].error;
  }
  unlink(path.c_str());
}

TEST(Shm, NoSegmentSurvivesANormalRunOrAKilledRank) {
  for (bool kill_creator : {false, true}) {
    std::string path = temp_path("shm_clean");
    std::string pid_file = temp_path("shm_clean_pid");
    auto outcomes = forked_groups(
        3, path, [&](int) {},
        [&](ProcessGroup& pg, Store& store, int rank) {
          if (rank == 0) std::ofstream(pid_file) << getpid();
          std::vector<float> data(size_t{1} << 20, 1.0f);
          Tensor t = Tensor::wrap(data);
          pg.all_reduce(t, ReduceOp::SUM)->wait();
          check(data[12345] == 3.0f, "wrong sum");
          store.add("done", 1);
          store.wait({"done"});
          // The killed rank dies holding its mapping; the others are blocked
          // in a collective it never joins and must fail, not hang.
          int victim = kill_creator ? 0 : 2;
          if (rank == victim) {
            while (store.add("done", 0) < 3) usleep(1000);
            raise(SIGKILL);
          }
          while (store.add("done", 0) < 3) usleep(1000);
          try {
            pg.all_reduce(t, ReduceOp::SUM)->wait();
            throw std::runtime_error("all_reduce completed without the killed rank");
          } catch (const DistNetworkError& e) {
            check(std::string(e.what()).find("rank " + std::to_string(victim)) != std::string::npos,
                  std::string("killed rank not named: ") + e.what());
          }
        });
    int victim = kill_creator ? 0 : 2;
    for (int r = 0; r < 3; ++r) {
      if (r == victim) {
        EXPECT_EQ(outcomes[static_cast<size_t>(r)].signal, SIGKILL);
      } else {
        EXPECT_TRUE(outcomes[static_cast<size_t>(r)].ok) << describe_failures(outcomes);
      }
    }
    pid_t creator = 0;
    std::ifstream(pid_file) >> creator;
    ASSERT_GT(creator, 0);
    EXPECT_TRUE(segments_of(creator).empty());
    unlink(path.c_str());
    unlink(pid_file.c_str());
  }
}

TEST(Shm, ASegmentLeftByACreatorKilledBeforeUnlinkIsSweptAway) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Dies between create and unlink, the one window a name can leak in.
    auto segment = shm::Segment::create(4096);
    char ok = 1;
    (void)!write(fds[1], &ok, 1);
    raise(SIGKILL);
  }
  char ok = 0;
  ASSERT_EQ(read(fds[0], &ok, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  close(fds[0]);
  close(fds[1]);
  ASSERT_EQ(segments_of(child).size(), 1u);
  EXPECT_GE(shm::sweep_stale_segments(), 1);
  EXPECT_TRUE(segments_of(child).empty());
}

// A timeout over shared memory says which flag the rank waited for, the
// round (or eager operation) it expected and how far the late peer got:
// here rank 1 is exactly one call behind. The group's first calls: #0 a
// barrier, #1 the call rank 1 skips.
std::string timeout_of_a_skipped_call(const std::function<void(ProcessGroup&)>& call) {
  std::string message;
  const std::string failures = with_groups(
      Mode::kThreads, 2,
      [&](ProcessGroup& pg, int rank) {
        pg.barrier()->wait();
        if (rank == 1) return;
        try {
          call(pg);
          throw std::runtime_error("the call completed without rank 1");
        } catch (const DistTimeoutError& e) {
          message = e.what();
        }
      },
      800ms);
  EXPECT_EQ(failures, "");
  return message;
}

TEST(Shm, ATimeoutNamesTheFlagWaitedForAndHowFarTheLatePeerGot) {
  const std::string prefix =
      "all_reduce (call #1 in this group): Timed out after 800 ms waiting for rank 1 "
      "over shared memory (for ";
  // Payload (in the flag line) and one-shot all_reduce wait in round 2 for
  // its data. A large one waits for its data too (single copy: the peer's
  // published address) or, two-shot through the buffers, for its arrival
  // before its second round; which depends on what the group measured of
  // the kernel's copy (sanitizers slow memcpy down). The peer last arrived
  // in round 1 (the barrier's).
  // Rank 1 never said it reached the call (the store's record of long
  // waits, algorithms.h Arrivals).
  const std::string missing = "; rank 1 never said it reached this call (behind, stopped or dead)";
  const std::string data = prefix + "its data in round 2; its last arrival was in round 1)" + missing;
  const std::string arrival = prefix + "its arrival in round 2; its last arrival was in round 1)" + missing;
  for (const int64_t elements : {int64_t{1}, int64_t{16}, int64_t{1} << 20}) {
    const std::string message = timeout_of_a_skipped_call([&](ProcessGroup& pg) {
      Tensor t = Tensor::zeros(DType::kFloat32, {elements});
      pg.all_reduce(t, ReduceOp::SUM)->wait();
    });
    if (elements < (int64_t{1} << 20)) {
      EXPECT_EQ(message, data) << elements << " elements";
    } else {
      EXPECT_TRUE(message == data || message == arrival) << message;
    }
  }
  // An eager reduce (at most a flag line's payload) waits on the peer's
  // slot, which no eager operation has used yet.
  EXPECT_EQ(
      timeout_of_a_skipped_call([&](ProcessGroup& pg) {
        Tensor t = Tensor::zeros(DType::kFloat32, {1});
        pg.reduce(t, 0, ReduceOp::SUM)->wait();
      }),
      "reduce (call #1 in this group): Timed out after 800 ms waiting for rank 1 over shared memory (for "
      "its contribution in eager operation 0; its slot was never written)" +
          missing);
}

TEST(Shm, AWaitEndsWhenTheFlagIsPublishedFromAnotherThread) {
  alignas(64) shm::FlagLine line{};
  std::thread writer([&] {
    for (uint64_t v = 1; v <= 1000; ++v) shm::publish(line, v);
  });
  // Sleep-free waits for every value, with the sleeping path in play.
  shm::WaitPolicy policy{1, 1};
  for (uint64_t v = 1; v <= 1000; v += 37) shm::wait_at_least(line, v, policy, [] {});
  writer.join();
  EXPECT_EQ(line.seq.load(), 1000u);
}

// The first CPU this process may run on, to pin threads onto one core.
int first_allowed_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) return c;
  }
  return -1;
}

bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

TEST(Shm, AWaiterSharingItsCoreWithAComputationSleepsInsteadOfYieldingItAway) {
  // A collective waiting beside the caller's computation on one core (DDP's
  // bucket all_reduce during the backward pass): each yield would hand the
  // core to the computation for a scheduler slice. The waiter must see that
  // after its first yields and sleep until the flag comes, whatever its
  // policy's yield count.
  const int cpu = first_allowed_cpu();
  ASSERT_GE(cpu, 0);
  alignas(64) shm::FlagLine line{};
  std::atomic<bool> computing{false};
  std::atomic<bool> stop{false};
  std::atomic<bool> pinned{true};
  std::thread computation([&] {
    if (!pin_to(cpu)) pinned = false;
    computing = true;  // even unpinned: the waiter must not wait for it forever
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  // The peer publishes once the waiter sleeps (or, if it never does, after
  // a bound, and the assertion below fails).
  std::thread peer([&] {
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    while (line.sleepers.load() == 0 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    shm::publish(line, 1);
  });
  shm::WaitEnd end;
  std::thread waiter([&] {
    ASSERT_TRUE(pin_to(cpu));
    while (!computing.load()) std::this_thread::yield();
    end = shm::wait_at_least(line, 1, shm::WaitPolicy{0, 1'000'000}, [] {});
  });
  waiter.join();
  peer.join();
  stop = true;
  computation.join();
  ASSERT_TRUE(pinned.load());
  // It went on to the futex (it may still find the flag there before it
  // sleeps, if the peer publishes in between).
  EXPECT_TRUE(end.gave_core_away);
  // One of the first yields shows it (the scheduler may hand the core back
  // at once a few times first); with the policy's million yields, each
  // giving the core away for a slice, the waiter would never sleep.
  EXPECT_LE(end.yields, 16);
}

TEST(Shm, AFailureSeenAfterTheFlagArrivedDoesNotFailTheWait) {
  // The peer published the flag and then left (finished the call, destroyed
  // the group): the failure check sees it gone, but the flag is there.
  alignas(64) shm::FlagLine line{};
  int checks = 0;
  shm::WaitPolicy policy{1, 40};  // reaches a check while yielding
  EXPECT_NO_THROW(shm::wait_at_least(line, 7, policy, [&] {
    ++checks;
    line.seq.store(7, std::memory_order_release);
    throw DistNetworkError("rank 1 died or closed its connection");
  }));
  EXPECT_EQ(checks, 1);
}

TEST(Shm, AWaitIsAbandonedWhenTheFailureCheckThrows) {
  alignas(64) shm::FlagLine line{};
  int checks = 0;
  shm::WaitPolicy policy{1, 1};
  EXPECT_THROW(shm::wait_at_least(line, 1, policy,
                                  [&] {
                                    if (++checks == 3) throw DistTimeoutError("deadline");
                                  }),
               DistTimeoutError);
  EXPECT_EQ(checks, 3);
}

TEST(Shm, RanksOutnumberTheirCpusOnlyIfTheirAffinitiesTogetherHaveFewer) {
  // A launcher that pins each rank to a CPU of its own (tdistrun --bind-to
  // core) leaves each with one CPU: the group counts the union.
  const std::vector<int> cpus = detail::allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    for (bool same_cpu : {false, true}) {
      SCOPED_TRACE(std::string(mode_name(mode)) + (same_cpu ? ", both on one CPU" : ", a CPU each"));
      std::string failures = run_with_store(mode, 2, [&](Store& store, int rank) -> KeepAlive {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpus[same_cpu ? 0 : static_cast<size_t>(rank)], &set);
        check(sched_setaffinity(0, sizeof(set), &set) == 0, "sched_setaffinity failed");
        auto group = shm::ShmGroup::connect(store, rank, 2, std::chrono::seconds(60), "pinned/");
        check(group->oversubscribed() == same_cpu,
              "oversubscribed() is " + std::to_string(group->oversubscribed()));
        // The wait policy follows the group's decision.
        const shm::WaitPolicy expected = shm::WaitPolicy::for_oversubscription(same_cpu);
        const shm::WaitPolicy& got = group->policy();
        check(got.spins == expected.spins && got.yields == expected.yields &&
                  got.spin_time == expected.spin_time,
              "the wait policy spins " + std::to_string(got.spins) + " polls or " +
                  std::to_string(got.spin_time.count()) + " ns and yields " + std::to_string(got.yields) +
                  " times");
        if (std::getenv("TDIST_SHM_SPINS") == nullptr) {
          check(got.spin_time == (same_cpu ? std::chrono::nanoseconds(0) : shm::kSpinTime),
                "the wait policy spins for " + std::to_string(got.spin_time.count()) + " ns");
        }
        return group;
      });
      EXPECT_EQ(failures, "");
    }
  }
}

TEST(Shm, ARankWithACoreSpinsForATimeNotACountOfPolls) {
  // A CPU's pause may take a few ns or 40: the default spin of a rank with a
  // core to itself is a time, whatever a poll costs here.
  if (std::getenv("TDIST_SHM_SPINS") == nullptr) {
    EXPECT_EQ(shm::WaitPolicy::for_oversubscription(false).spin_time, shm::kSpinTime);
  }
  // The failure check runs first once the spin and the yields are over: a
  // wait for a flag nobody publishes reaches it no sooner than spin_time
  // after it began (a lower bound, which a loaded machine cannot break),
  // unless a yield on the way showed that another thread needed the core.
  alignas(64) shm::FlagLine line{};
  shm::WaitPolicy policy{0, 0, std::chrono::milliseconds(20)};
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration until_check{};
  const shm::WaitEnd end = shm::wait_at_least(line, 1, policy, [&] {
    until_check = std::chrono::steady_clock::now() - start;
    shm::publish(line, 1);  // ends the wait
  });
  if (!end.gave_core_away) {
    EXPECT_GE(until_check, std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(end.slept);
  line.seq.store(0);
  // A flag that is there, or comes, ends the wait at once, however long
  // the spin may last (or from the sleep that follows a yield which gave
  // the core away, on a loaded machine).
  policy.spin_time = std::chrono::hours(1);
  std::thread writer([&] { shm::publish(line, 2); });
  const auto begin = std::chrono::steady_clock::now();
  EXPECT_NO_THROW(shm::wait_at_least(line, 2, policy, [] {}));
  writer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::minutes(1));
  // TDIST_SHM_SPINS sets a count instead of the time.
  const char* before = std::getenv("TDIST_SHM_SPINS");
  const std::string saved = before != nullptr ? before : "";
  setenv("TDIST_SHM_SPINS", "123", 1);
  const shm::WaitPolicy counted = shm::WaitPolicy::for_oversubscription(false);
  if (before != nullptr) {
    setenv("TDIST_SHM_SPINS", saved.c_str(), 1);
  } else {
    unsetenv("TDIST_SHM_SPINS");
  }
  EXPECT_EQ(counted.spins, 123);
  EXPECT_EQ(counted.spin_time, std::chrono::nanoseconds(0));
}

}  // namespace
}  // namespace tdist::testing
