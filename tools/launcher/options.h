#pragma once

// tdistrun's command line (docs/launcher.md lists every option).

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace tdist::launcher {

/// How the node agents of a job find each other (--rdzv-backend).
enum class RdzvBackend {
  /// Fixed --nnodes N, each node with its --node-rank (torchrun's "static").
  kStatic,
  /// Nodes join an agents' store at --rdzv-endpoint; node ranks follow the
  /// join order, MIN to MAX nodes (torchrun's "c10d").
  kC10d,
};

struct LaunchOptions {
  int nproc_per_node = 1;
  /// --nnodes MIN:MAX (plain N: N:N).
  int min_nodes = 1;
  int max_nodes = 1;
  /// The number of nodes of a static job (max_nodes); c10d jobs learn theirs
  /// at each rendezvous.
  int nnodes = 1;
  /// Static backend: this node's index; c10d: ignored (join order decides).
  int node_rank = 0;
  /// Whether --node-rank was given (its absence on a second node is the
  /// usual cause of two node 0s, which the error then says).
  bool node_rank_given = false;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;
  int max_restarts = 0;
  /// --restart-policy failed: a rank that fails is restarted alone (same
  /// rank), the others keep running; false (all): every rank restarts.
  bool restart_failed_only = false;
  /// --agent-store (implied by --restart-policy=failed): node 0's agent
  /// hosts the ranks' TCPStore at MASTER_PORT, every rank only connects
  /// (TORCHELASTIC_USE_AGENT_STORE=True), so a rank's death leaves it up.
  bool agent_store = false;
  /// Make a token for the job when it has none (job_token.h); --no-auth:
  /// false.
  bool auth = true;
  RdzvBackend rdzv_backend = RdzvBackend::kStatic;
  /// Where the agents' store is: --rdzv-endpoint, else (static)
  /// --master-addr:--master-port, else (c10d) localhost:29400.
  std::string rdzv_host;
  int rdzv_port = 0;
  /// --rdzv-id: the run's name, TORCHELASTIC_RUN_ID and the prefix of the
  /// agents' keys.
  std::string run_id = "none";
  /// c10d: after MIN nodes joined, how long to wait for more (rdzv-conf
  /// last_call_timeout).
  std::chrono::milliseconds last_call_timeout{std::chrono::seconds(30)};
  /// c10d: host the agents' store (true), only join it (false), or try to
  /// host and join if the port is taken (unset; rdzv-conf is_host).
  std::optional<bool> is_host;
  /// --role: ROLE_NAME of every rank.
  std::string role = "default";
  /// True (default, torchrun): ranks read LOCAL_RANK; false (--no-use-env,
  /// torch.distributed.launch): they also get --local-rank=N.
  bool use_env = true;
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
  /// How long node agents wait for each other (--join-timeout, rdzv-conf
  /// join_timeout).
  std::chrono::milliseconds join_timeout{std::chrono::seconds(300)};
  /// How long a node agent waits on the agents' store once the ranks run
  /// (reporting the round's end, the exit barrier): rdzv-conf read_timeout,
  /// 60 s as torchrun's. A node whose link to the store is cut leaves then.
  std::chrono::milliseconds read_timeout{std::chrono::seconds(60)};
  /// PROGRAM followed by its arguments.
  std::vector<std::string> command;
};

/// Parses argv. On --help or a usage error prints what CLI11 prints and
/// returns the exit code in *exit_code with nullopt.
std::optional<LaunchOptions> parse_options(int argc, char** argv, int* exit_code);

}  // namespace tdist::launcher
