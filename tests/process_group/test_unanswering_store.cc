// A group whose store stops answering (its host stopped, as a SIGSTOPped
// rank 0 that hosts the job's TCPStore) while one rank never comes to a
// call: the others' call still times out at the group's timeout, whatever
// the store does, and names the rank that never came (issue 49). The store
// here does what torch's TCPStore client does against a stopped host: each
// operation waits out the store's own timeout and ignores the cap tdist's
// TCPStore client honours (StoreDeadlineScope).

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "pg_harness.h"
#include "process_group/tdist_backend.h"
#include "tdist/errors.h"
#include "tdist/file_store.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

// A FileStore that, once frozen, answers nothing: every operation waits
// `hang` and raises a store timeout.
class FreezingStore final : public Store {
 public:
  FreezingStore(std::shared_ptr<Store> inner, std::chrono::milliseconds hang)
      : inner_(std::move(inner)), hang_(hang) {}
  void freeze() { frozen_ = true; }

  void set(const std::string& key, const Bytes& value) override {
    stall("set");
    inner_->set(key, value);
  }
  using Store::set;
  Bytes get(const std::string& key) override {
    stall("get");
    return inner_->get(key);
  }
  int64_t add(const std::string& key, int64_t amount) override {
    stall("add");
    return inner_->add(key, amount);
  }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    stall("compare_set");
    return inner_->compare_set(key, expected, desired);
  }
  bool check(const std::vector<std::string>& keys) override {
    stall("check");
    return inner_->check(keys);
  }
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    stall("wait");
    inner_->wait(keys, timeout);
  }
  int64_t num_keys() override {
    stall("num_keys");
    return inner_->num_keys();
  }
  bool delete_key(const std::string& key) override {
    stall("delete_key");
    return inner_->delete_key(key);
  }

 private:
  void stall(const char* op) const {
    if (!frozen_) return;
    // A stopped server never answers: the client waits out its timeout.
    std::this_thread::sleep_for(hang_);
    throw DistStoreTimeoutError(std::string("FreezingStore ") + op + ": no answer in " +
                                std::to_string(hang_.count()) + " ms");
  }
  std::shared_ptr<Store> inner_;
  std::chrono::milliseconds hang_;
  std::atomic<bool> frozen_{false};
};

// An error's text without where it names the rank that raised it ("rank
// 1: ...") or a rank that passed its own error on ("rank 0 aborted the
// group: ..."): what is left names the rank blamed.
std::string without_relays(const std::string& what) {
  static const std::regex relays("(^|: )rank [0-9]+: |rank [0-9]+ aborted the group: ");
  return std::regex_replace(what, relays, "$1");
}

// Forked ranks over each transport; the last rank stays away from
// all_reduce #1 (until the others are done) and every store freezes once
// call #0 is done everywhere. The others must time out within the group's
// 2 s and a grace far below the store's 20 s hang, naming the missing rank
// and no other.
struct Case {
  const char* transport;
  int size;
  int hosts;  // > 1: TDIST_HOST_ID plays hosts, and the group runs the hierarchy
};

void expect_only_the_missing_rank_named(const Case& c) {
  constexpr auto kTimeout = 2000ms;
  constexpr auto kGrace = 3s;  // a deadline, not a measurement: the store would add 20 s per note
  const int missing = c.size - 1;
  const std::string path = temp_path("frozen");
  int gate[2];
  ASSERT_EQ(pipe(gate), 0);
  auto outcomes = run_forked(
      c.size,
      [&](int rank) {
        // NOLINTBEGIN(concurrency-mt-unsafe): a forked child, before its group's threads
        setenv("TDIST_TRANSPORT", c.transport, 1);
        if (c.hosts > 1) setenv("TDIST_HOST_ID", std::to_string(rank % c.hosts).c_str(), 1);
        // NOLINTEND(concurrency-mt-unsafe)
        auto store = std::make_shared<FreezingStore>(std::make_shared<FileStore>(path, c.size), 20s);
        ProcessGroupOptions options;
        options.timeout = kTimeout;
        auto pg = create_process_group("tdist", store, rank, c.size, options);
        if ((c.hosts > 1) != dynamic_cast<ProcessGroupTdist&>(*pg).hierarchical()) {
          std::fprintf(stderr, "rank %d: the group %s the hierarchy\n", rank,
                       c.hosts > 1 ? "does not run" : "runs");
          _exit(2);
        }
        Tensor t = Tensor::zeros(DType::kFloat32, {1000});
        pg->barrier()->wait();  // call #0 everywhere: the group is up
        store->freeze();
        if (rank == missing) {
          std::vector<char> ones(static_cast<size_t>(missing));
          size_t got = 0;
          while (got < ones.size()) {
            const ssize_t n = read(gate[0], ones.data() + got, ones.size() - got);
            if (n <= 0) break;
            got += static_cast<size_t>(n);
          }
          _exit(0);  // the group cannot end in order without the others' store
        }
        const auto began = SteadyClock::now();
        std::string what;
        try {
          pg->all_reduce(t, ReduceOp::SUM)->wait();
        } catch (const DistError& e) {
          what = e.what();
        }
        const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - began);
        const char one = 1;
        (void)!write(gate[1], &one, 1);
        // The group cannot shut down in order on a store that does not
        // answer: what went wrong goes to stderr, and the rank ends here.
        std::string problem;
        const std::string blamed = without_relays(what);
        if (!std::regex_search(what, std::regex("Timed out after 2000 ms waiting for rank " +
                                                std::to_string(missing) + "($|[^0-9])")))
          problem = "rank " + std::to_string(missing) + " is not named as the rank waited for";
        for (int healthy = 0; healthy < missing; ++healthy) {
          if (healthy != rank && blamed.find("rank " + std::to_string(healthy)) != std::string::npos)
            problem = "names rank " + std::to_string(healthy) + ", which is healthy";
        }
        if (took >= kTimeout + kGrace) problem = "took " + std::to_string(took.count()) + " ms";
        if (!problem.empty()) {
          std::fprintf(stderr, "rank %d (%s, %d hosts): %s: '%s'\n", rank, c.transport, c.hosts,
                       problem.c_str(), what.c_str());
        }
        std::fflush(stderr);
        _exit(problem.empty() ? 0 : 1);
      },
      60s);
  close(gate[0]);
  close(gate[1]);
  unlink(path.c_str());
  EXPECT_EQ(describe_failures(outcomes), "") << c.transport << ", " << c.hosts << " hosts";
}

TEST(PgErrors, AStoreThatStopsAnsweringDoesNotDelayATimeoutNorHideTheMissingRank) {
  expect_only_the_missing_rank_named({"auto", 3, 1});
  expect_only_the_missing_rank_named({"tcp", 3, 1});
}

// 2 hosts x 2 ranks (ranks 0 and 2 on one): rank 0 waits in the crossing
// for rank 1, which waits in its host's shared memory for rank 3. Only
// rank 1's waiting notice, sent through the subset of the hierarchy to the
// whole group, tells rank 0 that rank 1 is in the call.
TEST(PgErrors, AcrossHostsAStoppedStoreStillLetsTheWaitingNoticesNameTheMissingRank) {
  expect_only_the_missing_rank_named({"auto", 4, 2});
}

}  // namespace
}  // namespace tdist::testing
