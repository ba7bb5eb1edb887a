#pragma once

// The tdistrun agent of one node: runs the node's ranks, attempt after
// attempt, until they succeed, fail for good, or the launcher is told to
// stop; with several nodes it agrees on all that through NodeRendezvous.

#include <signal.h>

#include <memory>
#include <optional>
#include <string>

#include "command.h"
#include "node_rendezvous.h"
#include "options.h"
#include "worker_group.h"

namespace tdist::launcher {

class Agent {
 public:
  /// `signal_fd`: a signalfd for SIGINT, SIGTERM and SIGHUP (blocked in the
  /// launcher); `child_mask`: the signal mask ranks start with.
  Agent(LaunchOptions options, ResolvedCommand command, int signal_fd, const sigset_t& child_mask);
  ~Agent();

  /// Runs the job; returns the launcher's exit code: 0 success, 1 failure,
  /// 128+N after signal N.
  int run();

 private:
  enum class Outcome { kSucceeded, kFailed, kRemoteFailed, kInterrupted, kRemoteInterrupted, kLost };
  struct RoundResult {
    Outcome outcome = Outcome::kSucceeded;
    int signal = 0;       // kInterrupted: the signal the launcher got
    std::string summary;  // one line: what ended the round
  };

  RoundResult run_round(int attempt, const std::string& master_addr, int master_port);
  /// c10d: this node came too late for round `attempt`; waits for how that
  /// round ends. nullopt: the run restarts, join round attempt + 1; else the
  /// launcher's exit code.
  std::optional<int> wait_out_round(int attempt);
  /// Joins the agents' store (several nodes), answering stop signals.
  void connect_nodes();
  int node_rank() const { return nodes_ ? nodes_->node_rank() : 0; }
  int nnodes() const { return nodes_ ? nodes_->nnodes() : 1; }
  std::string describe_worker(const Worker& worker) const;
  void print_failure_report(const WorkerGroup& group, int attempt) const;

  LaunchOptions options_;
  ResolvedCommand command_;
  int signal_fd_;
  sigset_t child_mask_;
  std::unique_ptr<NodeRendezvous> nodes_;
  std::string hostname_;
};

}  // namespace tdist::launcher
