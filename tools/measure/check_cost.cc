// tdist-check-cost: what matching every call across ranks costs
// (docs/design.md, "Every call is matched across ranks"), or with
// --feature recorder what the flight recorder costs. Run under a
// launcher; every rank makes two groups of all ranks, one with the feature
// and one without (TDIST_TESTONLY_UNCHECKED_CALLS=1 or
// TDIST_TESTONLY_UNRECORDED_CALLS=1 while it is created),
// and times all_reduce on each in alternating batches, so that both see the
// same machine within a fraction of a second. Rank 0 prints one line per
// size: the median over rounds of the slowest rank's time per call, with
// and without the checks, and their ratio.
//
//     tdistrun --standalone --nproc-per-node 2 tdist-check-cost [--rounds 21] [--sizes 8,64M] [--feature
//     checks|recorder] TDIST_TRANSPORT=tcp tdistrun ... tdist-check-cost      # over TCP

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tdist/distributed.h"

namespace {

using Clock = std::chrono::steady_clock;

size_t parse_size(const std::string& text) {
  size_t end = 0;
  const double value = std::stod(text, &end);
  const std::string unit = text.substr(end);
  const double scale = unit.empty()  ? 1
                       : unit == "K" ? 1024.0
                       : unit == "M" ? 1048576.0
                       : unit == "G" ? 1073741824.0
                                     : -1;
  if (scale < 0) throw std::invalid_argument("bad size '" + text + "' (K, M or G)");
  return static_cast<size_t>(value * scale);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Microseconds per call of `iters` all_reduces on `group`, the slowest rank's.
double time_batch(const tdist::Tensor& t, int iters, const tdist::Group& group) {
  tdist::barrier(group);
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) tdist::all_reduce(t, tdist::ReduceOp::SUM, group);
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
  std::vector<double> slowest{us};
  tdist::Tensor s = tdist::Tensor::wrap(slowest);
  tdist::all_reduce(s, tdist::ReduceOp::MAX);
  return slowest[0];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tdist-check-cost: all_reduce with and without the call checks, alternating"};
  int rounds = 21;
  std::string sizes_text = "8,64M";
  app.add_option("--rounds", rounds, "alternating rounds per size")->check(CLI::Range(1, 10000));
  app.add_option("--sizes", sizes_text, "message sizes, comma-separated (K, M, G suffixes)");
  std::string feature = "checks";
  app.add_option("--feature", feature,
                 "what to turn off in the second group: the call checks, or the flight recorder")
      ->check(CLI::IsMember({"checks", "recorder"}));
  int local_rank = 0;  // legacy launchers (tdistrun --no-use-env) pass it; LOCAL_RANK says the same
  app.add_option("--local-rank,--local_rank", local_rank, "set by legacy launchers; ignored");
  CLI11_PARSE(app, argc, argv);

  tdist::init_process_group();
  const int rank = tdist::get_rank();
  // The group reads the variable as it is created, on this thread; tdist's
  // other threads read no environment after start-up.
  // NOLINTBEGIN(concurrency-mt-unsafe)
  const char* off_switch =
      feature == "checks" ? "TDIST_TESTONLY_UNCHECKED_CALLS" : "TDIST_TESTONLY_UNRECORDED_CALLS";
  setenv(off_switch, "1", 1);
  const tdist::Group unchecked = tdist::new_group();
  unsetenv(off_switch);
  const char* transport = getenv("TDIST_TRANSPORT");
  // NOLINTEND(concurrency-mt-unsafe)
  const tdist::Group checked = tdist::new_group();

  std::vector<size_t> sizes;
  for (size_t at = 0; at <= sizes_text.size();) {
    const size_t comma = std::min(sizes_text.find(',', at), sizes_text.size());
    sizes.push_back(parse_size(sizes_text.substr(at, comma - at)));
    at = comma + 1;
  }
  if (rank == 0) {
    std::printf("# world %d, %s; us per all_reduce (float32, sum), median of %d alternating rounds\n",
                tdist::get_world_size(), transport != nullptr ? transport : "auto", rounds);
    std::printf("# %10s %12s %12s %8s\n", "bytes", feature == "checks" ? "checked" : "recorded",
                feature == "checks" ? "unchecked" : "unrecorded", "ratio");
  }
  for (size_t bytes : sizes) {
    const auto count = static_cast<int64_t>(std::max<size_t>(1, bytes / 4));
    tdist::Tensor t = tdist::Tensor::zeros(tdist::DType::kFloat32, {count});
    // About 20 ms per batch at small sizes, at least 5 calls at large ones.
    int iters = 5;
    const double probe = time_batch(t, 5, checked);
    iters = std::max(5, static_cast<int>(20000.0 / std::max(probe, 0.01)));
    time_batch(t, iters, unchecked);  // warm both
    std::vector<double> on, off;
    for (int r = 0; r < rounds; ++r) {
      // Alternate which goes first, so neither always follows the other.
      if (r % 2 == 0) {
        on.push_back(time_batch(t, iters, checked));
        off.push_back(time_batch(t, iters, unchecked));
      } else {
        off.push_back(time_batch(t, iters, unchecked));
        on.push_back(time_batch(t, iters, checked));
      }
    }
    if (rank == 0) {
      const double m_on = median(on), m_off = median(off);
      std::printf("  %10zu %12.3f %12.3f %8.3f\n", bytes, m_on, m_off, m_on / m_off);
    }
  }
  tdist::destroy_process_group();
  return 0;
}
