#pragma once

// Runs tdistrun (or any program) as a child of the test with its stdout and
// stderr captured, and waits for output or its exit with a deadline: a
// launcher that hangs is killed and reported, never waited for.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace tdist::testing {

using Clock = std::chrono::steady_clock;

class ChildProcess {
 public:
  /// Starts argv[0] (a path) with argv; `env` adds or overrides variables.
  explicit ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});
  /// Kills the child (SIGKILL) if it is still running.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  void send_signal(int signal) const;

  /// Reads output until `done()` holds (it looks at out() and err()); false
  /// at the deadline, or if the child ended first without it holding.
  bool wait_until(const std::function<bool()>& done, Clock::time_point deadline);

  bool exited() const { return exited_; }
  bool timed_out() const { return timed_out_; }
  /// The wait status, once exited.
  int status() const { return status_; }
  /// The exit code, or -1 if it did not exit normally.
  int exit_code() const;
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

  /// Waits for every child to exit, reading all their output; children
  /// still running at the deadline are killed and marked timed_out.
  static void wait_all(const std::vector<ChildProcess*>& children, Clock::time_point deadline);
  /// wait_all for this one.
  void wait(Clock::time_point deadline) { wait_all({this}, deadline); }

 private:
  // Polls once (up to the deadline) and handles what came; false at the
  // deadline.
  static bool step(const std::vector<ChildProcess*>& children, Clock::time_point deadline);
  void read_pipe(int* fd, std::string* into);
  void reap();

  pid_t pid_ = -1;
  int pidfd_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  bool exited_ = false;
  bool timed_out_ = false;
  int status_ = 0;
  std::string out_;
  std::string err_;
};

/// True if `pid` is a live process (not gone, not a zombie).
bool process_alive(pid_t pid);

/// Waits until `pid` is no longer alive; false at the deadline.
bool wait_until_gone(pid_t pid, Clock::time_point deadline);

/// The numbers after "key=" in `text`, in order.
std::vector<long> values_after(const std::string& text, const std::string& key);

/// The lines of `text` that contain `needle`.
std::vector<std::string> lines_with(const std::string& text, const std::string& needle);

}  // namespace tdist::testing
