#include "options.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "common/cpus.h"
#include "rdzv_options.h"

namespace tdist::launcher {
namespace {

constexpr int kUsageError = 2;

int usage_error(const std::string& message) {
  std::fprintf(stderr, "tdistrun: %s\nRun with --help for more information.\n", message.c_str());
  return kUsageError;
}

std::chrono::milliseconds seconds_to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
}

// --help's usage line names the program and its arguments, which CLI11
// leaves out: they are not options but everything after them.
class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string usage = CLI::Formatter::make_usage(app, std::move(name));
    const size_t end = usage.find_last_not_of('\n');
    usage.insert(end == std::string::npos ? 0 : end + 1, " PROGRAM [ARGS...]");
    return usage;
  }
};

// A random run id for --standalone, as torchrun gives its standalone jobs.
std::string random_run_id() {
  std::random_device device;
  char text[33];
  std::snprintf(text, sizeof(text), "%08x%08x%08x%08x", device(), device(), device(), device());
  return text;
}

// --nnodes, --rdzv-* and --standalone together. Raises std::invalid_argument
// with the usage error.
void parse_rendezvous(const CLI::App& app, const std::string& nnodes, const std::string& backend,
                      const std::string& endpoint_text, const std::string& conf_text, LaunchOptions* o) {
  if (o->standalone) {
    // torchrun's --standalone: one node on this host; rendezvous settings
    // given with it are ignored, as there.
    if (app.count("--nnodes") > 0 && nnodes != "1" && nnodes != "1:1") {
      throw std::invalid_argument("--standalone runs one node; drop --nnodes " + nnodes);
    }
    o->min_nodes = o->max_nodes = o->nnodes = 1;
    o->node_rank = 0;
    o->master_addr = "127.0.0.1";
    o->rdzv_backend = RdzvBackend::kStatic;
    if (app.count("--rdzv-id") == 0) o->run_id = random_run_id();
    return;
  }
  const NodeRange range = parse_nnodes(nnodes);
  o->min_nodes = range.min;
  o->max_nodes = range.max;
  o->nnodes = range.max;
  o->rdzv_backend = parse_rdzv_backend(backend);
  const RdzvConf conf = parse_rdzv_conf(conf_text);
  if (conf.join_timeout) o->join_timeout = *conf.join_timeout;
  if (conf.last_call_timeout) o->last_call_timeout = *conf.last_call_timeout;
  if (conf.read_timeout) o->read_timeout = *conf.read_timeout;
  o->is_host = conf.is_host;
  if (o->run_id.empty()) throw std::invalid_argument("--rdzv-id is empty");
  if (o->rdzv_backend == RdzvBackend::kStatic) {
    if (range.min != range.max) {
      throw std::invalid_argument("--nnodes " + nnodes +
                                  ": a range of nodes needs --rdzv-backend c10d (static takes a fixed N)");
    }
    o->rdzv_host = o->master_addr;
    o->rdzv_port = o->master_port;
    if (!endpoint_text.empty()) {
      // As torchrun: the endpoint replaces --master-addr:--master-port, and
      // a static store has no default port.
      const Endpoint endpoint = parse_endpoint(endpoint_text);
      if (!endpoint.port) {
        throw std::invalid_argument("--rdzv-endpoint '" + endpoint_text +
                                    "' has no port; the static backend needs HOST:PORT");
      }
      o->rdzv_host = o->master_addr = endpoint.host;
      o->rdzv_port = o->master_port = *endpoint.port;
    }
    return;
  }
  const Endpoint endpoint = parse_endpoint(endpoint_text.empty() ? "localhost" : endpoint_text);
  o->rdzv_host = endpoint.host;
  o->rdzv_port = endpoint.port.value_or(kDefaultC10dPort);
  if (app.count("--node-rank") > 0) {
    std::fprintf(stderr,
                 "tdistrun: --node-rank is ignored with --rdzv-backend c10d (nodes are numbered in "
                 "the order they join)\n");
  }
  o->node_rank = 0;
}

}  // namespace

std::optional<LaunchOptions> parse_options(int argc, char** argv, int* exit_code) {
  LaunchOptions o;
  CLI::App app{"tdistrun: starts a tdist job, one process per rank, on this node (torchrun-compatible).",
               "tdistrun"};
  app.formatter(std::make_shared<UsageFormatter>());
  app.footer(
      "PROGRAM [ARGS...] follow the options; a PROGRAM ending in .py (or python3, python) runs under "
      "$TDIST_PYTHON, else the interpreter tdist was built for, else python3 in PATH.\n"
      "Every option also takes its underscore spelling (--nproc_per_node). See docs/launcher.md.");
  std::string nproc = "1";
  std::string bind_to = "auto";
  double grace_s = 5.0;
  double join_s = 300.0;
  double monitor_s = 5.0;
  std::string nnodes = "1";
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string rdzv_conf;
  std::string restart_policy = "all";
  bool no_auth = false;
  app.add_option(
         "--nproc-per-node,--nproc_per_node", nproc,
         "processes (ranks) on this node: a number, or 'auto'/'cpu' for one per CPU tdistrun may run on")
      ->default_str("1");
  app.add_option("--nnodes", nnodes,
                 "number of nodes (one tdistrun each): N, or MIN:MAX with --rdzv-backend c10d")
      ->default_str("1");
  app.add_option("--node-rank,--node_rank", o.node_rank,
                 "this node's index in [0, nnodes) (static backend; c10d numbers nodes in join order)")
      ->check(CLI::NonNegativeNumber)
      ->default_str("0");
  app.add_option("--master-addr,--master_addr", o.master_addr,
                 "address of node 0 (the node agents' store and the ranks' MASTER_ADDR)")
      ->default_str("127.0.0.1");
  app.add_option("--master-port,--master_port", o.master_port,
                 "port of node 0: the ranks' MASTER_PORT on one node; the agents' store on several")
      ->check(CLI::Range(1, 65535))
      ->default_str("29500");
  app.add_flag("--standalone", o.standalone,
               "one node; pick a free port on 127.0.0.1 (ignores --master-addr/--master-port)");
  app.add_option("--max-restarts,--max_restarts", o.max_restarts,
                 "restart the whole group up to N times after a failure")
      ->check(CLI::NonNegativeNumber)
      ->default_str("0");
  app.add_option("--restart-policy,--restart_policy", restart_policy,
                 "after a failure: 'all' restarts every rank, 'failed' only the rank that failed (one "
                 "node; implies --agent-store)")
      ->check(CLI::IsMember({"all", "failed"}))
      ->default_str("all");
  app.add_flag("--agent-store,--agent_store", o.agent_store,
               "tdistrun hosts the ranks' TCPStore (TORCHELASTIC_USE_AGENT_STORE=True): a rank's death "
               "leaves it up");
  app.add_flag(
      "--no-auth,--no_auth", no_auth,
      "do not make a token for the job: its store and transport connections are then not "
      "authenticated (unless TDIST_AUTH_TOKEN or TDIST_AUTH_TOKEN_FILE is set); see docs/security.md");
  app.add_option("--rdzv-backend,--rdzv_backend", rdzv_backend,
                 "how the nodes meet: 'static' (fixed --nnodes, each with --node-rank) or 'c10d' (nodes "
                 "join at --rdzv-endpoint and are numbered in join order)")
      ->default_str("static");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", rdzv_endpoint,
                 "HOST[:PORT] of the node agents' store (static: default --master-addr:--master-port; "
                 "c10d: default localhost, port 29400)");
  app.add_option("--rdzv-id,--rdzv_id", o.run_id,
                 "the job's id (TORCHELASTIC_RUN_ID); agents of one job share it")
      ->default_str("none");
  app.add_option(
      "--rdzv-conf,--rdzv_conf", rdzv_conf,
      "KEY=VALUE,...: join_timeout, last_call_timeout, read_timeout (seconds), is_host (true/false)");
  app.add_option("--monitor-interval,--monitor_interval", monitor_s,
                 "accepted for torchrun command lines; tdistrun learns of exits at once")
      ->check(CLI::Range(0.0, 86400.0))
      ->default_str("5");
  app.add_option("--role", o.role, "the ranks' ROLE_NAME")->default_str("default");
  app.add_flag("--use-env,--use_env,!--no-use-env,!--no_use_env", o.use_env,
               "--use-env (default, as torchrun): the program reads LOCAL_RANK; --no-use-env: it also gets "
               "--local-rank=N as its first argument (torch.distributed.launch)");
  app.add_option("--log-dir,--log_dir", o.log_dir,
                 "write each rank's stdout and stderr to DIR/attempt_K/rank_N.{stdout,stderr}.log");
  app.add_flag("--tee{3}", o.tee,
               "with --log-dir, also print to the console: --tee (both), --tee=1 stdout, --tee=2 stderr")
      ->check(CLI::Range(0, 3));
  app.add_flag("--no-python,--no_python", o.no_python, "run PROGRAM directly even if it ends in .py");
  app.add_flag("-m,--module", o.module,
               "PROGRAM is a Python module: run PYTHON -m PROGRAM (PYTHON as for .py programs)");
  app.add_option(
         "--bind-to,--bind_to", bind_to,
         "'auto': if the ranks do not outnumber the CPUs tdistrun may run on, give each an equal share "
         "of them, whole cores where they divide (as mpirun binds 2 ranks); else as 'none'. 'core': "
         "pin local rank i to the i-th of those CPUs (modulo their number); 'none': leave the ranks "
         "to the scheduler")
      ->check(CLI::IsMember({"auto", "none", "core"}))
      ->default_str("auto");
  app.add_option("--grace-period,--grace_period", grace_s,
                 "seconds between SIGTERM and SIGKILL when stopping ranks")
      ->check(CLI::Range(0.0, 3600.0))
      ->default_str("5");
  app.add_option("--join-timeout,--join_timeout", join_s,
                 "seconds the node agents wait for each other (several nodes)")
      ->check(CLI::Range(1.0, 86400.0))
      ->default_str("300");
  // Everything from PROGRAM on belongs to the program.
  app.prefix_command();
  // Its errors name tdistrun, as every other message of the launcher does.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "tdistrun: " + std::string(e.what()) + "\nRun with --help for more information.\n";
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message; every usage error exits with 2 (its own
    // codes differ by kind: 105 for a value out of range), --help with 0.
    *exit_code = app.exit(e) == 0 ? 0 : kUsageError;
    return std::nullopt;
  }
  o.command = app.remaining();
  if (!o.command.empty() && o.command.front() == "--") o.command.erase(o.command.begin());
  if (o.command.empty()) {
    *exit_code = usage_error("no PROGRAM given: tdistrun [OPTIONS] PROGRAM [ARGS...]");
    return std::nullopt;
  }
  if (o.command.front().size() > 1 && o.command.front()[0] == '-' && app.remaining().front() != "--") {
    *exit_code =
        usage_error("unknown option '" + o.command.front() +
                    "' (put PROGRAM after the options, or use -- before a PROGRAM starting with '-')");
    return std::nullopt;
  }

  // The CPUs tdistrun may run on (taskset, a container's cpuset), for
  // --nproc-per-node auto and --bind-to core.
  const std::vector<int> cpus = detail::allowed_cpus();
  if (nproc == "auto" || nproc == "cpu") {
    // The machine's count only if the kernel would not say.
    o.nproc_per_node = !cpus.empty() ? static_cast<int>(cpus.size())
                                     : static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  } else {
    try {
      size_t used = 0;
      o.nproc_per_node = std::stoi(nproc, &used);
      if (used != nproc.size() || o.nproc_per_node < 1) throw std::invalid_argument(nproc);
    } catch (const std::exception&) {
      *exit_code =
          usage_error("--nproc-per-node must be a positive number, 'auto' or 'cpu', got '" + nproc + "'");
      return std::nullopt;
    }
  }
  if (bind_to == "core") {
    for (int cpu : cpus) o.bind_sets.push_back({cpu});
    if (o.bind_sets.empty()) {
      std::fprintf(
          stderr, "tdistrun: --bind-to core: cannot read the CPUs tdistrun may run on (sched_getaffinity)\n");
      *exit_code = 1;
      return std::nullopt;
    }
  } else if (bind_to == "auto" && o.nproc_per_node > 1 &&
             static_cast<size_t>(o.nproc_per_node) <= cpus.size()) {
    // Two ranks left to the scheduler at times run on one CPU, each waiting
    // for the other to be scheduled (a 2-rank 1 KiB all_reduce took 8 us
    // in 2 rounds of 5 instead of 0.4); bound, they never do. More ranks
    // than CPUs stay unbound, as mpirun leaves them: waiting ranks then
    // hand their CPU over, and the scheduler balances better than a fixed
    // share (docs/launcher.md).
    o.bind_sets = detail::share_cpus(cpus, o.nproc_per_node);
  }
  o.grace_period = seconds_to_ms(grace_s);
  o.join_timeout = seconds_to_ms(join_s);

  try {
    parse_rendezvous(app, nnodes, rdzv_backend, rdzv_endpoint, rdzv_conf, &o);
  } catch (const std::invalid_argument& e) {
    *exit_code = usage_error(e.what());
    return std::nullopt;
  }
  o.node_rank_given = app.count("--node-rank") > 0 && !o.standalone;
  if (o.rdzv_backend == RdzvBackend::kStatic && o.node_rank >= o.nnodes) {
    *exit_code = usage_error("--node-rank must be in [0, " + std::to_string(o.nnodes) + "), got " +
                             std::to_string(o.node_rank));
    return std::nullopt;
  }
  if (o.module && o.no_python) {
    *exit_code = usage_error("--module runs python3 -m PROGRAM; it cannot be combined with --no-python");
    return std::nullopt;
  }
  if (o.master_addr.empty()) {
    *exit_code = usage_error("--master-addr is empty");
    return std::nullopt;
  }
  if (restart_policy == "failed") {
    // Restarting one rank while the others run needs a store that outlives
    // it (rank 0's would die with rank 0). Across nodes a lone restart would
    // have to be agreed with the other nodes' agents, which restart rounds
    // as a whole: not offered.
    if (o.max_nodes > 1) {
      *exit_code = usage_error(
          "--restart-policy=failed needs one node (--nnodes 1); with several nodes "
          "every rank restarts after a failure (--restart-policy=all)");
      return std::nullopt;
    }
    o.restart_failed_only = true;
    o.agent_store = true;
  }
  o.auth = !no_auth;
  return o;
}

}  // namespace tdist::launcher
