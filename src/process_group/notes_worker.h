#pragma once

// The thread that does a group's store operations for its call notes
// (StoreCallNotes), so that a caller waits for one only as long as it can
// afford, whatever the store does: the TCPStore client honours a cap on
// its operations (StoreDeadlineScope), but other stores do not (torch's
// TCPStore behind the torch plugin waits out its own timeout, the group's,
// for a host that was stopped; a FileStore on a stuck file system blocks).
// A job that runs past its caller's deadline finishes (or fails) on the
// worker meanwhile; later jobs wait for it, each caller no longer than its
// own deadline, and post() drops a job while one runs. Started on
// the first job: groups whose calls never wait long have no thread.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

#include <sys/types.h>

namespace tdist::detail {

class NotesWorker {
 public:
  using Clock = std::chrono::steady_clock;
  NotesWorker() = default;
  /// Lets the thread go (it ends once its job, if any, is done).
  ~NotesWorker();
  NotesWorker(const NotesWorker&) = delete;
  NotesWorker& operator=(const NotesWorker&) = delete;

  /// Runs `job` on the worker, after the job before it, and waits for it
  /// until `until`. True if it ran and returned; false if it threw, or it
  /// or the job before it was still running at `until`. `job` must own
  /// what it touches: it may outlive this call.
  bool run(std::function<void()> job, Clock::time_point until);
  /// Hands `job` to the worker and returns at once: false if the worker
  /// was busy with an earlier job (then `job` does not run).
  bool post(std::function<void()> job);

 private:
  struct Job;
  struct State;
  static void loop(const std::shared_ptr<State>& state);
  // The shared state, with its thread started (again, in a forked child).
  std::shared_ptr<State> state();

  std::mutex mutex_;  // guards state_ (made on the first run, and again after a fork)
  std::shared_ptr<State> state_;
  pid_t pid_ = 0;  // the process that started state_'s thread
};

}  // namespace tdist::detail
