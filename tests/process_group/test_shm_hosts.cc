// Groups whose ranks span hosts (played by host identities): collectives
// run hierarchically (shared memory inside each host, TCP between hosts)
// with the same results as one flat group, unequal hosts fall back to
// TCP, and forcing shared memory across hosts or naming an unknown
// transport is an error (test_shm.cc: one host).

#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "pg_harness.h"
#include "shm_groups.h"
#include "tdist/errors.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

TEST(Shm, AGroupSpanningHostsFallsBackToTcpAndComputesTheSameResults) {
  // Ranks 0-1 pretend to be on host a, ranks 2-4 on host b.
  std::string path = temp_path("shm_mixed");
  auto outcomes = forked_groups(
      5, path, [&](int rank) { setenv("TDIST_HOST_ID", rank < 2 ? "a" : "b", 1); },
      [&](ProcessGroup& pg, Store&, int rank) {
        check(!uses_shm(pg), "a group across hosts must not use shared memory");
        check(!dynamic_cast<ProcessGroupTdist&>(pg).hierarchical(), "2 + 3 ranks cannot use the hierarchy");
        const int64_t n = 100'003;
        Tensor t = make_tensor(DType::kFloat64, n, [&](int64_t i) { return double((i % 7) * (rank + 1)); });
        pg.all_reduce(t, ReduceOp::SUM)->wait();
        for (int64_t i = 0; i < n; i += 997) check(real_at(t, i) == double((i % 7) * 15), "wrong all_reduce");
        Tensor in = make_tensor(DType::kInt32, 3, [&](int64_t i) { return double(rank * 10 + i); });
        Tensor out = Tensor::zeros(DType::kInt32, {15});
        pg.all_gather_into_tensor(out, in)->wait();
        for (int64_t i = 0; i < 15; ++i)
          check(real_at(out, i) == double((i / 3) * 10 + i % 3), "wrong all_gather");
      });
  EXPECT_EQ(describe_failures(outcomes), "");
  unlink(path.c_str());
}

// Runs `body` on 6 forked ranks playing 2 "hosts" x 3 ranks and 3 x 2 (the
// host is rank % hosts, so host order and rank order differ), with the
// default pipeline chunks and with chunks of `small_chunk` bytes, and the
// variables `env` set; every rank must run the hierarchy.
void on_six_ranks_across_hosts(const char* name, const char* small_chunk,
                               const std::function<void(ProcessGroup&, int)>& body,
                               const std::vector<std::pair<const char*, const char*>>& env = {}) {
  for (const char* chunk : {"", small_chunk})
    for (int hosts : {2, 3}) {
      std::string path = temp_path(name);
      auto outcomes = forked_groups(
          6, path,
          [&](int rank) {
            setenv("TDIST_HOST_ID", std::to_string(rank % hosts).c_str(), 1);
            if (*chunk != 0) setenv("TDIST_HIER_CHUNK_BYTES", chunk, 1);
            for (const auto& [variable, value] : env) setenv(variable, value, 1);
          },
          [&](ProcessGroup& pg, Store&, int rank) {
            check(dynamic_cast<ProcessGroupTdist&>(pg).hierarchical(), "expected the hierarchy");
            body(pg, rank);
          });
      EXPECT_EQ(describe_failures(outcomes), "") << hosts << " hosts, chunk bytes '" << chunk << "'";
      unlink(path.c_str());
    }
}

TEST(Shm, AllReduceAcrossHostsRunsHierarchicallyWithTheSameResults) {
  // 2 "hosts" x 3 ranks (ranks 0, 2, 4 on host a), and 3 x 2: shared memory
  // inside each host, TCP across. Every op and dtype class, odd counts, the
  // AVG and PREMUL_SUM special cases, bitwise identical on every rank. With
  // the default chunks (one per message here) and with 8 KiB chunks, so that
  // the stages overlap over up to a hundred chunks of uneven shares.
  on_six_ranks_across_hosts("shm_hier", "8192", [&](ProcessGroup& pg, int rank) {
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{100'003}}) {
      Tensor t = make_tensor(DType::kInt64, count, [&](int64_t i) { return double(i % 11 + rank); });
      pg.all_reduce(t, ReduceOp::SUM)->wait();
      for (int64_t i = 0; i < count; ++i) check(real_at(t, i) == double(6 * (i % 11) + 15), "wrong SUM");
      Tensor m = make_tensor(DType::kInt32, count, [&](int64_t i) { return double((i + rank) % 6); });
      pg.all_reduce(m, ReduceOp::MAX)->wait();
      for (int64_t i = 0; i < count; ++i) check(real_at(m, i) == 5.0, "wrong MAX");
      // Integer AVG truncates once: (sum of rank) / 6 = 15 / 6 = 2.
      Tensor a = make_tensor(DType::kInt64, count, [&](int64_t) { return double(rank); });
      pg.all_reduce(a, ReduceOp::AVG)->wait();
      for (int64_t i = 0; i < count; ++i) check(real_at(a, i) == 2.0, "wrong integer AVG");
      Tensor p = make_tensor(DType::kFloat64, count, [&](int64_t i) { return double(i % 3 + rank); });
      pg.all_reduce(p, ReduceOp::premul_sum(0.5))->wait();
      for (int64_t i = 0; i < count; ++i) {
        check(real_at(p, i) == 0.5 * double(6 * (i % 3) + 15), "wrong PREMUL_SUM");
      }
    }
    // Floating point: same bits on every rank (checked through a
    // second all_reduce of MIN and MAX of the bit patterns), for a message
    // that crosses hosts whole from every local rank (200 floats) and one
    // that crosses in pieces.
    for (int64_t count : {int64_t{200}, int64_t{4099}}) {
      Tensor f = make_tensor(DType::kFloat32, count, [&](int64_t i) { return 0.1 * double(i) / (rank + 1); });
      pg.all_reduce(f, ReduceOp::SUM)->wait();
      Tensor lo = f.clone();
      Tensor hi = f.clone();
      pg.all_reduce(lo, ReduceOp::MIN)->wait();
      pg.all_reduce(hi, ReduceOp::MAX)->wait();
      check(std::memcmp(lo.data(), f.data(), f.nbytes()) == 0 &&
                std::memcmp(hi.data(), f.data(), f.nbytes()) == 0,
            "float results differ between ranks");
    }
  });
}

// 2 "hosts" x 3 ranks and 3 x 2, hosts interleaved (rank % hosts), so host
// order and rank order differ: every rank's block must still land at its
// group rank's place, for even blocks, uneven ones (some empty), the list
// form and in place; in one chunk and in 4 KiB chunks (up to 196 of them,
// blocks ending in different chunks), pipelined. Inside a host each block
// is written in pieces, one per host, straight to their places.
void check_hierarchical_all_gather(const std::vector<std::pair<const char*, const char*>>& env) {
  on_six_ranks_across_hosts(
      "shm_hier_gather", "4096",
      [&](ProcessGroup& pg, int rank) {
        const int n = 6;
        auto value = [](int r, int64_t i) { return double(r * 1000 + i % 997); };
        for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{100'003}}) {
          Tensor in = make_tensor(DType::kInt64, count, [&](int64_t i) { return value(rank, i); });
          Tensor out = make_tensor(DType::kInt64, count * n, [](int64_t) { return -1.0; });
          pg.all_gather_into_tensor(out, in)->wait();
          for (int r = 0; r < n; ++r)
            for (int64_t i = 0; i < count; ++i)
              check(real_at(out, r * count + i) == value(r, i), "wrong block in all_gather_into_tensor");
          // The list form.
          std::vector<Tensor> list;
          for (int r = 0; r < n; ++r)
            list.push_back(make_tensor(DType::kInt64, count, [](int64_t) { return -1.0; }));
          pg.all_gather(list, in)->wait();
          for (int r = 0; r < n; ++r)
            for (int64_t i = 0; i < count; ++i)
              check(real_at(list[static_cast<size_t>(r)], i) == value(r, i), "wrong block in the list form");
          // In place: this rank's block already sits in the output.
          Tensor whole = make_tensor(DType::kInt64, count * n, [&](int64_t i) {
            return i / count == rank ? value(rank, i % count) : -1.0;
          });
          Tensor slot = whole.narrow(rank * count, count);
          pg.all_gather_into_tensor(whole, slot)->wait();
          for (int r = 0; r < n; ++r)
            for (int64_t i = 0; i < count; ++i)
              check(real_at(whole, r * count + i) == value(r, i), "wrong block in place");
        }
        // Uneven: rank r gives (r * 3) % 5 thousand floats: 0, 3, 1, 4, 2, 0
        // thousand (two empty), so with 4 KiB chunks the blocks end in
        // different chunks and some ranks cross nothing in the last ones.
        std::vector<int64_t> sizes;
        int64_t total = 0;
        for (int r = 0; r < n; ++r) total += sizes.emplace_back((r * 3) % 5 * 1000);
        Tensor in = make_tensor(DType::kFloat32, sizes[static_cast<size_t>(rank)],
                                [&](int64_t i) { return value(rank, i); });
        Tensor out = make_tensor(DType::kFloat32, total, [](int64_t) { return -1.0; });
        pg.all_gather_into_tensor_uneven(out, in, sizes)->wait();
        int64_t at = 0;
        for (int r = 0; r < n; ++r)
          for (int64_t i = 0; i < sizes[static_cast<size_t>(r)]; ++i)
            check(real_at(out, at++) == value(r, i), "wrong block in the uneven all_gather");
      },
      env);
}

// A list all_gather of 18 MiB in all across hosts runs as two hierarchical
// all_gathers, one per slice of every block, through a staging buffer
// (tdist_backend.cc); both slices must land at their places.
TEST(Shm, AListAllGatherOver16MiBAcrossHostsRunsInSlices) {
  on_six_ranks_across_hosts("shm_hier_slices", "1048576", [&](ProcessGroup& pg, int rank) {
    auto count_of = [](int r) { return int64_t{1536} * 1024 + r; };  // int16: 3 MiB and r elements
    auto value = [](int r, int64_t i) { return static_cast<int16_t>((r * 13 + i) % 32003); };
    Tensor in = Tensor::zeros(DType::kInt16, {count_of(rank)});
    auto* mine = static_cast<int16_t*>(in.data());
    for (int64_t i = 0; i < count_of(rank); ++i) mine[i] = value(rank, i);
    std::vector<Tensor> list;
    for (int r = 0; r < pg.size(); ++r) list.push_back(Tensor::zeros(DType::kInt16, {count_of(r)}));
    pg.all_gather(list, in)->wait();
    for (int r = 0; r < pg.size(); ++r) {
      const auto* got = static_cast<const int16_t*>(list[static_cast<size_t>(r)].data());
      for (int64_t i = 0; i < count_of(r); ++i) {
        if (got[i] != value(r, i)) {
          check(false, "block " + std::to_string(r) + " element " + std::to_string(i));
          return;
        }
      }
    }
  });
}

TEST(Shm, AllGatherAcrossHostsRunsHierarchicallyWithEveryBlockInPlace) {
  // The shared-memory stage's rounds through the buffers (ranks outnumber
  // cores here) ...
  check_hierarchical_all_gather({});
  // ... its ring of slots ...
  check_hierarchical_all_gather({{"TDIST_SHM_SINGLE_COPY", "0"}, {"TDIST_SHM_RING_BYTES", "1"}});
  // ... and single copy, each piece read from its owner's memory.
  check_hierarchical_all_gather({{"TDIST_SHM_SINGLE_COPY_MIN_BYTES", "1"}});
}

TEST(Shm, ReduceScatterAcrossHostsRunsHierarchicallyWithExactResults) {
  // Rank r's block b holds (i % 13 + r * b) at element i; every rank must
  // get op over all ranks of its own block: SUM, integer AVG (truncated
  // once), MAX, PREMUL_SUM; even blocks, uneven ones (some empty, several
  // 4 KiB chunks).
  on_six_ranks_across_hosts("shm_hier_rs", "4096", [&](ProcessGroup& pg, int rank) {
    const int n = 6;
    auto value = [](int r, int b, int64_t i) { return double(i % 13 + r * b); };
    auto sum_over_ranks = [&](int b, int64_t i) {
      double total = 0;
      for (int r = 0; r < n; ++r) total += value(r, b, i);
      return total;
    };
    for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{50'001}}) {
      Tensor in = make_tensor(DType::kInt64, count * n,
                              [&](int64_t i) { return value(rank, static_cast<int>(i / count), i % count); });
      Tensor out = make_tensor(DType::kInt64, count, [](int64_t) { return -1.0; });
      pg.reduce_scatter_tensor(out, in, ReduceOp::SUM)->wait();
      for (int64_t i = 0; i < count; ++i) check(real_at(out, i) == sum_over_ranks(rank, i), "wrong SUM");
      pg.reduce_scatter_tensor(out, in, ReduceOp::AVG)->wait();
      for (int64_t i = 0; i < count; ++i)
        check(real_at(out, i) == std::trunc(sum_over_ranks(rank, i) / n), "wrong integer AVG");
      pg.reduce_scatter_tensor(out, in, ReduceOp::MAX)->wait();
      for (int64_t i = 0; i < count; ++i) check(real_at(out, i) == value(n - 1, rank, i), "wrong MAX");
      Tensor f = make_tensor(DType::kFloat64, count * n,
                             [&](int64_t i) { return value(rank, static_cast<int>(i / count), i % count); });
      Tensor g = make_tensor(DType::kFloat64, count, [](int64_t) { return -1.0; });
      pg.reduce_scatter_tensor(g, f, ReduceOp::premul_sum(0.5))->wait();
      for (int64_t i = 0; i < count; ++i)
        check(real_at(g, i) == 0.5 * sum_over_ranks(rank, i), "wrong PREMUL_SUM");
    }
    std::vector<int64_t> sizes;
    int64_t total = 0;
    for (int r = 0; r < n; ++r) total += sizes.emplace_back((r * 3) % 5 * 1000);
    std::vector<int64_t> starts(1, 0);
    for (int r = 0; r < n; ++r) starts.push_back(starts.back() + sizes[static_cast<size_t>(r)]);
    Tensor in = make_tensor(DType::kFloat32, total, [&](int64_t i) {
      int b = 0;
      while (i >= starts[static_cast<size_t>(b) + 1]) ++b;
      return value(rank, b, i - starts[static_cast<size_t>(b)]);
    });
    Tensor out = make_tensor(DType::kFloat32, sizes[static_cast<size_t>(rank)], [](int64_t) { return -1.0; });
    pg.reduce_scatter_tensor_uneven(out, in, sizes, ReduceOp::SUM)->wait();
    for (int64_t i = 0; i < sizes[static_cast<size_t>(rank)]; ++i)
      check(real_at(out, i) == sum_over_ranks(rank, i), "wrong uneven SUM");
  });
}

TEST(Shm, BroadcastAcrossHostsRunsHierarchicallyFromEveryRoot) {
  // Every rank as the root in turn (its host first or not, any local
  // index), counts from one byte up to several 4 KiB chunks of pieces of
  // uneven sizes; every rank must end with the root's bytes, the root's own
  // left as they were.
  on_six_ranks_across_hosts("shm_hier_bcast", "4096", [&](ProcessGroup& pg, int rank) {
    auto value = [](int root, int64_t i) { return double((i * 7 + root * 31) % 127); };
    for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{5'001}, int64_t{100'003}}) {
      for (int root = 0; root < 6; ++root) {
        Tensor t =
            make_tensor(DType::kInt8, count, [&](int64_t i) { return rank == root ? value(root, i) : -1.0; });
        pg.broadcast(t, root)->wait();
        for (int64_t i = 0; i < count; ++i) check(real_at(t, i) == value(root, i), "wrong broadcast byte");
      }
    }
    Tensor d =
        make_tensor(DType::kFloat64, 9'999, [&](int64_t i) { return rank == 4 ? 0.5 * double(i) : -1.0; });
    pg.broadcast(d, 4)->wait();
    for (int64_t i = 0; i < 9'999; ++i) check(real_at(d, i) == 0.5 * double(i), "wrong broadcast double");
  });
}

TEST(Shm, AllToAllAcrossHostsRunsHierarchicallyWithEveryBlockInPlace) {
  // Rank r's block for rank d holds (r * 100 + d * 10 + i % 7) at element i:
  // equal splits (0, 1, odd and large blocks), the list form, and uneven
  // splits in which rank r sends (r + d) % 4 * 1000 elements to rank d (some
  // blocks empty, local and remote ones alike).
  on_six_ranks_across_hosts("shm_hier_a2a", "4096", [&](ProcessGroup& pg, int rank) {
    const int n = 6;
    auto value = [](int r, int d, int64_t i) { return double(r * 100 + d * 10 + i % 7); };
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{20'001}}) {
      Tensor in = make_tensor(DType::kInt32, count * n,
                              [&](int64_t i) { return value(rank, static_cast<int>(i / count), i % count); });
      Tensor out = make_tensor(DType::kInt32, count * n, [](int64_t) { return -1.0; });
      pg.all_to_all_single(out, in, {}, {})->wait();
      for (int r = 0; r < n; ++r)
        for (int64_t i = 0; i < count; ++i)
          check(real_at(out, r * count + i) == value(r, rank, i), "wrong block in all_to_all_single");
      std::vector<Tensor> ins;
      std::vector<Tensor> outs;
      for (int d = 0; d < n; ++d) {
        ins.push_back(make_tensor(DType::kInt32, count, [&](int64_t i) { return value(rank, d, i); }));
        outs.push_back(make_tensor(DType::kInt32, count, [](int64_t) { return -1.0; }));
      }
      pg.all_to_all(outs, ins)->wait();
      for (int r = 0; r < n; ++r)
        for (int64_t i = 0; i < count; ++i)
          check(real_at(outs[static_cast<size_t>(r)], i) == value(r, rank, i),
                "wrong block in the list form");
    }
    auto split = [](int r, int d) { return int64_t{(r + d) % 4 * 1000}; };
    std::vector<int64_t> sends;
    std::vector<int64_t> recvs;
    int64_t send_total = 0;
    int64_t recv_total = 0;
    for (int d = 0; d < n; ++d) {
      send_total += sends.emplace_back(split(rank, d));
      recv_total += recvs.emplace_back(split(d, rank));
    }
    Tensor in = make_tensor(DType::kFloat64, send_total, [&](int64_t i) {
      int d = 0;
      while (i >= split(rank, d)) i -= split(rank, d++);
      return value(rank, d, i);
    });
    Tensor out = make_tensor(DType::kFloat64, recv_total, [](int64_t) { return -1.0; });
    pg.all_to_all_single(out, in, recvs, sends)->wait();
    int64_t at = 0;
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < split(r, rank); ++i)
        check(real_at(out, at++) == value(r, rank, i), "wrong block in the uneven all_to_all");
  });
}

TEST(Shm, AllToAllWhoseOwnBlockSizesDisagreeIsAnErrorOnSharedMemoryAsOverTcp) {
  // Each rank sends itself one row but expects two (rank 0) or none
  // (rank 1): shared memory would copy the shorter and leave the rest stale.
  for (const char* mode : {"auto", "tcp"}) {
    std::string path = temp_path("shm_a2a_self");
    auto outcomes = forked_groups(
        2, path, [&](int) { setenv("TDIST_TRANSPORT", mode, 1); },
        [&](ProcessGroup& pg, Store&, int rank) {
          Tensor in = make_tensor(DType::kFloat32, 2, [](int64_t i) { return double(i); });
          Tensor out = Tensor::zeros(DType::kFloat32, {2});
          const std::vector<int64_t> recv{2, 0};  // rank 0 expects 2 rows from itself, rank 1 none
          try {
            pg.all_to_all_single(out, in, recv, {1, 1})->wait();
          } catch (const DistInvalidArgument& e) {
            const std::string expected = "rank " + std::to_string(rank) +
                                         " sends itself 4 bytes but expects " + (rank == 0 ? "8" : "0");
            check(std::string(e.what()).find(expected) != std::string::npos, std::string("got: ") + e.what());
            return;
          }
          throw std::runtime_error("no error");
        });
    EXPECT_EQ(describe_failures(outcomes), "") << mode;
    unlink(path.c_str());
  }
}

TEST(Shm, AKilledRankInAPipelinedHierarchicalAllReduceFailsEveryOtherRank) {
  // 2 "hosts" x 2 ranks (0 and 2 on one), all_reduce pipelined in 64 KiB
  // chunks (32 MiB: 512 of them): rank 2 dies mid-call. Its host peer and
  // both ranks of the other host, whichever stage they are in (shared memory
  // on this thread, TCP on the helper), must fail with a network error
  // naming it, directly or through the rank that aborted the group first.
  EXPECT_EQ(kill_one_rank_in_all_reduce(
                4, "kill_hier", size_t{8} << 20, 2,
                [](int rank) {
                  setenv("TDIST_HOST_ID", std::to_string(rank % 2).c_str(), 1);
                  setenv("TDIST_HIER_CHUNK_BYTES", "65536", 1);
                },
                [](ProcessGroup& pg) {
                  check(dynamic_cast<ProcessGroupTdist&>(pg).hierarchical(), "expected the hierarchy");
                }),
            "");
}

TEST(Shm, UnequalHostsFallBackToTcp) {
  std::string path = temp_path("shm_unequal");
  auto outcomes = forked_groups(
      3, path, [&](int rank) { setenv("TDIST_HOST_ID", rank == 0 ? "a" : "b", 1); },
      [&](ProcessGroup& pg, Store&, int rank) {
        auto& tdist_pg = dynamic_cast<ProcessGroupTdist&>(pg);
        check(!tdist_pg.hierarchical() && !tdist_pg.collectives_on_shared_memory(), "expected plain TCP");
        Tensor t = make_tensor(DType::kInt32, 7, [&](int64_t i) { return double(i * rank); });
        pg.all_reduce(t, ReduceOp::SUM)->wait();
        for (int64_t i = 0; i < 7; ++i) check(real_at(t, i) == double(3 * i), "wrong sum");
      });
  EXPECT_EQ(describe_failures(outcomes), "");
  unlink(path.c_str());
}

TEST(Shm, ForcingSharedMemoryAcrossHostsIsAnErrorNamingTheRank) {
  std::string path = temp_path("shm_forced");
  auto outcomes = forked_groups(
      2, path,
      [&](int rank) {
        setenv("TDIST_TRANSPORT", "shm", 1);
        setenv("TDIST_HOST_ID", rank == 0 ? "a" : "b", 1);
      },
      [&](ProcessGroup&, Store&, int) {});
  for (const auto& o : outcomes) {
    EXPECT_FALSE(o.ok);
    EXPECT_NE(o.error.find("TDIST_TRANSPORT=shm: rank 1 is not on the host of rank 0"), std::string::npos)
        << o.error;
  }
  unlink(path.c_str());
}

TEST(Shm, ABadTransportNameIsRejected) {
  std::string path = temp_path("shm_badname");
  auto outcomes = forked_groups(
      1, path, [&](int) { setenv("TDIST_TRANSPORT", "carrier-pigeon", 1); },
      [&](ProcessGroup&, Store&, int) {});
  ASSERT_FALSE(outcomes[0].ok);
  EXPECT_NE(outcomes[0].error.find("TDIST_TRANSPORT must be auto, tcp or shm, got 'carrier-pigeon'"),
            std::string::npos)
      << outcomes[0].error;
  unlink(path.c_str());
}

}  // namespace
}  // namespace tdist::testing
