#include "report.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace tdist::bench {
namespace {

// Rounds for printing: JSON readers get the figures, not seventeen digits of
// timer noise. Bandwidths keep significant digits rather than decimals, so
// that the tiny figures of small messages survive for log-scale plots.
double round_to(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

double round_significant(double value, int digits) {
  if (value == 0 || !std::isfinite(value)) return value;
  const int magnitude = static_cast<int>(std::floor(std::log10(std::fabs(value))));
  const double scale = std::pow(10.0, digits - 1 - magnitude);
  return std::round(value * scale) / scale;
}

std::string format(const char* fmt, auto... args) {
  const int n = std::snprintf(nullptr, 0, fmt, args...);
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), fmt, args...);
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string lower_reduce_name(const ReduceOp& op) {
  std::string name = reduce_op_name(op);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name == "product" ? "prod" : name;
}

}  // namespace

double algbw_gbps(const Row& row) {
  if (row.time_us <= 0) return 0;
  return static_cast<double>(row.layout.bytes) / (row.time_us * 1e-6) / 1e9;
}

double busbw_gbps(const Row& row) {
  return algbw_gbps(row) * bus_factor(row.op, row.world_size);
}

std::string json_row(const Row& row) {
  // ordered_json keeps the keys in the order the peers print them.
  nlohmann::ordered_json j;
  j["lib"] = "tdist";
  j["op"] = bench_op_name(row.op);
  j["dtype"] = dtype_name(row.dtype);
  j["world_size"] = row.world_size;
  j["bytes"] = row.layout.bytes;
  j["time_us"] = round_to(row.time_us, 3);
  j["algbw_GBps"] = round_significant(algbw_gbps(row), 6);
  j["busbw_GBps"] = round_significant(busbw_gbps(row), 6);
  // Always a number, as a reader summing or comparing it expects: 0 when
  // nothing was checked (the peers' rows without --check, and the anchors'
  // rows, which lack the key, read the same way). docs/benchmark.md says so.
  j["errors"] = row.errors.value_or(0);
  if (!row.algorithm.empty()) j["algorithm"] = row.algorithm;
  return j.dump();
}

std::string table_header(int world_size, DType dtype, const ReduceOp& reduce_op, int iters, int warmup,
                         bool check) {
  std::string out = format(
      "# tdist-bench: world size %d, dtype %s, reduce op %s, %d timed iterations after %d warmup, check %s\n",
      world_size, dtype_name(dtype), lower_reduce_name(reduce_op).c_str(), iters, warmup,
      check ? "on" : "off");
  out +=
      "# time: mean per operation on rank 0; algbw = size / time; busbw = algbw x the op's bus factor\n#\n";
  out += format("# %-14s %12s %12s %9s %6s %5s %12s %9s %9s %7s", "op", "size", "count", "type", "redop",
                "root", "time", "algbw", "busbw", "#wrong");
  out += "  algorithm\n";
  out += format("# %-14s %12s %12s %9s %6s %5s %12s %9s %9s %7s\n", "", "(B)", "(elements)", "", "", "",
                "(us)", "(GB/s)", "(GB/s)", "");
  return out;
}

std::string table_row(const Row& row) {
  const std::string redop = is_reducing(row.op) ? lower_reduce_name(row.reduce_op) : "none";
  const std::string root = has_root(row.op) ? "0" : "-";
  const std::string wrong = row.errors ? std::to_string(*row.errors) : "N/A";
  const std::string algorithm = row.algorithm.empty() ? "-" : row.algorithm;
  return format("  %-14s %12llu %12lld %9s %6s %5s %12.2f %9.3f %9.3f %7s  %s\n", bench_op_name(row.op),
                static_cast<unsigned long long>(row.layout.bytes), static_cast<long long>(row.layout.count),
                dtype_name(row.dtype), redop.c_str(), root.c_str(), row.time_us, algbw_gbps(row),
                busbw_gbps(row), wrong.c_str(), algorithm.c_str());
}

}  // namespace tdist::bench
