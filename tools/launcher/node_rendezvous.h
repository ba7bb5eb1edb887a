#pragma once

// How the tdistrun agents of a multi-node job meet and agree. The agent of
// node 0 hosts a TCPStore at --master-addr:--master-port; every agent joins
// it, registers its --nproc-per-node and learns everyone else's, which fixes
// the global ranks (node order). Each attempt ("round") has its own keys:
//
//   tdistrun/node/<n>/claims   counter; a second agent with the same node rank is refused
//   tdistrun/node/<n>/nproc    ranks on node n
//   tdistrun/round/<k>/port    the ranks' MASTER_PORT in round k, picked free by agent 0
//   tdistrun/round/<k>/ok      counter of nodes whose ranks all exited 0
//   tdistrun/round/<k>/end     how round k ended, first writer wins:
//                              "ok", "failed <node> <summary>", "interrupted <node> <summary>"
//   tdistrun/exit, exit/all    the agents' exit barrier (agent 0 hosts the store, so it leaves last)
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

class NodeRendezvous {
 public:
  /// Joins (node 0: hosts) the agents' store and learns every node's size.
  /// Raises DistError (store errors, a node rank claimed twice) on failure.
  explicit NodeRendezvous(const LaunchOptions& options);
  ~NodeRendezvous();
  NodeRendezvous(const NodeRendezvous&) = delete;
  NodeRendezvous& operator=(const NodeRendezvous&) = delete;

  int rank_offset() const { return rank_offset_; }
  int world_size() const { return world_size_; }

  /// The ranks' MASTER_PORT for round `round`: agent 0 picks a free one and
  /// publishes it, the others wait for it. nullopt if the round was ended
  /// before it began (another node gave up: see end_of()) or `interrupted()`
  /// turned true while waiting.
  std::optional<int> round_port(int round, const std::function<bool()>& interrupted);
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

  /// Every agent says it is leaving; agent 0 waits (up to `timeout`) for the
  /// others, so its store outlives their last request. Errors are ignored:
  /// this is the way out.
  void exit_barrier(std::chrono::milliseconds timeout);

 private:
  void watch(const std::string& key);

  LaunchOptions options_;
  std::unique_ptr<TCPStore> store_;
  int rank_offset_ = 0;
  int world_size_ = 0;
  int event_fd_ = -1;
  std::thread watcher_;
  std::atomic<bool> stop_watch_{false};
  std::mutex mutex_;
  std::optional<RoundEnd> end_;  // guarded by mutex_
};

}  // namespace tdist::launcher
