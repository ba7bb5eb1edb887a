// Single copy's writes into a peer's memory (process_vm_writev): a rank
// that fails a call must not get its memory back while a peer still writes
// into it, and a writer must stop once the group is aborted.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "algorithms/shm/shm_common.h"
#include "test_harness.h"
#include "transport/shm/shm_group.h"

namespace tdist::testing {
namespace {

namespace shm = transport::shm;
using algorithms::shm::detail::Call;

// Many slices, so that the target sees the first one land long before the
// last would.
constexpr size_t kBytes = size_t{256} << 20;
constexpr uint8_t kWritten = 0x11;
constexpr uint8_t kSentinel = 0xab;

TEST(ShmWrites, AFailingRankGetsItsMemoryBackOnlyOnceNoPeerWritesIntoIt) {
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    SCOPED_TRACE(mode_name(mode));
    std::string failures = with_store_and_group(
        mode, 2,
        [&](Store& store, Group& g) {
          const int rank = g.rank();
          auto group = shm::ShmGroup::connect(store, rank, 2, 60s, "writes/");
          check(group->single_copy(), "single copy is not available here");
          const std::string op = "broadcast";  // the context views it
          const auto ctx = g.call(op);
          Call call{ctx, *group};
          if (rank == 1) {
            std::vector<uint8_t> target(kBytes, 0);
            store.set("address", to_bytes(std::to_string(reinterpret_cast<uintptr_t>(target.data()))));
            // Fail as soon as the first slice has landed.
            const auto* first = reinterpret_cast<const std::atomic<uint8_t>*>(target.data());
            const auto give_up = std::chrono::steady_clock::now() + 60s;
            while (first->load(std::memory_order_acquire) != kWritten) {
              check(std::chrono::steady_clock::now() < give_up, "rank 0's first slice never landed");
            }
            algorithms::shm::detail::abort_group(
                *group, std::make_exception_ptr(DistTimeoutError("broadcast: timed out (test)")));
            algorithms::shm::detail::await_writers(ctx, *group);
            // The slices that had landed when we got our memory back...
            using algorithms::shm::detail::kWriteSliceBytes;
            size_t landed_slices = 0;
            while (landed_slices < kBytes / kWriteSliceBytes &&
                   target[(landed_slices + 1) * kWriteSliceBytes - 1] == kWritten)
              ++landed_slices;
            // Nothing may land from here on: the writer stopped.
            std::memset(target.data(), kSentinel, kBytes);
            store.wait({"writer_done"});
            // ... are all the writer wrote: it counts 2 per slice, and 2 for
            // the attempt that saw the abort.
            const uint64_t written_slices = (group->writing(0).seq.load() - 2) / 2;
            check(written_slices == landed_slices, "rank 0 wrote " + std::to_string(written_slices) +
                                                       " slices, " + std::to_string(landed_slices) +
                                                       " had landed when await_writers returned");
            size_t landed = 0;
            for (uint8_t b : target) landed += b != kSentinel ? 1 : 0;
            check(landed == 0, std::to_string(landed) + " bytes were written after await_writers returned");
          } else {
            std::vector<uint8_t> source(kBytes, kWritten);
            auto* address =
                reinterpret_cast<void*>(static_cast<uintptr_t>(std::stoull(to_string(store.get("address")))));
            bool stopped = false;
            try {
              call.write_to(1, address, source.data(), kBytes);
            } catch (const DistTimeoutError& e) {
              stopped = std::string(e.what()).find("rank 1 aborted the group") != std::string::npos;
            }
            store.set("writer_done", to_bytes("1"));
            check(stopped, "the writer wrote all of it instead of stopping at the abort");
          }
        },
        120s);
    EXPECT_EQ(failures, "");
  }
}

}  // namespace
}  // namespace tdist::testing
