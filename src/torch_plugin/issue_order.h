#pragma once

// IssueOrder keeps the plugin's collectives in call order when one of them
// issues its tdist collectives in stages. A sparse all_reduce must learn
// every rank's number of nonzeros (one all_gather) before it can size the
// gathers of indices and values; it issues those from the first gather's
// completion callback. tdist runs a group's collectives in the order they
// are issued, and every rank must issue them in the same order, so a
// collective the user calls meanwhile must not slip in between: it is
// deferred and issued right after the staged operation's last stage, in
// call order. With nothing staged (almost always), calls issue at once on
// the caller's thread and pay one uncontended lock.
//
// Point-to-point operations are matched by tag, not by order, and bypass it.

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace tdist::torch_plugin {

class IssueOrder {
 public:
  /// A deferred call: `issue` issues it (and reports its own errors to its
  /// work); `fail` completes its work with an error if it never will be.
  struct Pending {
    std::function<void()> issue;
    std::function<void(std::exception_ptr)> fail;
  };

  /// False if nothing is in the way: the caller issues now, on its thread.
  /// Otherwise queues make_pending() (called only then: the common case
  /// builds nothing), to be issued in call order.
  template <typename MakePending>
  bool defer(MakePending&& make_pending) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_ || (!held_ && !busy_ && queue_.empty())) return false;
    queue_.push_back(make_pending());
    return true;
  }

  /// Called by an operation that has issued its first stage and will issue
  /// more from a callback: every later call waits until resume().
  void hold() {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ = true;
  }

  /// Runs `next_stage` (which issues the held operation's remaining
  /// collectives and must not throw), then the deferred calls in order until
  /// one holds again. Returns false, running nothing, once close() has run.
  bool resume(const std::function<void()>& next_stage) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (busy_ && busy_thread_ == std::this_thread::get_id()) {
      // The stage completed at once, inside the deferred call that held:
      // the drain loop below that call goes on by itself.
      held_ = false;
      if (closed_) return false;
      lock.unlock();
      next_stage();
      return true;
    }
    done_cv_.wait(lock, [&] { return !busy_; });
    held_ = false;
    if (closed_) return false;
    busy_ = true;
    busy_thread_ = std::this_thread::get_id();
    lock.unlock();
    next_stage();
    lock.lock();
    while (!held_ && !closed_ && !queue_.empty()) {
      Pending next = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      next.issue();
      lock.lock();
    }
    busy_ = false;
    done_cv_.notify_all();
    return true;
  }

  /// The group is going away: fails the deferred calls with `reason` and
  /// waits for a resume() running on another thread, so that nothing issues
  /// on the group afterwards.
  void close(const std::exception_ptr& reason) {
    std::deque<Pending> dropped;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      closed_ = true;
      dropped.swap(queue_);
      if (busy_thread_ != std::this_thread::get_id()) done_cv_.wait(lock, [&] { return !busy_; });
    }
    for (auto& pending : dropped) pending.fail(reason);
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  std::deque<Pending> queue_;
  bool held_ = false;    // a staged operation has not issued its last stage
  bool busy_ = false;    // resume() is issuing (on busy_thread_)
  bool closed_ = false;  // the group is being destroyed
  std::thread::id busy_thread_;
};

}  // namespace tdist::torch_plugin
