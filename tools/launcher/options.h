#pragma once

// tdistrun's command line (docs/launcher.md lists every option).

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace tdist::launcher {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;
  int max_restarts = 0;
  /// True: ranks read LOCAL_RANK only; false: they also get --local-rank=N.
  bool use_env = false;
  /// Per-rank log files go under this directory; empty: console only.
  std::string log_dir;
  /// With log_dir: which streams also go to the console (1 stdout, 2 stderr,
  /// 3 both, 0 none).
  int tee = 0;
  /// Run the program as is even if it ends in .py.
  bool no_python = false;
  /// The program is a Python module name (python3 -m).
  bool module = false;
  /// --bind-to: local rank i runs on the CPUs bind_sets[i % size] (core:
  /// one CPU each; auto: a share of them, detail::share_cpus). Empty: the
  /// scheduler places the ranks.
  std::vector<std::vector<int>> bind_sets;
  /// SIGTERM to SIGKILL.
  std::chrono::milliseconds grace_period{5000};
  /// How long node agents wait for each other.
  std::chrono::milliseconds join_timeout{std::chrono::seconds(300)};
  /// PROGRAM followed by its arguments.
  std::vector<std::string> command;
};

/// Parses argv. On --help or a usage error prints what CLI11 prints and
/// returns the exit code in *exit_code with nullopt.
std::optional<LaunchOptions> parse_options(int argc, char** argv, int* exit_code);

}  // namespace tdist::launcher
