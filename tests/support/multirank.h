#pragma once

// Runs one test body on N ranks, either as threads (fast, shares memory) or as
// forked processes (real isolation: a rank can be killed). Both have a
// deadline: a rank that hangs is killed and reported, never waited for.

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "launcher/process_util.h"
#include "tdist/store.h"

namespace tdist::testing {

/// What happened to one rank.
struct RankOutcome {
  int rank = -1;
  bool ok = false;         // returned normally
  int exit_code = -1;      // forked only: the exit status, if it exited
  int signal = 0;          // forked only: the signal that ended it, if any
  bool timed_out = false;  // killed at the deadline
  std::string error;       // what() of the exception it threw, if any
};

using RankFn = std::function<void(int rank)>;

/// Runs fn(rank) for rank in [0, n) on threads; returns after all finished.
/// A rank that is still running at the deadline cannot be killed: the process
/// aborts with a message naming it (ctest reports that as a failure).
std::vector<RankOutcome> run_threads(int n, const RankFn& fn,
                                     std::chrono::milliseconds deadline = std::chrono::seconds(60));

/// Runs fn(rank) in n forked children; a child that is still running at the
/// deadline is killed with SIGKILL and marked timed_out.
std::vector<RankOutcome> run_forked(int n, const RankFn& fn,
                                    std::chrono::milliseconds deadline = std::chrono::seconds(60));

/// "" if every rank succeeded, else one line per failed rank.
std::string describe_failures(const std::vector<RankOutcome>& outcomes);

enum class Mode { kThreads, kProcesses };
inline const char* mode_name(Mode mode) {
  return mode == Mode::kThreads ? "threads" : "processes";
}

/// Runs in the given mode and returns describe_failures(); use as
/// EXPECT_EQ(run_ranks(...), "").
std::string run_ranks(Mode mode, int n, const RankFn& fn,
                      std::chrono::milliseconds deadline = std::chrono::seconds(60));

/// A port that was free a moment ago, below the kernel's ephemeral range
/// when there is room (the library's, as tdistrun --standalone picks them).
using launcher::pick_free_port;

/// A TCP socket bound to 127.0.0.1 on a free port, not yet listening: hand
/// `fd` to a TCPStore master as master_listen_fd so that no other process can
/// take the port between picking and listening. The caller closes `fd` in
/// processes that do not use it.
struct ReservedPort {
  int fd = -1;
  int port = 0;
};
ReservedPort reserve_port();

/// The last barrier of a job whose rank 0 hosts a TCPStore: returns on rank
/// 0 only after every other rank's last request has been answered, so the
/// server can go away without cutting anyone off. Keys live under `name`.
void exit_barrier(Store& store, int rank, int world_size, const std::string& name = "exit");

/// Runs fn(store, rank) on n ranks that share one store: a HashStore when
/// ranks are threads, a FileStore when they are processes. What fn returns
/// (connections, groups) is kept alive until every rank has passed a store
/// barrier after fn, so no rank tears down what another still uses. A rank
/// whose fn throws opens that barrier for the others at once, so a failure
/// is reported as itself, not as the others' store timeouts.
using KeepAlive = std::shared_ptr<void>;
std::string run_with_store(Mode mode, int n, const std::function<KeepAlive(Store& store, int rank)>& fn,
                           std::chrono::milliseconds deadline = std::chrono::seconds(60),
                           std::chrono::milliseconds store_timeout = std::chrono::seconds(60));

/// A fresh path under TMPDIR (or /tmp) that does not exist yet.
std::string temp_path(const std::string& stem);

}  // namespace tdist::testing
