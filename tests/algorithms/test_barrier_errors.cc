// The barrier's guarantee, and what a call does when a peer never comes
// (timeout) or dies (network error).

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

#include "algorithms/tuning/tcp_model.h"
#include "tdist/errors.h"
#include "test_harness.h"

namespace tdist::testing {
namespace {

// Counters visible to threads and to forked children alike.
class SharedCounters {
 public:
  explicit SharedCounters(size_t n) : n_(n) {
    void* memory = mmap(nullptr, n * sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::runtime_error("mmap failed");
    counters_ = static_cast<std::atomic<int>*>(memory);
    for (size_t i = 0; i < n; ++i) new (&counters_[i]) std::atomic<int>(0);
  }
  ~SharedCounters() { munmap(counters_, n_ * sizeof(std::atomic<int>)); }
  SharedCounters(const SharedCounters&) = delete;
  SharedCounters& operator=(const SharedCounters&) = delete;
  std::atomic<int>& operator[](size_t i) { return counters_[i]; }

 private:
  size_t n_;
  std::atomic<int>* counters_;
};

using BarrierTest = GroupTest;

TEST_P(BarrierTest, NoRankLeavesBeforeEveryRankHasEntered) {
  constexpr size_t kRounds = 20;
  SharedCounters entered(kRounds);
  EXPECT_EQ(with_group(mode(), n(),
                       [&](Group& g) {
                         for (size_t round = 0; round < kRounds; ++round) {
                           entered[round].fetch_add(1);
                           algorithms::barrier(g.call("barrier"), algorithms::BarrierAlgo::kDissemination);
                           const int seen = entered[round].load();
                           check(seen == g.size(), "barrier round " + std::to_string(round) +
                                                       ": left after only " + std::to_string(seen) + " of " +
                                                       std::to_string(g.size()) + " ranks entered");
                         }
                       }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Groups, BarrierTest, ::testing::ValuesIn(group_params()), group_param_name);

TEST(CollectiveErrors, TimeoutNamesOpCallTimeoutAndPendingRankThenTheGroupIsAborted) {
  EXPECT_EQ(with_group(
                Mode::kThreads, 2,
                [](Group& g) {
                  if (g.rank() == 1) return;  // never joins the call
                  float data[3] = {1, 2, 3};
                  try {
                    algorithms::all_reduce(g.call("all_reduce", 300ms), data, 3, DType::kFloat32,
                                           ReduceOp::SUM, algorithms::AllReduceAlgo::kRecursiveDoubling);
                    throw std::runtime_error("no timeout");
                  } catch (const DistTimeoutError& e) {
                    check(std::string(e.what()) ==
                              "all_reduce (call #1 in this group): Timed out after 300 ms waiting for rank 1",
                          std::string("unexpected message: ") + e.what());
                  }
                  // The transport was aborted, so nothing pending can write into freed buffers and
                  // later calls fail at once with the same error.
                  try {
                    algorithms::barrier(g.call("barrier"));
                    throw std::runtime_error("the group still works after a timeout");
                  } catch (const DistTimeoutError& e) {
                    check(std::string(e.what()).find("Timed out after 300 ms") != std::string::npos,
                          std::string("unexpected message: ") + e.what());
                  }
                }),
            "");
}

TEST(CollectiveErrors, TimeoutListsEveryPendingRank) {
  EXPECT_EQ(
      with_group(
          Mode::kThreads, 4,
          [](Group& g) {
            if (g.rank() != 0) return;
            std::vector<uint8_t> out(8);
            uint8_t in = 1;
            try {
              algorithms::gather(g.call("gather", 200ms), &in, out.data(), {1, 1, 1, 1}, 0,
                                 algorithms::GatherAlgo::kLinear);
              throw std::runtime_error("no timeout");
            } catch (const DistTimeoutError& e) {
              check(std::string(e.what()) ==
                        "gather (call #1 in this group): Timed out after 200 ms waiting for ranks 1, 2, 3",
                    std::string("unexpected message: ") + e.what());
            }
          }),
      "");
}

// A peer that dies mid-job: the survivors get the transport's
// DistNetworkError, with the op put in, long before their timeout.
TEST(CollectiveErrors, APeerThatDiesRaisesTheTransportsNetworkError) {
  constexpr int kRanks = 3;
  const std::string path = temp_path("algorithms_dead_peer");
  EXPECT_EQ(
      run_ranks(
          Mode::kProcesses, kRanks,
          [&](int rank) {
            FileStore store(path, kRanks);
            transport::TcpOptions options;
            options.timeout = 30s;
            auto t = transport::connect_tcp(store, rank, kRanks, options);
            if (rank == 2) _exit(0);  // dies without a goodbye
            Group g(*t);
            std::vector<float> data(1000, 1.0f);
            try {
              algorithms::all_reduce(g.call("all_reduce", 30s), data.data(), data.size(), DType::kFloat32,
                                     ReduceOp::SUM, algorithms::AllReduceAlgo::kRing);
              throw std::runtime_error("no error although rank 2 died");
            } catch (const DistTimeoutError& e) {
              throw std::runtime_error(std::string("timed out instead of a network error: ") + e.what());
            } catch (const DistNetworkError& e) {
              const std::string what = e.what();
              // The transport's messages start with the reporting rank; the
              // call adds the op.
              check(what.rfind("rank " + std::to_string(rank) + ": all_reduce (call #", 0) == 0,
                    "not the transport's message with the op: " + what);
            }
          },
          60s),
      "");
  // The FileStore removes its file when its last client closes it; rank 2
  // died without closing.
  unlink(path.c_str());
}

}  // namespace
}  // namespace tdist::testing
