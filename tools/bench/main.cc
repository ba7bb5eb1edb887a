// tdist-bench: measures tdist's collectives the way nccl-tests measures
// NCCL's: for each op and message size, the mean time of one operation, the
// algorithm bandwidth (size / time) and the bus bandwidth (algbw x the op's
// factor), and with --check the number of wrong elements. docs/benchmark.md
// explains the columns.
//
//     tdistrun --standalone --nproc-per-node 4 build/bin/tdist-bench --op all --check
//     build/bin/tdist-bench --nproc 4 --op all_reduce -b 8 -e 64M --json

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_ops.h"
#include "launch.h"
#include "options.h"
#include "report.h"
#include "runner.h"
#include "tdist/distributed.h"
#include "tdist/errors.h"
#include "tdist/logging.h"
#include "tdist/rendezvous.h"
#include "tdist/spawn.h"
#include "tdist/trace.h"

namespace tdist::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Exit codes: wrong results are told apart from failures so that the local
// launcher knows whether the other ranks are still worth waiting for.
constexpr int kExitWrongResults = 1;
constexpr int kExitFailure = 2;

int64_t sum_over_ranks(int64_t value) {
  std::vector<int64_t> buffer{value};
  all_reduce(Tensor::wrap(buffer), ReduceOp::SUM);
  return buffer[0];
}

// TDIST_BENCH_TEST_CORRUPT_RANK=R makes rank R spoil one element of every
// result it checks, after the op and before the check: tests/bench uses it
// to prove that --check finds wrong results and fails the run. Not for use
// outside tests (docs/benchmark.md).
int corrupt_rank() {
  const char* value = std::getenv("TDIST_BENCH_TEST_CORRUPT_RANK");  // NOLINT(concurrency-mt-unsafe)
  return value == nullptr || *value == '\0' ? -1 : std::atoi(value);
}

// Freshly started ranks often share one core until the scheduler spreads
// them over the cores, some 10 ms later (measured on 2 vCPUs: an 8 B
// broadcast took 11-90 us per call then, 1-4 us after). Figures taken
// meanwhile measure the scheduler, not the library; Open MPI avoids it by
// binding ranks to cores. So run small broadcasts for this long first; rank
// 0's clock decides, so every rank runs the same number.
constexpr auto kSettle = std::chrono::milliseconds(100);

void settle() {
  const auto until = Clock::now() + kSettle;
  std::vector<int32_t> go{1};
  for (;;) {
    if (get_rank() == 0) go[0] = Clock::now() < until ? 1 : 0;
    broadcast(Tensor::wrap(go), 0);
    if (go[0] == 0) return;
  }
}

// The algorithm of the op's last call, from the flight recorder: its last
// entry but the closing barrier (unless the op is a barrier).
std::string last_algorithm(BenchOp op) {
  const auto trace = nlohmann::json::parse(trace_json());
  const auto& entries = trace["entries"];
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (op != BenchOp::kBarrier && it->value("op", "") == "barrier") continue;
    return it->value("algorithm", "");
  }
  return "";
}

Row measure(BenchOp op, const Layout& layout, const BenchOptions& o) {
  Row row;
  row.op = op;
  row.dtype = o.dtype;
  row.reduce_op = o.reduce_op;
  row.world_size = get_world_size();
  row.layout = layout;

  OpRunner runner(op, o.dtype, o.reduce_op, layout, o.batch_p2p);
  if (o.check) {
    // A separate run before the timed ones, so checking costs no timed time
    // and its values cannot drift through repeated in-place reductions.
    runner.prepare_check();
    runner.run();
    if (corrupt_rank() == get_rank()) runner.corrupt_for_test();
    const int64_t local = runner.count_errors();
    runner.zero();
    row.errors = sum_over_ranks(local);
  }
  for (int i = 0; i < o.warmup; ++i) runner.run();

  // The statistic is the mean: the time of `iters` back-to-back operations
  // between two barriers, divided by iters, measured on rank 0. It is what
  // nccl-tests and the peer benchmarks of tools/compare report, so the
  // figures line up; back-to-back operations also include any pipelining a
  // library does across calls, as a training loop would see it. The closing
  // barrier makes rank 0 wait for the slowest rank, at the cost of one
  // barrier's latency spread over the iterations.
  barrier();
  const auto start = Clock::now();
  for (int i = 0; i < o.iters; ++i) runner.run();
  barrier();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  row.time_us = seconds / o.iters * 1e6;
  if (get_rank() == 0) row.algorithm = last_algorithm(op);
  return row;
}

// Leaves in an order that lets every rank finish cleanly. A rank that
// destroys its group makes its transport tell every peer the group was
// aborted, and a peer still inside its last operation fails on that; so no
// rank destroys its group before all are done, which a store barrier (not
// the transport) tells. Rank 0 hosts the store: it goes last.
void leave_together(Store& store, int rank, int world_size) {
  // Nothing is in flight from here on, yet each peer's transport logs that
  // the first rank to leave "aborted the group"; at the default level that
  // is noise on every clean run, so it is hushed (an explicitly chosen level
  // is left alone).
  if (log_level() == LogLevel::kWarning) set_log_level(LogLevel::kError);
  if (store.add("tdist-bench/done", 1) == world_size) store.set("tdist-bench/gate", "1");
  store.wait({"tdist-bench/gate"});
  destroy_process_group();
  if (rank != 0) {
    if (store.add("tdist-bench/left", 1) == world_size - 1) store.set("tdist-bench/all_left", "1");
  } else if (world_size > 1) {
    store.wait({"tdist-bench/all_left"});
  }
}

int worker(const BenchOptions& o) {
  // Rendezvous here rather than in init_process_group, to keep a handle on
  // the store for leave_together.
  RendezvousResult r = rendezvous("env://", -1, -1, std::chrono::seconds(o.timeout_s));
  InitProcessGroupOptions init;
  init.store = r.store;
  init.rank = r.rank;
  init.world_size = r.world_size;
  init.timeout = std::chrono::seconds(o.timeout_s);
  init_process_group(init);
  settle();
  const int rank = get_rank();
  const int world_size = get_world_size();
  const bool print = rank == 0;
  const bool table = print && !o.json;
  if (table) {
    std::fputs(table_header(world_size, o.dtype, o.reduce_op, o.iters, o.warmup, o.check).c_str(), stdout);
    std::fflush(stdout);
  }

  int64_t total_errors = 0;
  for (BenchOp op : o.ops) {
    if (op == BenchOp::kSendRecv && world_size < 2) {
      if (table) std::printf("# sendrecv: skipped, a rank cannot send to itself (needs 2 or more ranks)\n");
      continue;
    }
    const std::vector<uint64_t> sizes = op == BenchOp::kBarrier
                                            ? std::vector<uint64_t>{0}
                                            : message_sizes(o.min_bytes, o.max_bytes, o.step_factor);
    uint64_t previous = std::numeric_limits<uint64_t>::max();
    for (uint64_t requested : sizes) {
      const Layout layout = layout_for(op, requested, element_size(o.dtype), world_size);
      if (op != BenchOp::kBarrier && layout.bytes == 0) {
        if (table) {
          std::printf("# %s: %llu B holds less than one %s per rank over %d ranks; skipped\n",
                      bench_op_name(op), static_cast<unsigned long long>(requested), dtype_name(o.dtype),
                      world_size);
        }
        continue;
      }
      // Rounding to whole elements per rank can map two sizes onto one.
      if (op != BenchOp::kBarrier && layout.bytes == previous) continue;
      previous = layout.bytes;
      const Row row = measure(op, layout, o);
      if (row.errors) total_errors += *row.errors;
      if (print) {
        std::fputs((o.json ? json_row(row) + "\n" : table_row(row)).c_str(), stdout);
        std::fflush(stdout);
      }
    }
  }
  if (table) {
    std::printf("# wrong elements in total: %s\n",
                o.check ? std::to_string(total_errors).c_str() : "N/A (no --check)");
  }
  std::fflush(stdout);
  leave_together(*r.store, rank, world_size);
  return total_errors > 0 ? kExitWrongResults : 0;
}

int run(int argc, char** argv) {
  ParseResult parsed;
  try {
    parsed = parse_options(argc, argv);
  } catch (const OptionsError& e) {
    std::fprintf(stderr, "tdist-bench: %s\nRun with --help for more information.\n", e.what());
    return kExitFailure;
  }
  if (parsed.exit_now) return parsed.exit_code;
  const BenchOptions& o = parsed.options;

  // Under any launcher env:// knows (tdistrun/torchrun's RANK, mpirun's
  // OMPI_COMM_WORLD_RANK, PMI_RANK, srun's SLURM_PROCID) this process is
  // one rank of the job; without one, tdist-bench starts the ranks itself.
  const LaunchEnvironment launched = launch_environment();
  try {
    if (launched.rank < 0) return launch_local(o.nproc > 0 ? o.nproc : 1, argv);
    // The local launcher re-runs this command line, --nproc included, in
    // each rank; any other launcher decides the world size itself.
    if (o.nproc > 0 && launched.world_size != o.nproc) {
      std::fprintf(stderr,
                   "tdist-bench: --nproc %d is for runs without a launcher, but %s is set (world size %s); "
                   "drop --nproc\n",
                   o.nproc, launched.rank_source.c_str(),
                   launched.world_size < 0 ? "unset" : std::to_string(launched.world_size).c_str());
      return kExitFailure;
    }
    return worker(o);
  } catch (const std::exception& e) {
    // The library's network errors already start with the reporting rank.
    const std::string who =
        std::string("rank ") + (launched.rank < 0 ? "launcher" : std::to_string(launched.rank)) + ": ";
    const std::string what = e.what();
    std::fprintf(stderr, "tdist-bench: %s%s\n", what.rfind(who, 0) == 0 ? "" : who.c_str(), what.c_str());
    return kExitFailure;
  }
}

}  // namespace
}  // namespace tdist::bench

int main(int argc, char** argv) {
  return tdist::bench::run(argc, argv);
}
