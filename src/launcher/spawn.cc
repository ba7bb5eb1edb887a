#include "tdist/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "common/env.h"
#include "common/error_text.h"
#include "process_util.h"
#include "tdist/errors.h"

namespace tdist {
namespace {

using Clock = std::chrono::steady_clock;

// A child's exception message is cut to this size; the rest is noise.
constexpr size_t kMaxMessage = size_t{64} * 1024;

struct Child {
  int rank = -1;
  pid_t pid = -1;
  int pidfd = -1;
  int message_fd = -1;  // read end of the pipe the child writes what() to
  std::string message;
  bool exited = false;
  int status = 0;
  bool failed_on_its_own = false;  // failed before anyone stopped it
};

[[noreturn]] void run_child(const std::function<void(int)>& fn, int rank, int nprocs, int port,
                            const SpawnOptions& options, pid_t parent, int message_fd) {
  // The child dies with the parent instead of running on as an orphan.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  // NOLINTBEGIN(concurrency-mt-unsafe): the forked child has one thread.
  setenv("MASTER_ADDR", options.master_addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(nprocs).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(nprocs).c_str(), 1);
  // NOLINTEND(concurrency-mt-unsafe)
  int code = 0;
  try {
    fn(rank);
  } catch (const std::exception& e) {
    std::string what = e.what();
    (void)launcher::write_all(message_fd,
                              what.empty() ? std::string("exception with an empty message") : what);
    code = 1;
  } catch (...) {
    (void)launcher::write_all(message_fd, "an exception that is not a std::exception");
    code = 1;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // Skip the parent's atexit handlers and static destructors.
  _exit(code);
}

void read_message(Child& child) {
  char buffer[4096];
  for (;;) {
    ssize_t n = read(child.message_fd, buffer, sizeof(buffer));
    if (n > 0) {
      if (child.message.size() < kMaxMessage) {
        child.message.append(buffer, std::min(static_cast<size_t>(n), kMaxMessage - child.message.size()));
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      close(child.message_fd);
      child.message_fd = -1;
    }
    return;  // EOF or EAGAIN
  }
}

std::string describe(const Child& child) {
  std::string text = "rank " + std::to_string(child.rank) + " ";
  if (WIFEXITED(child.status) && WEXITSTATUS(child.status) == 1 && !child.message.empty()) {
    text += "raised: " + child.message;
  } else {
    text += launcher::describe_wait_status(child.status);
    if (!child.message.empty()) text += ": " + child.message;
  }
  return text;
}

class Spawner {
 public:
  Spawner(int nprocs, SpawnOptions options) : nprocs_(nprocs), options_(std::move(options)) {}

  ~Spawner() {
    // Only reached with children left if starting them failed midway.
    for (auto& child : children_) {
      if (!child.exited && child.pid > 0) {
        kill(child.pid, SIGKILL);
        waitpid(child.pid, &child.status, 0);
      }
      if (child.pidfd >= 0) close(child.pidfd);
      if (child.message_fd >= 0) close(child.message_fd);
    }
  }

  void start(const std::function<void(int)>& fn) {
    int port = options_.master_port != 0 ? options_.master_port : launcher::pick_free_port();
    pid_t parent = getpid();
    std::fflush(stdout);
    std::fflush(stderr);
    children_.resize(static_cast<size_t>(nprocs_));
    for (int rank = 0; rank < nprocs_; ++rank) {
      Child& child = children_[static_cast<size_t>(rank)];
      child.rank = rank;
      int fds[2];
      if (pipe2(fds, O_CLOEXEC) != 0) throw DistError("spawn: pipe failed: " + errno_text(errno));
      pid_t pid = fork();
      if (pid < 0) {
        int err = errno;
        close(fds[0]);
        close(fds[1]);
        throw DistError("spawn: fork of rank " + std::to_string(rank) + " failed: " + errno_text(err));
      }
      if (pid == 0) {
        close(fds[0]);
        run_child(fn, rank, nprocs_, port, options_, parent, fds[1]);
      }
      close(fds[1]);
      child.pid = pid;
      child.message_fd = fds[0];
      fcntl(child.message_fd, F_SETFL, O_NONBLOCK);
      child.pidfd = launcher::open_pidfd(pid);
    }
  }

  // Waits for every child; stops the rest at the first failure.
  void run() {
    bool has_deadline = options_.timeout.count() > 0;
    Clock::time_point deadline = Clock::now() + options_.timeout;
    bool stopping = false;
    bool killed = false;
    Clock::time_point kill_at{};
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<std::pair<Child*, bool>> owners;  // (child, is_pidfd)
      for (auto& child : children_) {
        if (child.message_fd >= 0) {
          fds.push_back({child.message_fd, POLLIN, 0});
          owners.emplace_back(&child, false);
        }
        if (!child.exited) {
          fds.push_back({child.pidfd, POLLIN, 0});
          owners.emplace_back(&child, true);
        }
      }
      if (fds.empty()) break;
      bool all_exited = true;
      for (auto& child : children_) all_exited = all_exited && child.exited;
      if (all_exited) {
        // Only pipes left, held open by grandchildren perhaps: take what is
        // there and stop listening.
        for (auto& child : children_) {
          if (child.message_fd < 0) continue;
          read_message(child);
          if (child.message_fd >= 0) {
            close(child.message_fd);
            child.message_fd = -1;
          }
        }
        break;
      }

      int timeout_ms = -1;
      auto now = Clock::now();
      auto until = [&](Clock::time_point when) {
        auto ms = std::chrono::ceil<std::chrono::milliseconds>(when - now).count();
        int clipped = static_cast<int>(std::clamp<int64_t>(ms, 0, 60'000));
        timeout_ms = timeout_ms < 0 ? clipped : std::min(timeout_ms, clipped);
      };
      if (has_deadline && !timed_out_) until(deadline);
      if (stopping && !killed) until(kill_at);

      int ready = poll(fds.data(), fds.size(), timeout_ms);
      if (ready < 0) {
        if (errno == EINTR) continue;
        throw DistError("spawn: poll failed: " + errno_text(errno));
      }
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        Child& child = *owners[i].first;
        if (!owners[i].second) {
          read_message(child);
          continue;
        }
        if (!launcher::try_reap(child.pid, &child.status)) continue;
        child.exited = true;
        close(child.pidfd);
        child.pidfd = -1;
        if (child.message_fd >= 0) read_message(child);
        if (!launcher::wait_status_ok(child.status) && !stopping) child.failed_on_its_own = true;
      }

      now = Clock::now();
      bool any_failed = false;
      for (auto& child : children_) any_failed = any_failed || child.failed_on_its_own;
      if (has_deadline && !timed_out_ && now >= deadline) {
        timed_out_ = true;
        for (auto& child : children_) {
          if (!child.exited) still_running_at_deadline_.push_back(child.rank);
        }
        signal_running(SIGKILL);
        stopping = killed = true;
      } else if (any_failed && !stopping) {
        signal_running(SIGTERM);
        stopping = true;
        kill_at = now + options_.grace_period;
      } else if (stopping && !killed && now >= kill_at) {
        signal_running(SIGKILL);
        killed = true;
      }
    }
  }

  void raise_if_failed() const {
    std::vector<const Child*> failed;
    for (const auto& child : children_) {
      if (child.failed_on_its_own) failed.push_back(&child);
    }
    if (timed_out_ && failed.empty()) {
      std::string ranks;
      for (int rank : still_running_at_deadline_) ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank);
      throw DistTimeoutError("spawn: rank" + std::string(still_running_at_deadline_.size() > 1 ? "s " : " ") +
                             ranks + " of " + std::to_string(nprocs_) +
                             " still running after the timeout of " +
                             std::to_string(options_.timeout.count()) + " ms; killed them");
    }
    if (failed.empty()) return;
    std::string text = "spawn: ";
    if (failed.size() == 1) {
      text += describe(*failed[0]);
    } else {
      text += std::to_string(failed.size()) + " of " + std::to_string(nprocs_) + " ranks failed: ";
      for (size_t i = 0; i < failed.size(); ++i) text += (i == 0 ? "" : "; ") + describe(*failed[i]);
    }
    if (static_cast<int>(failed.size()) < nprocs_) {
      text += " (world size " + std::to_string(nprocs_) + "; the other ranks were stopped)";
    }
    throw DistError(text);
  }

 private:
  void signal_running(int signal) {
    for (auto& child : children_) {
      if (!child.exited) kill(child.pid, signal);
    }
  }

  int nprocs_;
  SpawnOptions options_;
  std::vector<Child> children_;
  bool timed_out_ = false;
  std::vector<int> still_running_at_deadline_;
};

}  // namespace

void spawn(const std::function<void(int rank)>& fn, int nprocs, const SpawnOptions& options) {
  if (nprocs < 1)
    throw DistInvalidArgument("spawn: nprocs must be at least 1, got " + std::to_string(nprocs));
  if (!fn) throw DistInvalidArgument("spawn: the function is empty");
  if (options.master_port < 0 || options.master_port > 65535) {
    throw DistInvalidArgument("spawn: master_port must be 0 (pick a free one) or in [1, 65535], got " +
                              std::to_string(options.master_port));
  }
  if (options.timeout.count() < 0 || options.grace_period.count() < 0) {
    throw DistInvalidArgument("spawn: timeout and grace_period must not be negative");
  }
  Spawner spawner(nprocs, options);
  spawner.start(fn);
  spawner.run();
  spawner.raise_if_failed();
}

}  // namespace tdist
