#pragma once

/// @file work.h
/// Handles of asynchronous operations: Work (what async_op=true returns) and
/// Future (Work::get_future(), with then() callbacks), as in the spec's
/// "Synchronous and asynchronous collective operations".

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tdist/tensor.h"

namespace tdist {

/// The result of an asynchronous operation: done or not, its error, its
/// output tensors. Thread-safe.
class Future {
 public:
  Future() = default;
  Future(const Future&) = delete;
  Future& operator=(const Future&) = delete;

  /// Blocks until completed; rethrows the error if it failed.
  void wait();
  /// Like wait() but gives up at the timeout: false if still pending.
  /// `what` names the operation in the error wait() inside a callback may raise.
  bool wait_for(std::chrono::milliseconds timeout, const std::string& what = "Future");
  bool completed() const;
  /// The error it failed with, or null.
  std::exception_ptr error() const;
  /// The output tensors; rethrows the error if it failed. Waits first.
  std::vector<Tensor> value();

  /// Runs `callback` with this future once it completes (at once if it
  /// already has) and returns a future that completes with the callback's
  /// result, or with its exception, or with this future's error if this one
  /// failed (the callback still runs, so it can inspect error()).
  std::shared_ptr<Future> then(std::function<std::vector<Tensor>(Future&)> callback);

  /// Completes the future (first call wins). Callbacks run on the calling
  /// thread, after waiters are woken.
  void set_value(std::vector<Tensor> value);
  void set_error(std::exception_ptr error);
  /// Internal: completes a future that no other thread can reach yet (its
  /// work is being made): no lock, no wake-up, no callbacks to run.
  void set_value_unshared(std::vector<Tensor> value);
  /// Internal: what completes this future (a process group, a transport).
  /// wait() on the thread that completes it, from a then() callback, raises
  /// DistError instead of waiting forever. Set before the future is shared.
  void set_completer(const void* completer) { completer_ = completer; }
  /// Raises DistError naming `what` if waiting now would deadlock (see
  /// set_completer()).
  void check_wait_allowed(const std::string& what) const;
  /// Internal: lets a waiting thread move the operation along itself (a
  /// point-to-point receive reads its socket) instead of sleeping until the
  /// completer's thread wakes it. wait() calls `progress(context, deadline)`,
  /// never on the completer's thread; it may return before completion.
  /// `context` must live as long as the future (a pointer, not a
  /// std::function: that cost an allocation per message). Set before the
  /// future is shared.
  using Progress = void (*)(void* context, std::chrono::steady_clock::time_point deadline);
  void set_progress(Progress progress, void* context) {
    progress_ = progress;
    progress_context_ = context;
  }

 private:
  void finish(std::vector<Tensor> value, std::exception_ptr error);
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  // Set (release) under mutex_ after error_ and value_, which never change
  // again: completed(), error() and wait_for() on a finished future take no
  // lock.
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  std::vector<Tensor> value_;
  std::vector<std::function<void()>> callbacks_;
  int waiters_ = 0;  // threads asleep in wait_for: only then is done_cv_ notified
  const void* completer_ = nullptr;
  Progress progress_ = nullptr;
  void* progress_context_ = nullptr;
};

/// A handle to one operation, returned when async_op=true. Works live in a
/// std::shared_ptr (WorkPtr): the future shares the work's ownership.
class Work : public std::enable_shared_from_this<Work> {
 public:
  /// `op` names the operation in messages ("all_reduce"); `completer` is
  /// what finishes it (see Future::set_completer()).
  explicit Work(std::string op, std::vector<Tensor> outputs = {}, const void* completer = nullptr);
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  /// True once finished, successfully or not.
  bool is_completed() const;
  /// True if finished without error. Raises DistError if not yet completed.
  bool is_success() const;
  /// The error it failed with, or null.
  std::exception_ptr exception() const;
  /// Blocks until finished and rethrows its error. With a timeout, raises
  /// DistTimeoutError naming the op if it is still running then (the
  /// operation itself keeps its own deadline, the group's timeout).
  /// Returns true, as the spec's Work.wait does. A timeout of 0 means none
  /// (torch's kNoTimeout); a negative one raises DistInvalidArgument.
  bool wait(std::chrono::milliseconds timeout = std::chrono::milliseconds::max());
  /// A future completed with the op's output tensors. It lives inside the
  /// work (one allocation for both, where there were two per message) and
  /// keeps it alive; the work must be owned by a std::shared_ptr.
  std::shared_ptr<Future> get_future() const;
  /// For receives from any source: the rank the message came from
  /// (group rank), -1 before completion or for other ops.
  int source_rank() const;
  const std::string& op() const { return op_; }

  /// Called by the process group when the operation finishes.
  void finish(std::exception_ptr error, int source_rank = -1);
  /// A work that finished as it was made (a point-to-point message that
  /// moved inside its post): what finish() would leave, without its lock.
  static std::shared_ptr<Work> finished(std::string op, std::vector<Tensor> outputs, const void* completer,
                                        int source_rank = -1);

 protected:
  /// The future, for the process group that runs the operation.
  Future& future() { return future_; }

 private:
  const std::string op_;
  std::vector<Tensor> outputs_;
  mutable Future future_;
  std::atomic<bool> finished_{false};  // finish() was called: only the first call acts
  std::atomic<int> source_rank_{-1};
  int owner_pid_;  // the process that started the operation
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace tdist
