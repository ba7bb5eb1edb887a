// revoke, shrink and agree (distributed.h): the store round under shrink and
// agree on its own (threads over a HashStore), then real groups whose ranks
// are killed before and during the calls (forked processes over a
// FileStore, which no rank hosts), a revoke that reaches a rank not in a
// call, a rank that never comes, and non-members. Every survivor's result
// is checked against what is computed here from the known survivors, and
// the shrunk group's all_reduce against sums computed here. Also over TCP
// (the tcp. copy of this suite).

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "pg_harness.h"
#include "process_group/fault_tolerance.h"
#include "process_group/tdist_backend.h"
#include "tdist/distributed.h"
#include "tdist/errors.h"
#include "tdist/file_store.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The flag rank r passes to agree: every bit but r's, so the AND of a set
// of ranks' flags has exactly their bits cleared.
int64_t flag_of(int old_rank) {
  return ~(int64_t{1} << old_rank);
}
int64_t and_of(const std::vector<int>& ranks) {
  int64_t out = -1;
  for (int r : ranks) out &= flag_of(r);
  return out;
}

// Checks that `shrunk` is the group of `survivors` (ranks of the old group,
// which were global ranks 0..n-1) with this rank (old rank `old_rank`) at
// its place, and that a SUM all_reduce on it gives the sums computed here.
void check_shrunk_group(ProcessGroup& shrunk, const std::vector<int>& survivors, int old_rank) {
  check(shrunk.size() == static_cast<int>(survivors.size()),
        "shrunk group has " + std::to_string(shrunk.size()) + " ranks, expected " +
            std::to_string(survivors.size()));
  check(shrunk.global_ranks() == survivors, "shrunk group's members are " +
                                                detail::rank_list(shrunk.global_ranks()) + ", expected " +
                                                detail::rank_list(survivors));
  const auto place = std::find(survivors.begin(), survivors.end(), old_rank) - survivors.begin();
  check(shrunk.rank() == static_cast<int>(place), "old rank " + std::to_string(old_rank) + " is new rank " +
                                                      std::to_string(shrunk.rank()) + ", expected " +
                                                      std::to_string(place));
  constexpr int64_t kCount = 1003;  // odd: every algorithm's uneven blocks
  Tensor t = make_tensor(DType::kFloat32, kCount, [&](int64_t i) { return (old_rank + 1) * (i % 7 + 1); });
  shrunk.all_reduce(t, ReduceOp::SUM)->wait();
  int64_t weight = 0;
  for (int r : survivors) weight += r + 1;
  check_elements(
      t, 0, kCount, [&](int64_t i) { return static_cast<double>(weight * (i % 7 + 1)); },
      "all_reduce on the shrunk group");
}

// Every member of `g` holds `value`: its MIN and MAX over the group equal it.
void check_same_everywhere(ProcessGroup& g, int64_t value, const std::string& what) {
  for (const ReduceOp& op : std::vector<ReduceOp>{ReduceOp::MIN, ReduceOp::MAX}) {
    std::vector<int64_t> v{value};
    g.all_reduce(Tensor::wrap(v), op)->wait();
    check(v[0] == value,
          what + ": " + std::to_string(value) + " here but " + std::to_string(v[0]) + " on another survivor");
  }
}

// Returns once `count` ranks arrived at `name` in `store`.
void store_barrier(Store& store, const std::string& name, int count) {
  if (store.add(name, 1) == count) store.set(name + "/all", "1");
  store.wait({name + "/all"});
}

// Runs fn(store, group, rank) on n forked ranks with a tdist group (60 s
// timeout, far beyond what these calls may take) over a FileStore; the
// ranks in `victims` must end by SIGKILL, the others return. Survivors meet
// at a store barrier before their groups go. `kill_after_join`, if given,
// is the value of the test hook TDIST_TESTONLY_FT_KILL_AFTER_JOIN in every
// rank ("R@K": rank R dies right after it joined the group's K-th shrink or
// agree).
std::string run_with_victims(int n, const std::vector<int>& victims,
                             const std::function<void(Store&, const Group&, int)>& fn,
                             const std::string& kill_after_join = "") {
  const std::string path = temp_path("fault_tolerance");
  auto outcomes = run_forked(
      n,
      [&](int rank) {
        // The library's test hook, set while the child has one thread.
        // NOLINTNEXTLINE(concurrency-mt-unsafe)
        if (!kill_after_join.empty()) setenv("TDIST_TESTONLY_FT_KILL_AFTER_JOIN", kill_after_join.c_str(), 1);
        auto store = std::make_shared<FileStore>(path, n);
        ProcessGroupOptions options;
        options.timeout = 60s;
        Group group = create_process_group("tdist", store, rank, n, options);
        fn(*store, group, rank);
        store_barrier(*store, "survivors_done", n - static_cast<int>(victims.size()));
      },
      90s);
  unlink(path.c_str());
  bool as_expected = true;
  for (const auto& o : outcomes) {
    const bool victim = std::find(victims.begin(), victims.end(), o.rank) != victims.end();
    as_expected = as_expected && (victim ? o.signal == SIGKILL : o.ok);
  }
  return as_expected ? "" : describe_failures(outcomes);
}

std::vector<int> all_but(int n, const std::vector<int>& gone) {
  std::vector<int> out;
  for (int r = 0; r < n; ++r) {
    if (std::find(gone.begin(), gone.end(), r) == gone.end()) out.push_back(r);
  }
  return out;
}

// Waits (up to 20 s) until this rank's group has seen `peer` die.
void await_death_seen(const Group& g, int peer) {
  auto& tdist_group = dynamic_cast<ProcessGroupTdist&>(*g);
  const auto deadline = Clock::now() + 20s;
  while (!tdist_group.peer_crashed(peer)) {
    check(Clock::now() < deadline, "rank " + std::to_string(peer) + "'s death was not seen within 20 s");
    std::this_thread::sleep_for(1ms);
  }
}

// ---- The store round alone ----

TEST(FaultToleranceRound, DecisionsRoundTripAndGarbageIsRefused) {
  const detail::Decision d{{0, 2, 5}, -7};
  EXPECT_EQ(detail::decode_decision(detail::encode_decision(d)), d);
  const detail::Decision empty{{}, -1};
  EXPECT_EQ(detail::decode_decision(detail::encode_decision(empty)), empty);
  EXPECT_THROW(detail::decode_decision("12"), DistStoreError);
  EXPECT_THROW(detail::decode_decision("x|1"), DistStoreError);
  EXPECT_THROW(detail::decode_decision("1|0,a"), DistStoreError);
}

// Rank 3 is known dead (it never comes), rank 2 is alive but late: ranks 0
// and 1 wait their timeout for it, then decide without it; rank 2, once
// the decision exists, is told it came too late.
TEST(FaultToleranceRound, KnownDeadLeftOutAtOnceLateRankRefused) {
  HashStore store;
  std::vector<detail::Decision> got(2);
  std::string late_error;
  auto outcomes = run_threads(3, [&](int rank) {
    auto dead = [](int r) { return r == 3; };
    if (rank == 2) {
      store.wait({"p/decision"}, 30s);
      late_error = error_of<DistBackendError>(
          [&] { detail::run_round(store, "p/", 2, 4, flag_of(2), dead, 10s, "agree"); }, "late rank");
      return;
    }
    got[static_cast<size_t>(rank)] =
        detail::run_round(store, "p/", rank, 4, flag_of(rank), dead, 300ms, "agree");
  });
  ASSERT_EQ(describe_failures(outcomes), "");
  const detail::Decision want{{0, 1}, and_of({0, 1})};
  EXPECT_EQ(got[0], want);
  EXPECT_EQ(got[1], want);
  EXPECT_NE(late_error.find("agree: rank 2 of the group came after the survivors had decided without it "
                            "(members: 0, 1)"),
            std::string::npos)
      << late_error;
}

// Every rank comes at once, many times: whoever decides, all adopt one
// decision, with every rank and the AND of their (random) flags.
TEST(FaultToleranceRound, RacingDecidersAgree) {
  constexpr int kRanks = 5;
  for (int trial = 0; trial < 40; ++trial) {
    HashStore store;
    std::mt19937_64 random(static_cast<uint64_t>(trial));
    std::vector<int64_t> flags(kRanks);
    int64_t want = -1;
    for (auto& f : flags) want &= (f = static_cast<int64_t>(random()));
    std::vector<detail::Decision> got(kRanks);
    const std::string prefix = "t" + std::to_string(trial) + "/";
    auto outcomes = run_threads(kRanks, [&](int rank) {
      got[static_cast<size_t>(rank)] = detail::run_round(
          store, prefix, rank, kRanks, flags[static_cast<size_t>(rank)], [](int) { return false; }, 30s,
          "agree");
    });
    ASSERT_EQ(describe_failures(outcomes), "");
    for (const auto& d : got) EXPECT_EQ(d, (detail::Decision{{0, 1, 2, 3, 4}, want})) << "trial " << trial;
  }
}

// ---- Real groups, ranks killed ----

struct KillCase {
  int ranks;
  int victim;
};

class KillBefore : public ::testing::TestWithParam<KillCase> {};

// The victim dies by SIGKILL between two calls; the survivors' next
// all_reduce fails naming it; they revoke, agree and shrink: the same
// value and membership everywhere, the victim left out, fast (its death
// is known: well under the 30 s timeout given), and the shrunk group sums
// correctly.
TEST_P(KillBefore, SurvivorsAgreeAndShrink) {
  const int n = GetParam().ranks;
  const int victim = GetParam().victim;
  const std::vector<int> survivors = all_but(n, {victim});
  EXPECT_EQ(
      run_with_victims(
          n, {victim},
          [&](Store& store, const Group& g, int rank) {
            std::vector<float> data(64, 1.0F);
            g->all_reduce(Tensor::wrap(data), ReduceOp::SUM)->wait();
            // Dying as soon as its call returned, the victim could cut off a
            // message of it that a peer still reads.
            store_barrier(store, "first_done", n);
            if (rank == victim) raise(SIGKILL);
            const std::string failed =
                error_of<DistError>([&] { g->all_reduce(Tensor::wrap(data), ReduceOp::SUM)->wait(); },
                                    "all_reduce after the kill");
            expect_in(failed, "rank " + std::to_string(victim));
            revoke(g);
            const auto start = Clock::now();
            const int64_t agreed = agree(flag_of(rank), g, 30s);
            Group shrunk = shrink(g, 30s);
            const auto took = Clock::now() - start;
            // Not a speed test: a wait for the dead victim would last the
            // 30 s timeout; anything well short of it means none happened.
            check(took < 20s,
                  "agree and shrink took " +
                      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) +
                      " ms although the victim's death was known");
            check(agreed == and_of(survivors), "agree returned " + std::to_string(agreed) + ", expected " +
                                                   std::to_string(and_of(survivors)));
            check_shrunk_group(*shrunk, survivors, rank);
            check_same_everywhere(*shrunk, agreed, "agree's value");
            // The revoked group stays revoked.
            error_of<DistError>([&] { g->barrier()->wait(); }, "barrier on the revoked group");
          }),
      "");
}

INSTANTIATE_TEST_SUITE_P(Processes, KillBefore,
                         ::testing::Values(KillCase{3, 1}, KillCase{4, 2}, KillCase{5, 0}, KillCase{5, 4}),
                         [](const auto& p) {
                           return std::to_string(p.param.ranks) + "ranks_victim" +
                                  std::to_string(p.param.victim);
                         });

class KillDuring : public ::testing::TestWithParam<int> {};

// Rank 1 dies right after it joined agree (the library's test hook), and
// with 4 or more ranks rank 2 right after it joined shrink; the lowest
// survivor is in the call meanwhile, the others join once they saw the
// death. Every survivor gets the AND of the survivors' flags only and the
// same group of the survivors.
TEST_P(KillDuring, AgreeAndShrinkLeaveOutRanksThatDieInThem) {
  const int n = GetParam();
  const int in_agree = 1;
  const int in_shrink = n >= 4 ? 2 : -1;
  std::vector<int> victims{in_agree};
  if (in_shrink >= 0) victims.push_back(in_shrink);
  const std::vector<int> after_agree = all_but(n, {in_agree});
  const std::vector<int> survivors = all_but(n, victims);
  EXPECT_EQ(run_with_victims(
                n, victims,
                [&](Store& store, const Group& g, int rank) {
                  // The first round's keys: "tdist/gen/1/ft/0/" of the group's
                  // store (the group's first generation, its round 0).
                  if (rank != 0 && rank != in_agree) {
                    store.wait({"tdist/gen/1/ft/0/in/" + std::to_string(in_agree)});
                    await_death_seen(g, in_agree);
                  }
                  const int64_t agreed = agree(flag_of(rank), g, 30s);
                  check(agreed == and_of(after_agree), "agree returned " + std::to_string(agreed) +
                                                           ", expected " +
                                                           std::to_string(and_of(after_agree)));
                  if (in_shrink >= 0 && rank != 0 && rank != in_shrink) {
                    store.wait({"tdist/gen/1/ft/1/in/" + std::to_string(in_shrink)});
                    await_death_seen(g, in_shrink);
                  }
                  Group shrunk = shrink(g, 30s);
                  check_shrunk_group(*shrunk, survivors, rank);
                  check_same_everywhere(*shrunk, agreed, "agree's value");
                },
                // agree is the group's round 0, shrink its round 1.
                in_shrink >= 0 ? "1@0,2@1" : "1@0"),
            "");
}

INSTANTIATE_TEST_SUITE_P(Processes, KillDuring, ::testing::Values(3, 4, 5),
                         [](const auto& p) { return std::to_string(p.param) + "ranks"; });

// The victim dies right after it joined agree while the others join as
// they come: whether its flag counts depends on who decides when, but every
// survivor returns the same value, one of the two possible.
TEST(KillDuringRace, AgreeReturnsOneValueEverywhere) {
  constexpr int kRanks = 4;
  constexpr int kVictim = 2;
  for (int trial = 0; trial < 3; ++trial) {
    EXPECT_EQ(run_with_victims(
                  kRanks, {kVictim},
                  [&](Store& store, const Group& g, int rank) {
                    const int64_t agreed = agree(flag_of(rank), g, 30s);
                    check(agreed == and_of({0, 1, 3}) || agreed == and_of({0, 1, 2, 3}),
                          "agree returned " + std::to_string(agreed));
                    store.set("agreed/" + std::to_string(rank), std::to_string(agreed));
                    for (int r : {0, 1, 3}) {
                      const std::string theirs = to_string(store.get("agreed/" + std::to_string(r)));
                      check(theirs == std::to_string(agreed), "rank " + std::to_string(r) + " agreed on " +
                                                                  theirs + ", this rank on " +
                                                                  std::to_string(agreed));
                    }
                  },
                  "2"),
              "")
        << "trial " << trial;
  }
}

// ---- A replaced rank ----

// Three ranks agree once; rank 2 dies and a new process (the fourth forked
// here, started only once the survivors saw the death) replaces it, creating
// the group anew while the survivors rebuild theirs. Then all agree and
// shrink again: the replacement and the survivors must meet in the same
// rounds (the rounds are counted per generation of the group, from 0), so
// every one gets the AND of all three flags, not the first round's decision,
// and the same group of all three.
TEST(ReplacedRank, TheReplacementAndTheSurvivorsMeetInTheSameRounds) {
  constexpr int kRanks = 3;
  constexpr int kVictim = 2;
  constexpr int kReplacement = kRanks;  // the forked process that becomes rank 2
  const std::string path = temp_path("ft_replaced");
  auto outcomes = run_forked(
      kRanks + 1,
      [&](int slot) {
        auto store = std::make_shared<FileStore>(path);
        ProcessGroupOptions options;
        options.timeout = 30s;
        const int rank = slot == kReplacement ? kVictim : slot;
        Group g;
        if (slot == kReplacement) {
          store->wait({"death_seen"}, 30s);
          g = create_process_group("tdist", store, rank, kRanks, options);
        } else {
          g = create_process_group("tdist", store, rank, kRanks, options);
          const int64_t first = agree(1, g, 30s);
          check(first == 1, "the first agree returned " + std::to_string(first));
          if (slot == kVictim) raise(SIGKILL);
          await_death_seen(g, kVictim);
          if (rank == 0) store->set("death_seen", "1");
          g->reinit(true);
        }
        // 10 s: a rank that waits for one that never comes ends the test.
        const int64_t agreed = agree(flag_of(rank), g, 10s);
        check(agreed == and_of({0, 1, 2}), "agree after the replacement returned " + std::to_string(agreed) +
                                               ", expected " + std::to_string(and_of({0, 1, 2})));
        Group shrunk = shrink(g, 10s);
        check_shrunk_group(*shrunk, {0, 1, 2}, rank);
        store_barrier(*store, "done", kRanks);
      },
      90s);
  unlink(path.c_str());
  bool as_expected = true;
  for (const auto& o : outcomes)
    as_expected = as_expected && (o.rank == kVictim ? o.signal == SIGKILL : o.ok);
  EXPECT_TRUE(as_expected) << describe_failures(outcomes);
}

// ---- Revoke, absent ranks, non-members ----

class Revoke : public ::testing::TestWithParam<Mode> {};

// Rank 0 revokes while rank 1 is blocked in an all_reduce and rank 2 is in
// no call: both fail (rank 2 at its next call), naming the revoke; then
// agree and shrink still work on the revoked group, with every rank in.
TEST_P(Revoke, ReachesRanksInAndOutOfCallsThenAgreeAndShrinkWork) {
  constexpr int kRanks = 3;
  EXPECT_EQ(run_with_store(
                GetParam(), kRanks,
                [&](Store& store, int rank) -> KeepAlive {
                  ProcessGroupOptions options;
                  options.timeout = 60s;
                  std::shared_ptr<Store> shared(&store, [](Store*) {});
                  Group g = create_process_group("tdist", std::make_shared<PrefixStore>("pg", shared), rank,
                                                 kRanks, options);
                  std::vector<float> data(16, 1.0F);
                  if (rank == 0) {
                    store.wait({"rank1_calling"});
                    revoke(g);
                    revoke(g);  // a second one changes nothing
                    store.set("revoked", "1");
                  } else if (rank == 1) {
                    store.set("rank1_calling", "1");
                  } else {
                    store.wait({"revoked"});
                  }
                  if (rank != 0) {
                    const std::string e = error_of<DistError>(
                        [&] { g->all_reduce(Tensor::wrap(data), ReduceOp::SUM)->wait(); }, "all_reduce");
                    expect_in(e, "revoke");
                  }
                  const std::string later =
                      error_of<DistError>([&] { g->barrier()->wait(); }, "barrier after the revoke");
                  expect_in(later, "revoke");
                  const int64_t agreed = agree(flag_of(rank), g, 30s);
                  check(agreed == and_of({0, 1, 2}), "agree returned " + std::to_string(agreed));
                  Group shrunk = shrink(g, 30s);
                  check_shrunk_group(*shrunk, {0, 1, 2}, rank);
                  return shrunk;
                },
                100s, 80s),
            "");
}

INSTANTIATE_TEST_SUITE_P(Modes, Revoke, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& p) { return std::string(mode_name(p.param)); });

// Rank 2 is alive but does not come: ranks 0 and 1 go on without it after
// their 300 ms; when it comes, shrink tells it it came too late.
TEST(FaultTolerance, RankThatDoesNotComeIsLeftOutAfterTheTimeout) {
  constexpr int kRanks = 3;
  EXPECT_EQ(run_with_store(
                Mode::kThreads, kRanks,
                [&](Store& store, int rank) -> KeepAlive {
                  ProcessGroupOptions options;
                  options.timeout = 60s;
                  std::shared_ptr<Store> shared(&store, [](Store*) {});
                  Group g = create_process_group("tdist", std::make_shared<PrefixStore>("pg", shared), rank,
                                                 kRanks, options);
                  if (rank == 2) {
                    store.wait({"shrunk"}, 30s);  // within the run's deadline
                    const std::string e =
                        error_of<DistBackendError>([&] { shrink(g, 30s); }, "shrink of the late rank");
                    expect_in(e,
                              "shrink: rank 2 of the group came after the survivors had decided without it");
                    return g;
                  }
                  // Rank 1 may adopt what rank 0 decided at the end of its
                  // own 300 ms, or the other way round: how long each waited
                  // depends on when the other came.
                  Group shrunk = shrink(g, 300ms);
                  check_shrunk_group(*shrunk, {0, 1}, rank);
                  if (rank == 0) store.set("shrunk", "1");
                  return std::make_shared<std::vector<Group>>(std::vector<Group>{g, shrunk});
                },
                60s, 60s),
            "");
}

// A process outside a group gets DistInvalidArgument from all three; the
// members shrink it; the shrunk group goes with the default group.
TEST(FaultTolerance, NonMembersRefusedShrunkGroupDestroyedWithTheWorld) {
  constexpr int kRanks = 3;
  EXPECT_EQ(run_with_store(
                Mode::kProcesses, kRanks,
                [&](Store& store, int rank) -> KeepAlive {
                  std::shared_ptr<Store> shared(&store, [](Store*) {});
                  InitProcessGroupOptions init;
                  init.store = shared;
                  init.rank = rank;
                  init.world_size = kRanks;
                  init.timeout = 60s;
                  init_process_group(init);
                  Group sub = new_group({0, 2});
                  if (rank == 1) {
                    expect_in(error_of<DistInvalidArgument>([&] { revoke(sub); }, "revoke"),
                              "revoke: this process is not a member of the group (global ranks 0, 2)");
                    expect_in(error_of<DistInvalidArgument>([&] { shrink(sub); }, "shrink"),
                              "shrink: this process is not a member");
                    expect_in(error_of<DistInvalidArgument>([&] { agree(1, sub); }, "agree"),
                              "agree: this process is not a member");
                  } else {
                    error_of<DistInvalidArgument>([&] { agree(1, sub, 0ms); }, "agree with a zero timeout");
                    Group shrunk = shrink(sub, 30s);
                    check(shrunk->size() == 2 && shrunk->global_ranks() == std::vector<int>{0, 2},
                          "shrink of a whole subgroup changed it");
                    std::vector<int32_t> v{rank + 1};
                    all_reduce(Tensor::wrap(v), ReduceOp::SUM, shrunk);
                    check(v[0] == 4, "all_reduce on the shrunk subgroup gave " + std::to_string(v[0]));
                    destroy_process_group();
                    expect_in(error_of<DistError>([&] { all_reduce(Tensor::wrap(v), ReduceOp::SUM, shrunk); },
                                                  "all_reduce on the shrunk group after destroy"),
                              "destroyed");
                    return shrunk;
                  }
                  destroy_process_group();
                  return nullptr;
                },
                60s, 60s),
            "");
}

}  // namespace
}  // namespace tdist::testing
