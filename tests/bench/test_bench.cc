// tdist-bench: option parsing, nccl-tests' sizes and factors, and whole runs
// of the binary under its own local launcher.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "bench_ops.h"
#include "check.h"
#include "launcher/process_util.h"
#include "options.h"
#include "report.h"

namespace tdist::bench {
namespace {

TEST(ParseSize, PlainAndSuffixed) {
  EXPECT_EQ(parse_size("8"), 8u);
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("64K"), 64u << 10);
  EXPECT_EQ(parse_size("64k"), 64u << 10);
  EXPECT_EQ(parse_size("1M"), 1u << 20);
  EXPECT_EQ(parse_size("3m"), 3u << 20);
  EXPECT_EQ(parse_size("2G"), 2ULL << 30);
  EXPECT_EQ(parse_size("1024G"), 1ULL << 40);
}

TEST(ParseSize, RejectsBadInputWithAClearMessage) {
  for (const char* bad :
       {"", "K", "12X", "1.5M", "-1", " 8", "8 ", "8KB", "0x10", "99999999999999999999", "17179869184G"}) {
    try {
      parse_size(bad, "--max-bytes");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const OptionsError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("--max-bytes"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("K, M or G"), std::string::npos) << what;
    }
  }
}

TEST(ParseOps, NamesListsAndAll) {
  EXPECT_EQ(parse_ops("all").size(), kAllBenchOps.size());
  EXPECT_EQ(parse_ops("all_reduce,barrier"), (std::vector<BenchOp>{BenchOp::kAllReduce, BenchOp::kBarrier}));
  EXPECT_EQ(parse_ops("sendrecv"), std::vector<BenchOp>{BenchOp::kSendRecv});
  try {
    parse_ops("allreduce");
    ADD_FAILURE() << "accepted";
  } catch (const OptionsError& e) {
    EXPECT_NE(std::string(e.what()).find("reduce_scatter"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_ops("all_reduce,"), OptionsError);
}

TEST(ParseReduceOp, Names) {
  EXPECT_EQ(parse_reduce_op("sum"), ReduceOp::SUM);
  EXPECT_EQ(parse_reduce_op("PROD"), ReduceOp::PRODUCT);
  EXPECT_EQ(parse_reduce_op("product"), ReduceOp::PRODUCT);
  EXPECT_EQ(parse_reduce_op("Avg"), ReduceOp::AVG);
  EXPECT_EQ(parse_reduce_op("bxor"), ReduceOp::BXOR);
  EXPECT_THROW(parse_reduce_op("mean"), OptionsError);
}

TEST(MessageSizes, StepsLikeNcclTests) {
  const auto sizes = message_sizes(8, 64 << 10, 2);
  ASSERT_EQ(sizes.size(), 14u);
  EXPECT_EQ(sizes.front(), 8u);
  EXPECT_EQ(sizes.back(), 65536u);
  EXPECT_EQ(message_sizes(8, 100, 2), (std::vector<uint64_t>{8, 16, 32, 64}));
  EXPECT_EQ(message_sizes(5, 5, 2), std::vector<uint64_t>{5});
  EXPECT_EQ(message_sizes(1, 1000, 10), (std::vector<uint64_t>{1, 10, 100, 1000}));
  EXPECT_EQ(message_sizes(1ULL << 62, ~0ULL, 4).size(), 1u);  // no overflow
}

std::vector<const char*> args(std::initializer_list<const char*> list) {
  std::vector<const char*> out{"tdist-bench"};
  out.insert(out.end(), list);
  return out;
}

TEST(ParseOptions, DefaultsAndValues) {
  auto a = args({"--op", "all", "--dtype", "bf16x"});
  EXPECT_THROW(parse_options(static_cast<int>(a.size()), a.data()), OptionsError);
  a = args({"--op", "all", "--dtype", "half", "-b", "1K", "--max-bytes", "4M", "-f", "4", "--iters", "7",
            "--warmup", "0", "--check", "--json"});
  const BenchOptions o = parse_options(static_cast<int>(a.size()), a.data()).options;
  EXPECT_EQ(o.ops.size(), kAllBenchOps.size());
  EXPECT_EQ(o.dtype, DType::kFloat16);
  EXPECT_EQ(o.min_bytes, 1024u);
  EXPECT_EQ(o.max_bytes, 4u << 20);
  EXPECT_EQ(o.step_factor, 4u);
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(o.warmup, 0);
  EXPECT_TRUE(o.check);
  EXPECT_TRUE(o.json);
  EXPECT_FALSE(o.batch_p2p);  // sendrecv is the blocking call unless --p2p batch
  a = args({"--op", "sendrecv", "--p2p", "batch"});
  EXPECT_TRUE(parse_options(static_cast<int>(a.size()), a.data()).options.batch_p2p);
}

TEST(ParseOptions, AcceptsTheLaunchersLocalRank) {
  // Legacy launchers (tdist.launch, tdistrun --no-use-env) pass --local-rank=N first.
  auto a = args({"--local-rank=1", "--op", "broadcast"});
  EXPECT_EQ(parse_options(static_cast<int>(a.size()), a.data()).options.ops,
            std::vector<BenchOp>{BenchOp::kBroadcast});
  a = args({"--local_rank", "0"});
  EXPECT_NO_THROW(parse_options(static_cast<int>(a.size()), a.data()));
}

TEST(ParseOptions, RejectsInconsistentCommandLines) {
  for (auto a : {args({"--min-bytes", "64K", "--max-bytes", "8"}), args({"--min-bytes", "0"}),
                 args({"--iters", "0"}), args({"--step-factor", "1"}), args({"--bogus"}),
                 args({"--op", "all_reduce", "--reduce-op", "band"}),  // float32 has no bitwise ops
                 args({"--op", "reduce", "--dtype", "complex64", "--reduce-op", "max"}),
                 args({"--max-bytes", "12Q"}), args({"--p2p", "isend"})}) {
    EXPECT_THROW(parse_options(static_cast<int>(a.size()), a.data()), OptionsError) << a[1];
  }
  // A reduce op the dtype lacks is fine when no op reduces.
  auto a = args({"--op", "broadcast", "--reduce-op", "band"});
  EXPECT_NO_THROW(parse_options(static_cast<int>(a.size()), a.data()));
}

TEST(BusFactor, NcclTestsFactors) {
  for (int p : {1, 2, 3, 4, 8}) {
    const double share = (p - 1.0) / p;
    EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kAllReduce, p), 2 * share) << p;
    EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kAllGather, p), share);
    EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kReduceScatter, p), share);
    EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kAllToAll, p), share);
    EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kGather, p), share);
    EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kScatter, p), share);
    EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kBroadcast, p), 1.0);
    EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kReduce, p), 1.0);
    EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kSendRecv, p), 1.0);
  }
  EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kAllReduce, 4), 1.5);
}

TEST(Layout, BytesIsTheWholeBuffer) {
  Layout l = layout_for(BenchOp::kAllReduce, 1024, 4, 4);
  EXPECT_EQ(l.count, 256);
  EXPECT_EQ(l.bytes, 1024u);
  l = layout_for(BenchOp::kAllGather, 1024, 4, 4);  // bytes is the output
  EXPECT_EQ(l.count, 64);
  EXPECT_EQ(l.input_elems, 64);
  EXPECT_EQ(l.output_elems, 256);
  EXPECT_EQ(l.bytes, 1024u);
  l = layout_for(BenchOp::kReduceScatter, 1024, 4, 4);  // bytes is the input
  EXPECT_EQ(l.input_elems, 256);
  EXPECT_EQ(l.output_elems, 64);
  EXPECT_EQ(l.bytes, 1024u);
  l = layout_for(BenchOp::kAllToAll, 1024, 4, 4);
  EXPECT_EQ(l.count, 64);
  EXPECT_EQ(l.input_elems, 256);
  EXPECT_EQ(l.output_elems, 256);
  l = layout_for(BenchOp::kGather, 64, 4, 3);  // rounded down to a multiple of p elements
  EXPECT_EQ(l.count, 5);
  EXPECT_EQ(l.bytes, 60u);
  EXPECT_EQ(layout_for(BenchOp::kScatter, 8, 4, 4).bytes, 0u);  // less than one element per rank
  EXPECT_EQ(layout_for(BenchOp::kBroadcast, 7, 4, 4).bytes, 4u);
  EXPECT_EQ(layout_for(BenchOp::kBarrier, 1024, 4, 4).bytes, 0u);
}

TEST(CheckValues, SumsStayExactForEveryDtype) {
  for (DType dtype : kAllDTypes) {
    if (dtype == DType::kBool) continue;  // bool reduces logically: nothing to overflow
    for (int p : {1, 2, 3, 4, 5, 8, 16}) {
      for (auto kind : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MIN, ReduceOp::MAX, ReduceOp::PRODUCT}) {
        if (!is_reduce_supported(dtype, kind)) continue;
        const ReducePattern pattern(dtype, kind, p);
        const int64_t bound = exact_integer_bound(dtype);
        for (int64_t i = 0; i < 200; ++i) {
          int64_t partial = 0;
          for (int r = 0; r < p; ++r) {
            const int64_t v = pattern.input(r, i);
            partial += kind == ReduceOp::PRODUCT ? 0 : v;
            ASSERT_LE(std::llabs(v), bound) << dtype_name(dtype);
            ASSERT_LE(std::llabs(partial), bound) << dtype_name(dtype) << " p=" << p;
            if (dtype == DType::kUInt8) {
              ASSERT_GE(v, 0);
            }
          }
          ASSERT_LE(std::llabs(pattern.expected(i)), bound) << dtype_name(dtype);
          if (kind == ReduceOp::AVG) {
            ASSERT_EQ(partial % p, 0) << "the average must be a whole number";
          }
        }
      }
    }
  }
}

TEST(JsonRow, ExactlyTheNineKeys) {
  Row row;
  row.op = BenchOp::kAllGather;
  row.world_size = 4;
  row.layout = layout_for(BenchOp::kAllGather, 1 << 20, 4, 4);
  row.time_us = 100;
  auto j = nlohmann::json::parse(json_row(row));
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"algbw_GBps", "busbw_GBps", "bytes", "dtype", "errors", "lib",
                                            "op", "time_us", "world_size"}));  // nlohmann::json sorts them
  EXPECT_EQ(j["lib"], "tdist");
  EXPECT_EQ(j["op"], "all_gather");
  EXPECT_EQ(j["dtype"], "float32");
  EXPECT_EQ(j["bytes"], 1 << 20);
  EXPECT_NEAR(j["algbw_GBps"].get<double>(), 10.48576, 1e-4);
  EXPECT_NEAR(j["busbw_GBps"].get<double>(), 10.48576 * 0.75, 1e-4);
  EXPECT_EQ(j["errors"], 0);  // not checked: a number all the same (docs/benchmark.md)
  row.errors = 3;
  EXPECT_EQ(nlohmann::json::parse(json_row(row))["errors"], 3);
}

// ---- Whole runs of the binary ----

struct RunResult {
  int exit_code = -1;
  std::vector<std::string> lines;
};

// Runs `command` through the shell, stderr with stdout.
RunResult run_command(const std::string& command) {
  RunResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::string line;
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) {
    line += buffer;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      result.lines.push_back(line);
      line.clear();
    }
  }
  if (!line.empty()) result.lines.push_back(line);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// Runs `prefix` tdist-bench `arguments`. --timeout bounds every wait of the
// ranks, so a broken run fails well within the test's deadline instead of
// hanging.
RunResult run_bench(const std::string& arguments, const std::string& prefix = "") {
  return run_command(prefix + std::string(TDIST_BENCH_BINARY) + " --timeout 60 " + arguments + " 2>&1");
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

TEST(JsonRow, TheAlgorithmFollowsThePeersKeysWhenTheRowNamesOne) {
  Row row;
  row.op = BenchOp::kBroadcast;
  row.world_size = 2;
  row.layout = layout_for(BenchOp::kBroadcast, 1024, 4, 2);
  row.time_us = 1;
  row.algorithm = "shm rounds";
  const std::string text = json_row(row);
  // After "errors", in the order written (the peers' keys first).
  EXPECT_NE(text.find(R"("errors":0,"algorithm":"shm rounds"})"), std::string::npos) << text;
  EXPECT_NE(table_row(row).find("  shm rounds\n"), std::string::npos) << table_row(row);
  row.algorithm.clear();
  EXPECT_EQ(json_row(row).find("algorithm"), std::string::npos);
  EXPECT_NE(table_row(row).find("  -\n"), std::string::npos) << table_row(row);
}

TEST(BenchBinary, AllOpsJsonChecked) {
  // Run without a launcher: --nproc forks the ranks.
  const RunResult r =
      run_bench("--nproc 2 --op all --min-bytes 8 --max-bytes 64K --iters 3 --warmup 1 --check --json");
  ASSERT_EQ(r.exit_code, 0) << joined(r.lines);
  const std::set<std::string> keys{"lib",     "op",         "dtype",      "world_size", "bytes",
                                   "time_us", "algbw_GBps", "busbw_GBps", "errors"};
  std::map<std::string, std::vector<uint64_t>> sizes_by_op;
  for (const auto& line : r.lines) {
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << "not JSON: " << line;
    std::set<std::string> got;
    for (auto it = j.begin(); it != j.end(); ++it) got.insert(it.key());
    // Every op but send/recv names its algorithm (docs/tuning.md).
    std::set<std::string> expected_keys = keys;
    if (j["op"] != "sendrecv") expected_keys.insert("algorithm");
    EXPECT_EQ(got, expected_keys) << line;
    if (j.contains("algorithm")) {
      EXPECT_EQ(j["algorithm"].get<std::string>().rfind("shm ", 0), 0u) << "2 ranks on one host: " << line;
      // The choices that do not depend on the machine's single copy.
      const auto bytes = j["bytes"].get<uint64_t>();
      if ((j["op"] == "broadcast" || j["op"] == "reduce") && bytes <= 48) {
        EXPECT_EQ(j["algorithm"], "shm eager") << line;
      } else if ((j["op"] == "all_reduce" || j["op"] == "reduce") && bytes <= 32768) {
        EXPECT_EQ(j["algorithm"], "shm one-shot") << line;
      } else if (j["op"] == "barrier") {
        EXPECT_EQ(j["algorithm"], "shm rounds") << line;
      }
    }
    EXPECT_EQ(j["lib"], "tdist");
    EXPECT_EQ(j["dtype"], "float32");
    EXPECT_EQ(j["world_size"], 2);
    EXPECT_EQ(j["errors"], 0) << line;
    EXPECT_GT(j["time_us"].get<double>(), 0) << line;
    sizes_by_op[j["op"].get<std::string>()].push_back(j["bytes"].get<uint64_t>());
  }
  std::vector<uint64_t> expected;
  for (uint64_t s = 8; s <= 65536; s *= 2) expected.push_back(s);
  ASSERT_EQ(sizes_by_op.size(), kAllBenchOps.size());
  for (BenchOp op : kAllBenchOps) {
    if (op == BenchOp::kBarrier) {
      EXPECT_EQ(sizes_by_op["barrier"], std::vector<uint64_t>{0});
    } else {
      EXPECT_EQ(sizes_by_op[bench_op_name(op)], expected) << bench_op_name(op);
    }
  }
}

TEST(BenchBinary, OtherDtypesAndReduceOpsCheckClean) {
  for (const char* arguments :
       {"--nproc 3 --op all --dtype bfloat16 --reduce-op avg -b 4 -e 4K -n 2 -w 0 --check --json",
        "--nproc 3 --op all_reduce,reduce,reduce_scatter --dtype int8 --reduce-op bxor -b 3 -e 3K -n 2 -w 0 "
        "--check --json",
        "--nproc 2 --op all_reduce,reduce_scatter --dtype bool --reduce-op prod -b 2 -e 2K -n 2 -w 0 --check "
        "--json",
        "--nproc 2 --op all_reduce,all_to_all --dtype complex128 -b 16 -e 16K -n 2 -w 0 --check --json",
        "--nproc 3 --op sendrecv --p2p batch -b 8 -e 64K -f 8 -n 2 -w 0 --check --json"}) {
    const RunResult r = run_bench(arguments);
    ASSERT_EQ(r.exit_code, 0) << arguments << "\n" << joined(r.lines);
    ASSERT_FALSE(r.lines.empty()) << arguments;
    for (const auto& line : r.lines) {
      nlohmann::json j;
      ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << "not JSON: " << line;
      EXPECT_EQ(j["errors"], 0) << arguments << ": " << line;
    }
  }
}

std::set<std::string> json_keys(const nlohmann::json& j) {
  std::set<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
  return keys;
}

TEST(BenchBinary, OneRankChecksEveryOpButSendrecv) {
  const RunResult r = run_bench("--nproc 1 --op all -b 4 -e 1K -f 16 -n 2 -w 1 --check --json");
  ASSERT_EQ(r.exit_code, 0) << joined(r.lines);
  std::set<std::string> ops;
  for (const auto& line : r.lines) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["errors"], 0) << line;
    EXPECT_EQ(j["world_size"], 1);
    const auto op = find_bench_op(j["op"].get<std::string>());
    ASSERT_TRUE(op.has_value()) << line;
    // At 1 rank only broadcast's and reduce's factors (1) leave any busbw.
    const double factor = (*op == BenchOp::kBroadcast || *op == BenchOp::kReduce) ? 1.0 : 0.0;
    EXPECT_NEAR(j["busbw_GBps"].get<double>(), factor * j["algbw_GBps"].get<double>(),
                1e-5 * j["algbw_GBps"].get<double>())
        << line;
    ops.insert(j["op"].get<std::string>());
  }
  EXPECT_EQ(ops.size(), kAllBenchOps.size() - 1);  // a rank cannot send to itself
  EXPECT_EQ(ops.count("sendrecv"), 0u);
}

TEST(BenchBinary, CheckFindsACorruptedElementAndFails) {
  // Rank 1 spoils one element of every result it verifies (a test-only hook);
  // each row must then count exactly that one element, summed over ranks, and
  // the run must fail. reduce and gather leave rank 1 nothing to verify.
  const RunResult r = run_bench("--nproc 3 --op all -b 96 -e 96 -n 1 -w 0 --check --json",
                                "TDIST_BENCH_TEST_CORRUPT_RANK=1 ");
  EXPECT_EQ(r.exit_code, 1) << joined(r.lines);
  std::map<std::string, int64_t> errors;
  for (const auto& line : r.lines) {
    if (line.rfind("{", 0) != 0) continue;  // rank 1's descriptions of what was wrong
    const auto j = nlohmann::json::parse(line);
    errors[j["op"].get<std::string>()] = j["errors"].get<int64_t>();
  }
  const std::map<std::string, int64_t> expected{
      {"all_reduce", 1}, {"broadcast", 1}, {"reduce", 0},  {"all_gather", 1}, {"reduce_scatter", 1},
      {"all_to_all", 1}, {"gather", 0},    {"scatter", 1}, {"sendrecv", 1},   {"barrier", 0}};
  EXPECT_EQ(errors, expected) << joined(r.lines);
  EXPECT_NE(joined(r.lines).find("rank 1: all_reduce of 96 bytes: element 0 is nan, expected"),
            std::string::npos)
      << joined(r.lines);

  // Rank 0 verifies the rooted ops too; the table says how many were wrong.
  const RunResult t = run_bench("--nproc 2 --op reduce,gather -b 64 -e 64 -n 1 -w 0 --check",
                                "TDIST_BENCH_TEST_CORRUPT_RANK=0 ");
  EXPECT_EQ(t.exit_code, 1) << joined(t.lines);
  EXPECT_NE(joined(t.lines).find("# wrong elements in total: 2"), std::string::npos) << joined(t.lines);
}

TEST(BenchBinary, UnderTdistrunOnlyRankZeroPrints) {
  // As the docs run it. tdistrun prefixes each line with the rank that printed it.
  const RunResult r = run_bench("--op all_reduce,all_gather -b 1K -e 2K -n 2 -w 0 --json",
                                std::string(TDIST_RUN_BINARY) + " --standalone --nproc-per-node 2 ");
  ASSERT_EQ(r.exit_code, 0) << joined(r.lines);
  int rows = 0;
  for (const auto& line : r.lines) {
    ASSERT_EQ(line.rfind("[rank 0]: {", 0), 0u) << "only rank 0 prints, only rows: " << line;
    const auto j = nlohmann::json::parse(line.substr(std::string("[rank 0]: ").size()));
    EXPECT_EQ(json_keys(j), (std::set<std::string>{"lib", "op", "dtype", "world_size", "bytes", "time_us",
                                                   "algbw_GBps", "busbw_GBps", "errors", "algorithm"}));
    EXPECT_EQ(j["errors"], 0) << "without --check errors is 0: " << line;
    EXPECT_EQ(j["world_size"], 2);
    ++rows;
  }
  EXPECT_EQ(rows, 4);

  // The table too: rank 0 alone prints it, and the other ranks nothing.
  const RunResult t = run_bench("--op broadcast -b 1K -e 1K -n 2 -w 0 --check",
                                std::string(TDIST_RUN_BINARY) + " --standalone --nproc-per-node 3 ");
  ASSERT_EQ(t.exit_code, 0) << joined(t.lines);
  int table_rows = 0;
  for (const auto& line : t.lines) {
    ASSERT_EQ(line.rfind("[rank 0]: ", 0), 0u) << line;
    table_rows += line.rfind("[rank 0]:   broadcast", 0) == 0 ? 1 : 0;
  }
  EXPECT_EQ(table_rows, 1) << joined(t.lines);
}

// Ranks started by another launcher: each names its rank and the world size
// in that launcher's variables only (no RANK), and must join one job.
class BenchUnderOtherLaunchers : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(BenchUnderOtherLaunchers, RanksJoinOneJob) {
  const std::string rank_var = GetParam().first;
  const std::string size_var = GetParam().second;
  const std::string master =
      "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(launcher::pick_free_port()) + " ";
  const std::string bench = std::string(TDIST_BENCH_BINARY) +
                            " --timeout 60 --op all_reduce -b 64 -e 64 -n 1 "
                            "-w 0 --check --json";
  auto rank = [&](int r) {
    return "env -u RANK -u WORLD_SIZE " + master + rank_var + "=" + std::to_string(r) + " " + size_var +
           "=2 " + bench;
  };
  const RunResult r =
      run_command("sh -c '" + rank(1) + " >/dev/null 2>&1 & " + rank(0) + "; s=$?; wait $! && exit $s' 2>&1");
  ASSERT_EQ(r.exit_code, 0) << joined(r.lines);
  ASSERT_EQ(r.lines.size(), 1u) << joined(r.lines);
  const auto j = nlohmann::json::parse(r.lines[0]);
  EXPECT_EQ(j["world_size"], 2) << "one job of 2 ranks, not two jobs of 1: " << r.lines[0];
  EXPECT_EQ(j["errors"], 0);
}

INSTANTIATE_TEST_SUITE_P(Launchers, BenchUnderOtherLaunchers,
                         ::testing::Values(std::make_pair("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                                           std::make_pair("PMI_RANK", "PMI_SIZE"),
                                           std::make_pair("SLURM_PROCID", "SLURM_NTASKS")),
                         [](const auto& info) {
                           const std::string var = info.param.first;
                           return var.rfind("OMPI", 0) == 0  ? "OpenMPI"
                                  : var.rfind("PMI", 0) == 0 ? "PMI"
                                                             : "Slurm";
                         });

TEST(BenchBinary, UnderOpenMpisMpirun) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) {  // NOLINT(concurrency-mt-unsafe)
    GTEST_SKIP() << "mpirun is not installed (Debian's openmpi-bin)";
  }
  const RunResult r = run_command(
      "mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_ADDR=127.0.0.1 -x "
      "MASTER_PORT=" +
      std::to_string(launcher::pick_free_port()) + " " + TDIST_BENCH_BINARY +
      " --timeout 60 --op all_reduce -b 64 -e 64 -n 1 -w 0 --check --json 2>&1");
  ASSERT_EQ(r.exit_code, 0) << joined(r.lines);
  int rows = 0;
  for (const auto& line : r.lines) {
    if (line.rfind('{', 0) != 0) continue;  // mpirun's own notes
    EXPECT_EQ(nlohmann::json::parse(line)["world_size"], 2) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 1) << joined(r.lines);
}

TEST(BenchBinary, TableOnRankZeroOnly) {
  const RunResult r = run_bench("--nproc 2 --op all_reduce -b 1K -e 4K -n 2 -w 0 --check");
  ASSERT_EQ(r.exit_code, 0) << joined(r.lines);
  const std::string out = joined(r.lines);
  EXPECT_NE(out.find("world size 2, dtype float32, reduce op sum"), std::string::npos) << out;
  int rows = 0;
  for (const auto& line : r.lines) rows += line.rfind("  all_reduce", 0) == 0 ? 1 : 0;
  EXPECT_EQ(rows, 3) << out;  // 1K, 2K, 4K, printed once
}

// A run that must fail with exit code `code` and say `text`.
void expect_failure_saying(const RunResult& r, int code, const std::string& text) {
  EXPECT_EQ(r.exit_code, code) << joined(r.lines);
  EXPECT_NE(joined(r.lines).find(text), std::string::npos) << joined(r.lines);
}

TEST(BenchBinary, BadCommandLineFailsWithAMessage) {
  expect_failure_saying(run_bench("--nproc 2 --max-bytes 12Q"), 2, "--max-bytes: '12Q'");
  expect_failure_saying(run_bench("--dtype float32 --reduce-op bor"), 2, "BOR");
}

// ---- tdist-floors (tools/floors) ----

RunResult run_floors(const std::string& arguments) {
  return run_command(std::string(TDIST_FLOORS_BINARY) + " " + arguments + " 2>&1");
}

// Every floor asked for prints one row, in order, whose time is the median
// of the runs it lists.
void expect_floor_rows(const RunResult& r, const std::vector<std::string>& floors, int world, size_t bytes,
                       size_t runs) {
  ASSERT_EQ(r.lines.size(), floors.size()) << joined(r.lines);
  for (size_t i = 0; i < floors.size(); ++i) {
    const auto row = nlohmann::json::parse(r.lines[i]);
    EXPECT_EQ(row["floor"], floors[i]);
    EXPECT_EQ(row["world_size"], world);
    EXPECT_EQ(row["bytes"], bytes);
    std::vector<double> times = row["runs_us"].get<std::vector<double>>();
    ASSERT_EQ(times.size(), runs) << r.lines[i];
    for (double t : times) EXPECT_GT(t, 0.0) << r.lines[i];
    std::sort(times.begin(), times.end());
    EXPECT_NEAR(row["time_us"].get<double>(), times[times.size() / 2], 0.051) << r.lines[i];
  }
}

TEST(FloorsBinary, EveryFloorPrintsOneRowWithItsRuns) {
  const RunResult r = run_floors("--world 2 --bytes 1M --runs 3 --floors in_place,copy,two_shot_passes");
  ASSERT_EQ(r.exit_code, 0) << joined(r.lines);
  expect_floor_rows(r, {"in_place", "copy", "two_shot_passes"}, 2, size_t{1} << 20, 3);
}

TEST(FloorsBinary, MoreRanksThanCoresAndSingleCopy) {
  // Five ranks share the cores (the oversubscribed round size); single copy
  // needs process_vm_readv, which a container may forbid: then it must say so.
  const RunResult r =
      run_floors("--world 5 --bytes 260K --runs 2 --floors two_shot_passes,single_copy_passes");
  if (r.exit_code != 0 && joined(r.lines).find("process_vm_") != std::string::npos) {
    GTEST_SKIP() << "single copy is not allowed here: " << joined(r.lines);
  }
  ASSERT_EQ(r.exit_code, 0) << joined(r.lines);
  expect_floor_rows(r, {"two_shot_passes", "single_copy_passes"}, 5, size_t{260} << 10, 2);
}

TEST(FloorsBinary, TcpExchangeAtTwoThreeAndOneRank) {
  // Two ranks share their connections both ways; three use a ring of pairs;
  // one rank has nobody to talk to and moves nothing.
  for (int world : {2, 3}) {
    const RunResult r =
        run_floors("--world " + std::to_string(world) + " --bytes 260K --runs 2 --floors tcp_exchange");
    ASSERT_EQ(r.exit_code, 0) << joined(r.lines);
    expect_floor_rows(r, {"tcp_exchange"}, world, size_t{260} << 10, 2);
  }
  const RunResult alone = run_floors("--world 1 --bytes 4K --runs 1 --floors tcp_exchange");
  ASSERT_EQ(alone.exit_code, 0) << joined(alone.lines);
  ASSERT_EQ(alone.lines.size(), 1U) << joined(alone.lines);
  EXPECT_EQ(nlohmann::json::parse(alone.lines[0])["floor"], "tcp_exchange");
}

TEST(FloorsBinary, PingPongTimesTwoRanksPassingALine) {
  // 100,000 passes take at least 100,000 cache-line transfers' time (tens
  // of ns each), however fast the machine: 1 ms is far below any of them.
  const RunResult r = run_floors("--world 2 --bytes 4K --runs 3 --floors ping_pong");
  ASSERT_EQ(r.exit_code, 0) << joined(r.lines);
  expect_floor_rows(r, {"ping_pong"}, 2, 4096, 3);
  EXPECT_GT(nlohmann::json::parse(r.lines[0])["time_us"].get<double>(), 1000.0) << r.lines[0];
}

TEST(FloorsBinary, BadArgumentsFailWithAMessage) {
  expect_failure_saying(run_floors("--bytes 1000"), 2, "multiple of 4096");
  expect_failure_saying(run_floors("--floors in_place,fastest"), 2, "fastest");
  expect_failure_saying(run_floors("--bytes 12Q"), 2, "--bytes: '12Q'");
}

}  // namespace
}  // namespace tdist::bench
