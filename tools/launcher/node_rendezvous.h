#pragma once

// How the tdistrun agents of a multi-node job meet and agree, through a
// TCPStore (the "agents' store") at the rendezvous endpoint. Every key is
// under tdistrun/<run id>/, so jobs with different --rdzv-id can share one
// store. Each attempt ("round") has its own keys:
//
//   static backend (fixed --nnodes, node 0 hosts the store):
//     node/<n>/claims        counter; a second agent with the same node rank is refused
//     node/<n>/nproc         ranks on node n
//   c10d backend (MIN:MAX nodes, numbered in join order; the first agent
//   that can bind the endpoint hosts the store):
//     latest                 the newest round a node may join; only ever raised
//     rdzv/<k>/joined        counter: the join order of round k
//     rdzv/<k>/node/<i>      ranks on the i-th node to join round k
//     rdzv/<k>/closed        how many nodes round k has, first writer wins: once
//                            MAX joined, or last_call_timeout after MIN joined
//   both:
//     round/<k>/port, addr   the ranks' MASTER_PORT/MASTER_ADDR in round k, set by node 0
//     round/<k>/ok           counter of nodes whose ranks all exited 0
//     round/<k>/end          how round k ended, first writer wins:
//                            "ok", "failed <node> <summary>", "interrupted <node> <summary>"
//     exit, exit/all         the agents' exit barrier (the host leaves last)
//   c10d:
//     standby, standby/<t>/gone
//                            ticket t of a node refused as too late, and that it
//                            stopped waiting (the host also waits for those)
//
// Each agent watches round/<k>/end from a thread and hears about it through
// an eventfd, so its event loop never polls the store.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "options.h"
#include "tdist/tcp_store.h"

namespace tdist::launcher {

/// How a round ended, as written to round/<k>/end.
struct RoundEnd {
  enum class Kind { kOk, kFailed, kInterrupted, kLost };
  Kind kind = Kind::kOk;
  int node = -1;        // the node that ended it (failed / interrupted)
  std::string summary;  // what happened there; for kLost, the store error
};

/// What came of joining a round.
enum class JoinResult {
  kJoined,
  kInterrupted,  // `interrupted()` turned true while waiting
  kTooLate,      // c10d: the round closed without this node (see refusal())
};

/// Where the ranks of a round meet (their MASTER_ADDR and MASTER_PORT).
struct RoundMaster {
  std::string addr;
  int port = 0;
};

class NodeRendezvous {
 public:
  /// Joins (or hosts) the agents' store; static: also claims the node rank
  /// and learns every node's size. Raises DistError (store errors, a node
  /// rank claimed twice) on failure.
  explicit NodeRendezvous(const LaunchOptions& options);
  ~NodeRendezvous();
  NodeRendezvous(const NodeRendezvous&) = delete;
  NodeRendezvous& operator=(const NodeRendezvous&) = delete;

  /// The first round this node can take part in (c10d: a node that comes
  /// while the others restart joins their round).
  int first_round();
  /// The membership of round `round`: static: the fixed nodes; c10d: waits
  /// for MIN..MAX nodes to join, and says when the last call begins. kTooLate
  /// if the round closed without this node (refusal() says why). Raises
  /// DistTimeoutError if too few nodes came within the join timeout.
  JoinResult join(int round, const std::function<bool()>& interrupted);
  /// Why the last join() was kTooLate (one line, no "tdistrun: ").
  const std::string& refusal() const { return refusal_; }
  /// True if this agent hosts the agents' store: it must outlive the others.
  bool hosting() const { return hosting_; }
  /// After kTooLate: this node stops waiting for the round (it joins the
  /// next one or leaves), so the store's host need not wait for it any more.
  void leave_standby();

  /// This node's rank and the node count of the joined round.
  int node_rank() const { return node_rank_; }
  int nnodes() const { return nnodes_; }
  int rank_offset() const { return rank_offset_; }
  int world_size() const { return world_size_; }

  /// The ranks' master for round `round`: node 0 picks a free port (and,
  /// c10d, names its address) and publishes it, the others wait for it.
  /// nullopt if the round was ended before it began (another node gave up:
  /// see end_of()) or `interrupted()` turned true while waiting.
  std::optional<RoundMaster> round_master(int round, const std::function<bool()>& interrupted);
  /// The end of `round` if it is known already.
  std::optional<RoundEnd> end_of(int round);

  /// Starts watching round/<round>/end; watch_fd() becomes readable when it
  /// is known (or the store is lost).
  void start_watch(int round);
  int watch_fd() const { return event_fd_; }
  /// The end of the watched round; call once watch_fd() is readable. Joins
  /// the watcher.
  RoundEnd watched_end();
  /// Stops watching (sets nothing; the watcher leaves at its next wake-up).
  void stop_watch();

  /// This node's ranks all exited 0 in `round`; the last node to say so
  /// ends the round "ok".
  void report_success(int round);
  /// Ends `round` (unless someone did already) as failed or interrupted.
  void report_end(int round, RoundEnd::Kind kind, const std::string& summary);

  /// Every agent says it is leaving; the store's host waits (up to
  /// `timeout`) for the others, so its store outlives their last request.
  /// Errors are ignored: this is the way out.
  void exit_barrier(std::chrono::milliseconds timeout);
  /// The exit of a node that is in no round (it came too late): it is not
  /// counted, but if it hosts the store it waits (up to `timeout`) until the
  /// nodes of the last round have passed the barrier.
  void wait_for_exit(std::chrono::milliseconds timeout);

 private:
  void join_static();
  JoinResult join_c10d(int round, const std::function<bool()>& interrupted);
  void connect_c10d_store();
  /// The host's wait (until `deadline`) for every node refused so far to
  /// have stopped waiting: they learn how the run ended from the store.
  void wait_for_standby(std::chrono::steady_clock::time_point deadline);
  /// Raises `latest` to `round` unless it is higher already.
  void raise_latest(int round);
  /// --nnodes as the user wrote it: N, or MIN:MAX.
  std::string nnodes_text() const;
  /// Waits for `key`, in slices so that `interrupted` is heard; false at
  /// `deadline` or when interrupted.
  bool wait_for(const std::string& key, std::chrono::steady_clock::time_point deadline,
                const std::function<bool()>& interrupted);
  void watch(const std::string& key);
  std::string key(const std::string& rest) const { return prefix_ + rest; }

  LaunchOptions options_;
  std::string prefix_;
  std::unique_ptr<TCPStore> store_;
  bool hosting_ = false;
  int node_rank_ = 0;
  int nnodes_ = 1;
  int rank_offset_ = 0;
  int world_size_ = 0;
  int event_fd_ = -1;
  std::thread watcher_;
  std::atomic<bool> stop_watch_{false};
  std::mutex mutex_;
  std::optional<RoundEnd> end_;  // guarded by mutex_
  std::string refusal_;
  int standby_ticket_ = 0;  // set while refused (kTooLate), 0 otherwise
};

}  // namespace tdist::launcher
