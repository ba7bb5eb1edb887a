#include "options.h"

#include <CLI/CLI.hpp>

#include <cctype>
#include <limits>

#include "tdist/errors.h"

namespace tdist::bench {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string all_op_names() {
  std::string names;
  for (BenchOp op : kAllBenchOps) names += std::string(names.empty() ? "" : ", ") + bench_op_name(op);
  return names + ", or all";
}

}  // namespace

uint64_t parse_size(std::string_view text, std::string_view option) {
  auto fail = [&](const std::string& why) -> OptionsError {
    return OptionsError(std::string(option) + ": '" + std::string(text) + "' " + why +
                        " (expected a whole number of bytes with an optional K, M or G suffix, powers of "
                        "1024, e.g. 8, 64K, 1M)");
  };
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])) != 0) ++digits;
  if (digits == 0) throw fail("is not a size");
  uint64_t value = 0;
  for (size_t i = 0; i < digits; ++i) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) throw fail("is too large");
    value = value * 10 + digit;
  }
  std::string_view suffix = text.substr(digits);
  unsigned shift = 0;
  if (suffix.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      default:
        throw fail("has an unknown suffix");
    }
  } else if (!suffix.empty()) {
    throw fail("has an unknown suffix");
  }
  if (shift > 0 && value > (std::numeric_limits<uint64_t>::max() >> shift)) throw fail("is too large");
  return value << shift;
}

std::vector<BenchOp> parse_ops(std::string_view text) {
  std::vector<BenchOp> ops;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string name = lower(text.substr(start, end - start));
    if (name == "all") {
      ops.insert(ops.end(), kAllBenchOps.begin(), kAllBenchOps.end());
    } else if (auto op = find_bench_op(name)) {
      ops.push_back(*op);
    } else {
      throw OptionsError("--op: unknown op '" + name + "'; choose from " + all_op_names() +
                         " (several may be given, separated by commas)");
    }
    start = end + 1;
  }
  return ops;
}

ReduceOp parse_reduce_op(std::string_view text) {
  const std::string name = lower(text);
  if (name == "sum") return ReduceOp::SUM;
  if (name == "prod" || name == "product") return ReduceOp::PRODUCT;
  if (name == "min") return ReduceOp::MIN;
  if (name == "max") return ReduceOp::MAX;
  if (name == "avg") return ReduceOp::AVG;
  if (name == "band") return ReduceOp::BAND;
  if (name == "bor") return ReduceOp::BOR;
  if (name == "bxor") return ReduceOp::BXOR;
  throw OptionsError("--reduce-op: unknown reduce op '" + std::string(text) +
                     "'; choose from sum, prod, min, max, avg, band, bor, bxor");
}

std::vector<uint64_t> message_sizes(uint64_t min_bytes, uint64_t max_bytes, uint64_t step_factor) {
  std::vector<uint64_t> sizes;
  for (uint64_t size = min_bytes; size <= max_bytes; size *= step_factor) {
    sizes.push_back(size);
    // The next step would overflow or never grow: stop here.
    if (step_factor < 2 || size > max_bytes / step_factor) break;
  }
  return sizes;
}

ParseResult parse_options(int argc, const char* const* argv) {
  ParseResult result;
  BenchOptions& o = result.options;
  std::string ops = "all_reduce";
  std::string dtype = "float32";
  std::string reduce_op = "sum";
  std::string min_bytes = "8";
  std::string max_bytes = "32M";

  CLI::App app{
      "tdist-bench: measures tdist's collectives in the manner of nccl-tests. Run it under a launcher "
      "(tdistrun/torchrun's RANK and WORLD_SIZE, or mpirun's, PMI's or srun's variables, with MASTER_ADDR "
      "and "
      "MASTER_PORT), or alone with --nproc N to start N ranks on "
      "127.0.0.1."};
  app.add_option("--op", ops,
                 "collective(s) to measure, comma-separated: all_reduce, broadcast, reduce, all_gather, "
                 "reduce_scatter, all_to_all, gather, scatter, sendrecv, barrier, or all")
      ->capture_default_str();
  app.add_option("--dtype", dtype, "element type (a torch name: float32, float16, bfloat16, int32, ...)")
      ->capture_default_str();
  app.add_option("--reduce-op", reduce_op,
                 "reduce op of the reducing ops: sum, prod, min, max, avg, band, bor, bxor")
      ->capture_default_str();
  app.add_option("-b,--min-bytes", min_bytes, "smallest message size (K, M, G suffixes)")
      ->capture_default_str();
  app.add_option("-e,--max-bytes", max_bytes, "largest message size (K, M, G suffixes)")
      ->capture_default_str();
  app.add_option("-f,--step-factor", o.step_factor, "multiply the size by this much at each step")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{2}, uint64_t{1} << 32));
  app.add_option("-n,--iters", o.iters, "timed iterations per size")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("-w,--warmup", o.warmup, "untimed iterations before the timed ones")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  app.add_flag("-c,--check", o.check, "verify every result exactly; exit non-zero if any element is wrong");
  app.add_flag("--json", o.json, "print one JSON object per row instead of the table");
  app.add_option("--nproc", o.nproc,
                 "without a launcher (no RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID): start this "
                 "many ranks "
                 "on 127.0.0.1 (default 1)")
      ->check(CLI::Range(1, 1024));
  // torch.distributed.launch (and tdistrun --no-use-env) pass --local-rank=N
  // first; the rank is taken from the environment, so the value is only
  // accepted.
  int local_rank = 0;
  app.add_option("--local-rank,--local_rank", local_rank,
                 "set by legacy launchers; ignored (LOCAL_RANK is read)")
      ->group("");
  std::string p2p = "sendrecv";
  app.add_option("--p2p", p2p,
                 "how sendrecv exchanges: sendrecv (the blocking call, as MPI_Sendrecv) or batch "
                 "(batch_isend_irecv of the receive and the send, then a wait for both works)")
      ->capture_default_str()
      ->check(CLI::IsMember({"sendrecv", "batch"}));
  app.add_option("--timeout", o.timeout_s, "seconds to wait for rendezvous or a peer before failing")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    result.exit_code = app.exit(e);
    result.exit_now = true;
    return result;
  } catch (const CLI::ParseError& e) {
    throw OptionsError(e.what());
  }

  o.ops = parse_ops(ops);
  o.batch_p2p = p2p == "batch";
  try {
    o.dtype = parse_dtype(dtype);
  } catch (const DistInvalidArgument& e) {
    throw OptionsError(std::string("--dtype: ") + e.what());
  }
  o.reduce_op = parse_reduce_op(reduce_op);
  o.min_bytes = parse_size(min_bytes, "--min-bytes");
  o.max_bytes = parse_size(max_bytes, "--max-bytes");
  if (o.min_bytes == 0) throw OptionsError("--min-bytes: must be at least 1 byte");
  if (o.min_bytes > o.max_bytes) {
    throw OptionsError("--min-bytes (" + min_bytes + ") is larger than --max-bytes (" + max_bytes + ")");
  }
  for (BenchOp op : o.ops) {
    if (!is_reducing(op)) continue;
    try {
      check_reduce_supported(o.dtype, o.reduce_op, bench_op_name(op));
    } catch (const DistInvalidArgument& e) {
      throw OptionsError(std::string("--reduce-op: ") + e.what());
    }
  }
  return result;
}

}  // namespace tdist::bench
