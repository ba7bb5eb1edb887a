// torch_npu's additions on tdist's own groups: reinit (ProcessGroup::reinit,
// reinit_process_group) rebuilds or keeps a group's connections in place,
// and comm_name names the group alike on every member. Ranks as threads and
// as forked processes, 1 to 5 of them (8 for the name).

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "pg_harness.h"
#include "tdist/distributed.h"
#include "tdist/errors.h"
#include "tdist/file_store.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

// Every rank's copy of `text`, gathered over `pg` (at most 95 bytes each).
std::vector<std::string> gather_text(ProcessGroup& pg, const std::string& text) {
  constexpr int64_t kWidth = 96;
  check(text.size() < kWidth, "text too long for gather_text: " + text);
  Tensor mine = Tensor::zeros(DType::kUInt8, {kWidth});
  std::memcpy(mine.data(), text.data(), text.size());
  Tensor all = Tensor::zeros(DType::kUInt8, {kWidth * pg.size()});
  pg.all_gather_into_tensor(all, mine)->wait();
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(pg.size()));
  for (int r = 0; r < pg.size(); ++r) out.emplace_back(static_cast<const char*>(all.data()) + r * kWidth);
  return out;
}

// A ring of sends: each rank sends its rank to the next and receives the
// previous one's.
void checked_ring(ProcessGroup& pg) {
  const int n = pg.size();
  if (n == 1) return;
  Tensor out = make_tensor(DType::kInt32, 3, [&](int64_t i) { return pg.rank() * int64_t{10} + i; });
  Tensor in = Tensor::zeros(DType::kInt32, {3});
  auto sent = pg.send(out, (pg.rank() + 1) % n, 7);
  auto got = pg.recv(in, (pg.rank() + n - 1) % n, 7);
  sent->wait();
  got->wait();
  const int from = (pg.rank() + n - 1) % n;
  check_elements(
      in, 0, 3, [&](int64_t i) { return from * int64_t{10} + i; }, "ring after reinit");
}

class Reinit : public WorldsTest {};

TEST_P(Reinit, RebuiltLinksCarryCollectivesAndMessagesAndTheNameStays) {
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int) {
                          checked_all_reduce(pg, 1001, 0);
                          const std::string name = pg.comm_name();
                          for (int rebuild = 1; rebuild <= 2; ++rebuild) {
                            pg.reinit(/*rebuild_links=*/true);
                            // A new set of connections counts its calls from 0.
                            check(pg.sequence_number() == 0,
                                  "sequence number after reinit: " + std::to_string(pg.sequence_number()));
                            checked_all_reduce(pg, 1, rebuild);
                            checked_all_reduce(pg, 70001, rebuild);
                            checked_ring(pg);
                            check(pg.comm_name() == name,
                                  "the comm name changed: " + name + " then " + pg.comm_name());
                          }
                        }),
            "");
}

TEST_P(Reinit, KeptLinksCheckEveryMemberAndKeepCounting) {
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int) {
                          checked_all_reduce(pg, 5, 0);
                          const uint64_t before = pg.sequence_number();
                          pg.reinit(/*rebuild_links=*/false);
                          check(pg.sequence_number() == before + 1,
                                "the barrier of reinit(false) should be call #" + std::to_string(before));
                          checked_all_reduce(pg, 5, 1);
                          checked_ring(pg);
                        }),
            "");
}

TEST_P(Reinit, OperationsQueuedBeforeItFinishFirst) {
  EXPECT_EQ(with_groups(mode(), n(),
                        [&](ProcessGroup& pg, int rank) {
                          // Calls on the group itself (not the functional API) are queued.
                          std::vector<Tensor> tensors;
                          std::vector<WorkPtr> works;
                          for (int k = 0; k < 4; ++k) {
                            tensors.push_back(make_tensor(DType::kFloat64, 4097,
                                                          [&](int64_t i) { return rank * 3 + k + i; }));
                            works.push_back(pg.all_reduce(tensors.back(), ReduceOp::SUM));
                          }
                          pg.reinit(true);
                          for (int k = 0; k < 4; ++k) {
                            check(works[k]->is_completed(), "a queued all_reduce had not run before reinit");
                            works[k]->wait();
                            const int size = pg.size();
                            check_elements(
                                tensors[k], 0, 4097,
                                [&](int64_t i) { return 3.0 * size * (size - 1) / 2 + size * (k + i); },
                                "queued all_reduce " + std::to_string(k));
                          }
                          checked_all_reduce(pg, 33, 9);
                        }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Worlds, Reinit,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(1, 2, 3, 5)),
                         worlds_param_name);

class CommName : public Reinit {};

TEST_P(CommName, IsEqualOnEveryMemberAndDiffersBetweenGroups) {
  const int size = n();
  EXPECT_EQ(run_with_store(
                mode(), size,
                [&](Store& store, int rank) -> KeepAlive {
                  std::shared_ptr<Store> shared(&store, [](Store*) {});
                  ProcessGroupOptions options;
                  options.timeout = 30s;
                  auto a = create_process_group("tdist", std::make_shared<PrefixStore>("a", shared), rank,
                                                size, options);
                  auto b = create_process_group("tdist", std::make_shared<PrefixStore>("b", shared), rank,
                                                size, options);
                  for (const auto& g : {a, b}) {
                    const auto names = gather_text(*g, g->comm_name());
                    check(!names[0].empty(), "an empty comm name");
                    check(std::set<std::string>(names.begin(), names.end()).size() == 1,
                          "ranks disagree on the comm name: " + names[0] + " vs " + names.back());
                  }
                  check(a->comm_name() != b->comm_name(), "two groups share the name " + a->comm_name());
                  return std::make_shared<std::vector<Group>>(std::vector<Group>{a, b});
                },
                70s, 50s),
            "");
}

INSTANTIATE_TEST_SUITE_P(Worlds, CommName,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(1, 2, 8)),
                         worlds_param_name);

// A replaced rank: its group is destroyed (as with its process) and a new
// one is created for the same rank over the same store, while the others
// rebuild theirs (reinit). Both are the group's next generation, so they
// meet: collectives and messages carry the right data, and the comm name
// is the group's, also when rank 0 is the one replaced. Threads use
// create_process_group; forked processes the default group's
// init_process_group / destroy_process_group / reinit_process_group, as a
// restarted process would. Twice in a row, each time another rank.
class ReplacedRank : public Reinit {};

TEST_P(ReplacedRank, ANewGroupForTheRankMeetsTheOthersRebuild) {
  const int size = n();
  const bool processes = mode() == Mode::kProcesses;
  EXPECT_EQ(run_with_store(
                mode(), size,
                [&](Store& store, int rank) -> KeepAlive {
                  std::shared_ptr<Store> shared(&store, [](Store*) {});
                  ProcessGroupOptions options;
                  options.timeout = 30s;
                  auto create = [&]() -> Group {
                    if (!processes) {
                      return create_process_group("tdist", std::make_shared<PrefixStore>("g", shared), rank,
                                                  size, options);
                    }
                    InitProcessGroupOptions init;
                    init.store = shared;
                    init.rank = rank;
                    init.world_size = size;
                    init.timeout = 30s;
                    init_process_group(init);
                    return default_group();
                  };
                  Group pg = create();
                  checked_all_reduce(*pg, 1001, 0);
                  const std::string name = pg->comm_name();
                  for (int round = 1; round <= 2; ++round) {
                    const int replaced = round == 1 ? size - 1 : 0;
                    if (rank == replaced) {
                      if (processes) destroy_process_group();
                      pg.reset();
                      pg = create();
                    } else {
                      if (processes) {
                        reinit_process_group();
                      } else {
                        pg->reinit(true);
                      }
                    }
                    check(pg->sequence_number() == 0, "a call was counted before any was made");
                    checked_all_reduce(*pg, 1, round);
                    checked_all_reduce(*pg, 70001, round);
                    checked_ring(*pg);
                    const auto names = gather_text(*pg, pg->comm_name());
                    for (const auto& theirs : names) {
                      check(theirs == name, "round " + std::to_string(round) + ": comm name " + theirs +
                                                " instead of " + name);
                    }
                  }
                  if (processes) {
                    destroy_process_group();
                    return nullptr;
                  }
                  return pg;
                },
                90s, 40s),
            "");
}

INSTANTIATE_TEST_SUITE_P(Worlds, ReplacedRank,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(2, 3, 5)),
                         worlds_param_name);

// A store whose process dies (SIGKILL) right after it wrote a key ending in
// `trigger`: a rank killed at that point of its connect.
class DyingStore final : public Store {
 public:
  DyingStore(std::shared_ptr<Store> store, std::string trigger)
      : Store(store->timeout()), store_(std::move(store)), trigger_(std::move(trigger)) {}
  void set(const std::string& key, const Bytes& value) override {
    store_->set(key, value);
    if (key.ends_with(trigger_)) raise(SIGKILL);
  }
  using Store::set;
  Bytes get(const std::string& key) override { return store_->get(key); }
  int64_t add(const std::string& key, int64_t amount) override { return store_->add(key, amount); }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    return store_->compare_set(key, expected, desired);
  }
  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override { store_->wait(keys, timeout); }
  int64_t num_keys() override { return store_->num_keys(); }
  bool delete_key(const std::string& key) override { return store_->delete_key(key); }

 private:
  std::shared_ptr<Store> store_;
  std::string trigger_;
};

// Forks a process that creates rank `rank`'s group over the FileStore at
// `path` and dies at `trigger` of its connect; returns once it died there.
void die_in_connect(const std::string& path, int rank, int size, const std::string& trigger,
                    const ProcessGroupOptions& options) {
  const pid_t pid = fork();
  if (pid == 0) {
    try {
      auto store = std::make_shared<DyingStore>(std::make_shared<FileStore>(path), trigger);
      create_process_group("tdist", store, rank, size, options);
    } catch (...) {
    }
    _exit(3);  // it never wrote the trigger
  }
  check(pid > 0, "fork failed");
  int status = 0;
  check(waitpid(pid, &status, 0) == pid, "waitpid failed");
  check(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
        "rank " + std::to_string(rank) + "'s doomed process did not die at '" + trigger + "' of its connect");
}

// Every member agrees on one generation: each rank's count in the store is
// `expected`.
void check_generations(Store& store, int size, int64_t expected) {
  for (int r = 0; r < size; ++r) {
    const int64_t theirs = store.add("tdist/generation/" + std::to_string(r), 0);
    check(theirs == expected, "rank " + std::to_string(r) + " is at generation " + std::to_string(theirs) +
                                  ", expected " + std::to_string(expected));
  }
}

// Rank 1's process dies in the middle of its connect (issue 49), three
// times: in the group's creation once it published its TCP address (rank 0
// waits for its connection, rank 2 connects to a listener that is gone),
// in a rebuild once its TCP connections were made (the others wait for it
// in the shared memory's setup), and in a rebuild right after it entered
// the generation. Each time a new process takes its place, and the others'
// creation or rebuild, which began in the generation the dead process
// entered, moves on to the replacement's: every rank ends at the same
// generation, and the group sums and passes messages.
TEST(ReplacedRank, AProcessThatDiesInItsConnectDoesNotStrandTheOthers) {
  constexpr int kSize = 3;
  constexpr int kVictim = 1;
  const std::string path = temp_path("replaced_in_connect");
  const std::vector<std::string> triggers = {"tcp/addr/1", "shm/host/1", "/entered"};
  auto outcomes = run_forked(
      kSize,
      [&](int rank) {
        // Users not counted: the doomed processes open it too.
        auto store = std::make_shared<FileStore>(path);
        ProcessGroupOptions options;
        options.timeout = 30s;
        Group pg;
        int64_t generation = 0;
        for (size_t round = 0; round < triggers.size(); ++round) {
          if (rank == kVictim) {
            pg.reset();  // leaves the group (the others rebuild it)
            die_in_connect(path, rank, kSize, triggers[round], options);
            pg = create_process_group("tdist", store, rank, kSize, options);
          } else if (!pg) {
            pg = create_process_group("tdist", store, rank, kSize, options);
          } else {
            pg->reinit(true);
          }
          generation += 2;  // the dead process's and its replacement's
          check_generations(*store, kSize, generation);
          checked_all_reduce(*pg, 1001, static_cast<int>(round));
          checked_ring(*pg);
          // Nobody leaves before everyone checked (the victim's next round
          // begins by leaving).
          const std::string done = "checked/" + std::to_string(round);
          if (store->add(done, 1) == kSize) store->set(done + "/all", "1");
          store->wait({done + "/all"});
        }
      },
      120s);
  unlink(path.c_str());
  EXPECT_EQ(describe_failures(outcomes), "");
}

// A rank that rebuilds once more than the others waits for a generation
// they never reach: its rebuild fails at the timeout naming the ranks that
// are behind and their generation.
TEST(ReinitErrors, ARankAtAnotherGenerationIsNamed) {
  EXPECT_EQ(with_groups(
                Mode::kThreads, 3,
                [&](ProcessGroup& pg, int rank) {
                  pg.reinit(true);  // generation 2 everywhere
                  checked_all_reduce(pg, 3, 0);
                  // Rank 0 (which waits for the others' connections, bounded
                  // by the group's timeout) rebuilds alone.
                  if (rank != 0) return;
                  try {
                    pg.reinit(true);  // generation 3 on rank 0 only
                  } catch (const DistError& e) {
                    const std::string what = e.what();
                    check(what.find("connecting generation 3 of the group, but rank 1 is at generation 2, "
                                    "rank 2 is at generation 2") != std::string::npos,
                          what);
                    return;
                  }
                  check(false, "a rebuild without the other ranks returned");
                },
                2s),
            "");
}

// A member that never comes to the rebuild: the others' rendezvous times out,
// and from then on their group refuses every call, saying why.
TEST(ReinitErrors, AMissingMemberFailsTheRebuildAndLeavesTheGroupUnusable) {
  EXPECT_EQ(with_groups(
                Mode::kThreads, 3,
                [&](ProcessGroup& pg, int rank) {
                  checked_all_reduce(pg, 3, 0);
                  if (rank == 2) return;  // never rebuilds
                  bool failed = false;
                  try {
                    pg.reinit(true);
                  } catch (const DistError&) {
                    failed = true;
                  }
                  check(failed, "reinit returned without rank 2");
                  Tensor t = Tensor::zeros(DType::kFloat32, {2});
                  try {
                    pg.all_reduce(t, ReduceOp::SUM)->wait();
                  } catch (const DistBackendError& e) {
                    const std::string what = e.what();
                    check(what.find("all_reduce: this group has no connections: reinit_process_group could "
                                    "not rebuild them") != std::string::npos,
                          what);
                    return;
                  }
                  check(false, "a call on a group whose rebuild failed did not raise");
                },
                2s),
            "");
}

// Inside a completion callback the group cannot become idle (that thread
// must finish its operations): reinit raises instead of waiting forever,
// and the group goes on working.
TEST(ReinitErrors, InsideACompletionCallbackItRaisesInsteadOfWaitingForever) {
  EXPECT_EQ(with_groups(
                Mode::kThreads, 2,
                [&](ProcessGroup& pg, int rank) {
                  Tensor t = Tensor::zeros(DType::kFloat32, {4});
                  Tensor go = Tensor::zeros(DType::kInt32, {1});
                  if (rank == 1) {
                    // Rank 1 joins the all_reduce only once rank 0's callback
                    // is attached, so that it runs on the group's worker
                    // (attached to a finished future it would run inline).
                    pg.recv(go, 0, 3)->wait();
                    pg.all_reduce(t, ReduceOp::SUM)->wait();
                  } else {
                    std::string what;
                    auto chained = pg.all_reduce(t, ReduceOp::SUM)->get_future()->then([&](Future&) {
                      try {
                        pg.reinit(true);
                      } catch (const DistError& e) {
                        what = e.what();
                      }
                      return std::vector<Tensor>{};
                    });
                    pg.send(go, 1, 3)->wait();
                    chained->wait();
                    check(what.find("reinit_process_group inside an operation's completion callback would "
                                    "deadlock") != std::string::npos,
                          "reinit in a callback: '" + what + "'");
                  }
                  checked_all_reduce(pg, 9, 1);
                },
                20s),
            "");
}

// Two threads of one rank rebuilding at once (not a use the API supports,
// but it must not hang): each rebuild wakes the next.
TEST(ReinitErrors, TwoRebuildsOfOneRankEachFinish) {
  EXPECT_EQ(with_groups(
                Mode::kThreads, 1,
                [&](ProcessGroup& pg, int) {
                  std::thread other([&] { pg.reinit(true); });
                  pg.reinit(true);
                  other.join();
                  checked_all_reduce(pg, 3, 0);
                },
                20s),
            "");
}

}  // namespace
}  // namespace tdist::testing
