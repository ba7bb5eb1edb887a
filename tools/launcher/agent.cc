#include "agent.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/signalfd.h>

#include <unistd.h>
#include <utility>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

#include "common/env.h"
#include "common/error_text.h"
#include "launcher/process_util.h"
#include "tdist/errors.h"
#include "tdist/tcp_store.h"

namespace tdist::launcher {
namespace {

using Clock = std::chrono::steady_clock;

void say(const std::string& line) {
  console_write(2, "tdistrun: " + line + "\n");
}

std::string seconds_text(std::chrono::milliseconds ms) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g s", static_cast<double>(ms.count()) / 1000.0);
  return buffer;
}

std::string plural(int n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// Who ended a round: a node of it, or (-1) the store's host that was not
// admitted to it.
std::string reporter(const RoundEnd& end) {
  return end.node >= 0 ? "node " + std::to_string(end.node) : "the node agents' store's host";
}

// A stop signal read from the signalfd by stop_signal_pending, not yet taken.
int g_stashed_signal = 0;

int read_signal(int signal_fd) {
  signalfd_siginfo info{};
  for (;;) {
    ssize_t n = read(signal_fd, &info, sizeof(info));
    if (n == static_cast<ssize_t>(sizeof(info))) return static_cast<int>(info.ssi_signo);
    if (n < 0 && errno == EINTR) continue;
    return 0;
  }
}

// True if a stop signal waits. SIGUSR1 (which only the running ranks
// care about: tdist dumps its flight recorder) is dropped while no rank runs.
bool stop_signal_pending(int signal_fd) {
  while (g_stashed_signal == 0) {
    pollfd fd{signal_fd, POLLIN, 0};
    if (poll(&fd, 1, 0) <= 0) return false;
    const int sig = read_signal(signal_fd);
    if (sig != SIGUSR1) g_stashed_signal = sig;
  }
  return true;
}

// Takes one signal from the signalfd (a stashed stop signal first); 0 if none.
int take_signal(int signal_fd) {
  if (g_stashed_signal != 0) return std::exchange(g_stashed_signal, 0);
  return read_signal(signal_fd);
}

}  // namespace

Agent::Agent(LaunchOptions options, ResolvedCommand command, int signal_fd, const sigset_t& child_mask)
    : options_(std::move(options)),
      command_(std::move(command)),
      signal_fd_(signal_fd),
      child_mask_(child_mask) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  hostname_ = host;
}

Agent::~Agent() = default;

std::string Agent::describe_worker(const Worker& worker) const {
  std::string where = "local rank " + std::to_string(worker.local_rank);
  if (nodes_) where += " on node " + std::to_string(node_rank()) + " (" + hostname_ + ")";
  return "rank " + std::to_string(worker.rank) + " (" + where + ", pid " + std::to_string(worker.pid) + ")";
}

void Agent::connect_nodes() {
  // Connecting waits for the other nodes (static: all of them); Ctrl-C must
  // still work meanwhile, and no rank exists yet, so it may simply end the
  // launcher.
  std::unique_ptr<NodeRendezvous> joined;
  std::exception_ptr error;
  int done[2];
  if (pipe2(done, O_CLOEXEC) != 0) throw DistError("tdistrun: pipe failed: " + errno_text(errno));
  std::thread joiner([&] {
    try {
      joined = std::make_unique<NodeRendezvous>(options_);
    } catch (...) {
      error = std::current_exception();
    }
    (void)write_all(done[1], "x", 1);
  });
  pollfd fds[2] = {{done[0], POLLIN, 0}, {signal_fd_, POLLIN, 0}};
  while ((poll(fds, 2, -1) < 0 && errno == EINTR) ||
         (fds[0].revents == 0 && !stop_signal_pending(signal_fd_))) {
  }
  if (fds[0].revents == 0) {
    int sig = take_signal(signal_fd_);
    say("got " + signal_name(sig) + " while waiting for the other nodes; no rank was started");
    _exit(128 + sig);  // the joiner cannot be cancelled; nothing else needs cleaning up
  }
  joiner.join();
  close(done[0]);
  close(done[1]);
  if (error) std::rethrow_exception(error);
  nodes_ = std::move(joined);
}

int Agent::run() {
  if (options_.max_nodes > 1) connect_nodes();
  auto leave = [&](int code) {
    if (nodes_) nodes_->exit_barrier(options_.grace_period + std::chrono::seconds(30));
    return code;
  };
  auto interrupted = [&] { return stop_signal_pending(signal_fd_); };
  // Between rounds no rank runs: a stop signal ends the launcher, after
  // telling the other nodes.
  auto stop_between_rounds = [&](int attempt) {
    int sig = take_signal(signal_fd_);
    say("got " + signal_name(sig) + " between attempts; no rank is running");
    nodes_->report_end(attempt, RoundEnd::Kind::kInterrupted, "tdistrun got " + signal_name(sig));
    return leave(128 + sig);
  };

  for (int attempt = nodes_ ? nodes_->first_round() : 0;; ++attempt) {
    std::string addr = options_.master_addr;
    int port = options_.master_port;
    if (nodes_) {
      // c10d: every attempt is a new rendezvous, which may take other nodes
      // (up to MAX) and number them anew.
      const JoinResult joined = nodes_->join(attempt, interrupted);
      if (joined == JoinResult::kInterrupted) return stop_between_rounds(attempt);
      if (joined == JoinResult::kTooLate) {
        if (std::optional<int> code = wait_out_round(attempt)) return *code;
        continue;  // the run restarts: join its next rendezvous
      }
      std::optional<RoundMaster> published = nodes_->round_master(attempt, interrupted);
      if (!published) {
        if (interrupted()) return stop_between_rounds(attempt);
        RoundEnd end = nodes_->end_of(attempt).value_or(RoundEnd{RoundEnd::Kind::kLost, -1, "no end"});
        say(reporter(end) + " ended attempt " + std::to_string(attempt) + " before it began: " + end.summary);
        if (end.kind == RoundEnd::Kind::kFailed && attempt < options_.max_restarts) continue;
        return leave(1);
      }
      addr = published->addr;
      port = published->port;
    } else if (options_.standalone || options_.rdzv_backend == RdzvBackend::kC10d) {
      // No agents' store: a free port per attempt, so that a restart never
      // meets the old attempt's keys.
      port = pick_free_port();
    }

    RoundResult result = run_round(attempt, addr, port);
    switch (result.outcome) {
      case Outcome::kSucceeded:
        return leave(0);
      case Outcome::kInterrupted:
        if (nodes_) {
          // Also end the next round, so that a node restarting after a
          // failure that raced with this signal stops at once.
          nodes_->report_end(attempt + 1, RoundEnd::Kind::kInterrupted, result.summary);
        }
        return leave(128 + result.signal);
      case Outcome::kRemoteInterrupted:
      case Outcome::kLost:
        return leave(1);
      case Outcome::kFailed:
      case Outcome::kRemoteFailed:
        // --restart-policy=failed spent its restarts on single ranks.
        if (options_.restart_failed_only) {
          if (options_.max_restarts > 0) say("giving up after " + plural(options_.max_restarts, "restart"));
          return leave(1);
        }
        if (attempt < options_.max_restarts) {
          say("restarting all ranks (restart " + std::to_string(attempt + 1) + " of " +
              std::to_string(options_.max_restarts) + ")");
          continue;
        }
        if (options_.max_restarts > 0) say("giving up after " + plural(options_.max_restarts, "restart"));
        return leave(1);
    }
  }
}

std::optional<int> Agent::wait_out_round(int attempt) {
  // As a late torchrun node, this one waits for the run's next rendezvous,
  // which comes after a failure with restarts left. Meanwhile it must not
  // leave if it hosts the agents' store: the running nodes need it until
  // they have passed the exit barrier.
  const bool hosting = nodes_->hosting();
  const auto exit_timeout = options_.grace_period + std::chrono::seconds(30);
  const std::string run = "run '" + options_.run_id + "'";
  say(nodes_->refusal() + "; this node was not admitted and waits for the run's next rendezvous (after a " +
      "failure, if restarts are left)" +
      (hosting ? "; it hosts the node agents' store, which the running nodes need, and serves it meanwhile"
               : ""));
  nodes_->start_watch(attempt);
  // However this ends, the store's host need not wait for this node after.
  struct LeaveStandby {
    NodeRendezvous* nodes;
    ~LeaveStandby() { nodes->leave_standby(); }
  } leave_standby{nodes_.get()};
  for (;;) {
    pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {nodes_->watch_fd(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      throw DistError("tdistrun: poll failed: " + errno_text(errno));
    }
    if (fds[0].revents != 0 && stop_signal_pending(signal_fd_)) {
      nodes_->stop_watch();
      const int sig = take_signal(signal_fd_);
      if (!hosting) {
        say("got " + signal_name(sig) + " while waiting to be admitted; no rank was started");
        return 128 + sig;
      }
      // The store leaves with this launcher, so the run cannot go on: it is
      // ended as if a node of it had been stopped, and this node leaves
      // after the others, as a host does.
      say("got " + signal_name(sig) + " while waiting to be admitted; this node hosts the node agents' " +
          "store, so the " + run + " is stopped too");
      const std::string summary = "tdistrun hosting the node agents' store (on " + hostname_ +
                                  ", not admitted to the run) got " + signal_name(sig);
      try {
        nodes_->report_end(attempt, RoundEnd::Kind::kInterrupted, summary);
        nodes_->report_end(attempt + 1, RoundEnd::Kind::kInterrupted, summary);
      } catch (const std::exception& e) {
        say(std::string("could not tell the other nodes: ") + e.what());
      }
      nodes_->leave_standby();
      nodes_->wait_for_exit(exit_timeout);
      return 128 + sig;
    }
    if (fds[1].revents == 0) continue;
    const RoundEnd end = nodes_->watched_end();
    switch (end.kind) {
      case RoundEnd::Kind::kFailed:
        if (attempt < options_.max_restarts) {
          say(run + " restarts after a failure; this node joins its next rendezvous");
          return std::nullopt;
        }
        say(run + " failed without this node, with no restarts left (" + end.summary + ")");
        break;
      case RoundEnd::Kind::kOk:
        say(run + " ended without this node (every rank exited 0); this node started no rank");
        break;
      case RoundEnd::Kind::kInterrupted:
        say(run + " was stopped without this node (" + end.summary + ")");
        break;
      case RoundEnd::Kind::kLost:
        say("lost the node agents' store: " + end.summary);
        return 1;
    }
    nodes_->leave_standby();
    nodes_->wait_for_exit(exit_timeout);
    return 1;
  }
}

Agent::RoundResult Agent::run_round(int attempt, const std::string& master_addr, int master_port) {
  GroupSpec spec;
  spec.command = &command_;
  spec.use_env = options_.use_env;
  spec.nproc = options_.nproc_per_node;
  spec.rank_offset = nodes_ ? nodes_->rank_offset() : 0;
  spec.world_size = nodes_ ? nodes_->world_size() : options_.nproc_per_node;
  spec.node_rank = node_rank();
  spec.nnodes = nnodes();
  spec.master_addr = master_addr;
  spec.master_port = master_port;
  spec.attempt = attempt;
  spec.max_restarts = options_.max_restarts;
  spec.agent_store = options_.agent_store;
  spec.run_id = options_.run_id;
  spec.role = options_.role;
  spec.log_dir = options_.log_dir;
  spec.tee = options_.tee;
  spec.child_signal_mask = child_mask_;
  spec.bind_sets = options_.bind_sets;
  // --agent-store: node 0's agent serves the ranks' store for the round,
  // so that it outlives any rank (rank 0 only connects to it). A new store
  // per round: a whole-group restart never meets the old round's keys.
  std::unique_ptr<TCPStore> rank_store;
  if (options_.agent_store && node_rank() == 0) {
    TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(master_port);
    store_options.is_master = true;
    store_options.wait_for_workers = false;
    try {
      rank_store = std::make_unique<TCPStore>(master_addr, store_options);
    } catch (const std::exception& e) {
      RoundResult failed;
      failed.outcome = Outcome::kFailed;
      failed.summary = "could not host the ranks' store at " + master_addr + ":" +
                       std::to_string(master_port) + ": " + e.what();
      say(failed.summary);
      if (nodes_) nodes_->report_end(attempt, RoundEnd::Kind::kFailed, failed.summary);
      return failed;
    }
  }
  WorkerGroup group(spec);
  int lone_restarts = 0;  // --restart-policy=failed: ranks restarted alone so far

  RoundResult result;
  bool decided = false;  // result.outcome says what ended the round
  bool stopping = false;
  bool killed = false;
  bool reported_ok = false;
  bool watching = false;
  Clock::time_point kill_at{};

  auto begin_stop = [&] {
    if (stopping) return;
    stopping = true;
    group.set_stopping();
    int running = group.running();
    if (running > 0) {
      say("stopping " + plural(running, "rank") + " (SIGTERM, then SIGKILL after " +
          seconds_text(options_.grace_period) + ")");
      group.signal_all(SIGTERM);
    }
    kill_at = Clock::now() + options_.grace_period;
  };
  // Store trouble while telling the other nodes: this node cannot go on.
  auto store_call = [&](const std::function<void()>& call) {
    try {
      call();
    } catch (const std::exception& e) {
      say(std::string("lost the node agents' store: ") + e.what());
      if (!decided) {
        result.outcome = Outcome::kLost;
        decided = true;
      }
      watching = false;
      begin_stop();
    }
  };

  try {
    group.start();
  } catch (const std::exception& e) {
    say(e.what());
    result.outcome = Outcome::kFailed;
    result.summary = std::string("could not start the ranks: ") + e.what();
    decided = true;
    if (nodes_) store_call([&] { nodes_->report_end(attempt, RoundEnd::Kind::kFailed, result.summary); });
    begin_stop();
  }
  if (nodes_ && !stopping) {
    nodes_->start_watch(attempt);
    watching = true;
  }

  for (;;) {
    if (group.all_exited()) {
      if (stopping) break;
      if (!nodes_) {
        result.outcome = Outcome::kSucceeded;
        break;
      }
      if (!reported_ok) {
        reported_ok = true;
        store_call([&] { nodes_->report_success(attempt); });
        if (stopping) break;
      }
    }

    std::vector<pollfd> fds;
    fds.push_back({signal_fd_, POLLIN, 0});
    size_t watch_index = fds.size();
    if (watching) fds.push_back({nodes_->watch_fd(), POLLIN, 0});
    group.add_pollfds(&fds);
    int timeout_ms = -1;
    if (stopping && !killed) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(kill_at - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      throw DistError("tdistrun: poll failed: " + errno_text(errno));
    }

    if (fds[0].revents != 0) {
      int sig = take_signal(signal_fd_);
      if (sig == SIGUSR1) {
        // The ranks' flight recorders dump (TDIST_TRACE_DIR): one signal to
        // the launcher reaches the whole node.
        // The ranks are this process's children: without TDIST_TRACE_DIR
        // they dump into the default directory named after this pid.
        const auto dir = env_string("TDIST_TRACE_DIR");
        const auto tmp = env_string("TMPDIR");
        say("got SIGUSR1; passing it to every rank (their flight recorders go to " +
            (dir ? *dir : tmp.value_or("/tmp") + "/tdist-trace-" + std::to_string(getpid())) + ")");
        group.signal_all(SIGUSR1);
      } else if (sig != 0 && result.outcome != Outcome::kInterrupted) {
        say("got " + signal_name(sig) + "; stopping every rank");
        result.outcome = Outcome::kInterrupted;
        result.signal = sig;
        result.summary = "tdistrun on node " + std::to_string(node_rank()) + " (" + hostname_ + ") got " +
                         signal_name(sig);
        decided = true;
        if (nodes_) {
          store_call([&] { nodes_->report_end(attempt, RoundEnd::Kind::kInterrupted, result.summary); });
        }
        begin_stop();
      } else if (sig != 0 && !killed) {
        say("got " + signal_name(sig) + " again; killing every rank now");
        group.signal_all(SIGKILL);
        killed = true;
      }
    }

    group.handle(fds);
    // --restart-policy=failed: each failed rank starts again alone while
    // restarts are left; the others go on (they rebuild their groups with
    // it: reinit_process_group).
    while (options_.restart_failed_only && !stopping && !group.failures().empty() &&
           lone_restarts < options_.max_restarts) {
      const size_t index = group.failures().front();
      const Worker& worker = group.workers()[index];
      say(describe_worker(worker) + " " + describe_wait_status(worker.status) + "; restarting rank " +
          std::to_string(worker.rank) + " alone (restart " + std::to_string(lone_restarts + 1) + " of " +
          std::to_string(options_.max_restarts) + ")");
      ++lone_restarts;
      try {
        group.restart(index);
      } catch (const std::exception& e) {
        say(e.what());
        result.outcome = Outcome::kFailed;
        result.summary = std::string("could not restart a rank: ") + e.what();
        decided = true;
        begin_stop();
      }
    }
    if (!group.failures().empty() && !stopping) {
      const Worker& worker = group.workers()[group.failures().front()];
      std::string summary = describe_worker(worker) + " " + describe_wait_status(worker.status);
      say(summary);
      if (!decided) {
        result.outcome = Outcome::kFailed;
        result.summary = summary;
        decided = true;
      }
      if (nodes_) store_call([&] { nodes_->report_end(attempt, RoundEnd::Kind::kFailed, summary); });
      begin_stop();
    }

    if (watching && fds[watch_index].revents != 0) {
      watching = false;
      RoundEnd end = nodes_->watched_end();
      bool ours = end.node == node_rank();
      switch (end.kind) {
        case RoundEnd::Kind::kOk:
          if (!decided) {
            result.outcome = Outcome::kSucceeded;
            decided = true;
          }
          begin_stop();  // every rank has exited already; this ends the loop
          break;
        case RoundEnd::Kind::kFailed:
        case RoundEnd::Kind::kInterrupted:
          if (!ours && !decided) {
            bool failed = end.kind == RoundEnd::Kind::kFailed;
            say(reporter(end) + " reports: " + end.summary);
            result.outcome = failed ? Outcome::kRemoteFailed : Outcome::kRemoteInterrupted;
            result.summary = reporter(end) + ": " + end.summary;
            decided = true;
          }
          begin_stop();
          break;
        case RoundEnd::Kind::kLost:
          say("lost the node agents' store: " + end.summary);
          if (!decided) {
            result.outcome = Outcome::kLost;
            decided = true;
          }
          begin_stop();
          break;
      }
    }

    if (stopping && !killed && Clock::now() >= kill_at && group.running() > 0) {
      say(plural(group.running(), "rank") + " still running after " + seconds_text(options_.grace_period) +
          "; sending SIGKILL");
      group.signal_all(SIGKILL);
      killed = true;
    }
  }

  group.close_streams();
  if (nodes_) nodes_->stop_watch();
  if (!group.failures().empty()) print_failure_report(group, attempt);
  return result;
}

void Agent::print_failure_report(const WorkerGroup& group, int attempt) const {
  const auto& failures = group.failures();
  const Worker& first = group.workers()[failures.front()];
  std::string report = "tdistrun: ---- failure";
  // (--restart-policy=failed restarts ranks, not attempts: none to number.)
  if (options_.max_restarts > 0 && !options_.restart_failed_only) {
    report +=
        " (attempt " + std::to_string(attempt + 1) + " of " + std::to_string(options_.max_restarts + 1) + ")";
  }
  report += " ----\n";
  report += "tdistrun: " + describe_worker(first) + " " + describe_wait_status(first.status) + "\n";
  const auto& tail = first.err->tail();
  if (tail.empty()) {
    report += "tdistrun: rank " + std::to_string(first.rank) + " wrote nothing to stderr\n";
  } else {
    report += "tdistrun: last " + plural(static_cast<int>(tail.size()), "line") + " of rank " +
              std::to_string(first.rank) + "'s stderr:\n";
    for (const auto& line : tail) report += "  " + rank_prefix(first.rank) + line + "\n";
  }
  for (size_t i = 1; i < failures.size(); ++i) {
    const Worker& other = group.workers()[failures[i]];
    report +=
        "tdistrun: also failed: " + describe_worker(other) + " " + describe_wait_status(other.status) + "\n";
  }
  if (!options_.log_dir.empty()) {
    report += "tdistrun: logs: " + options_.log_dir + "/attempt_" + std::to_string(attempt) + "/\n";
  }
  console_write(2, report);
}

}  // namespace tdist::launcher
