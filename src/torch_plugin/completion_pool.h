#pragma once

// Completes torch futures off tdist's threads. A future's then() callbacks
// run on the thread that completes it, and torch code (DDP communication
// hooks such as PowerSGD) waits inside them for further collectives. Run on
// tdist's worker thread, such a wait would block the only thread that can
// finish the collective.
//
// Completions run one at a time, in the order they were posted, so that
// callbacks which start further collectives start them in the same order on
// every rank. Only when the running completion has been busy for kTakeOver
// (it is most likely blocked in a wait) does another thread take the next
// one, so a callback waiting for a later completion never waits for itself.
// Threads beyond the first leave after a while idle.
//
// The pool is never destroyed: its threads may still be parked when the
// interpreter exits, and joining them from a static destructor could hang.
// A completion still running when Python finalizes would die taking the GIL
// (to drop a Python callback) and abort the process, so tdist.torch drains
// the pool from an atexit hook first (drain()).

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace tdist::torch_plugin {

class CompletionPool {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kTakeOver{5};

  static CompletionPool& instance() {
    static auto* pool = new CompletionPool;  // leaked on purpose: see the file comment
    return *pool;
  }

  /// Waits until no completion is queued or running, at most `timeout`;
  /// false if some still are then.
  bool drain(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return idle_cv_.wait_for(lock, timeout, [&] { return queue_.empty() && running_ == 0; });
  }

  void post(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
    if (idle_ == 0) {
      // Nobody is parked: this thread runs the task, or takes over from a
      // blocked one once kTakeOver has passed.
      ++threads_;
      std::thread([this] { serve(); }).detach();
    }
    cv_.notify_all();
  }

 private:
  CompletionPool() = default;

  // The next task may start: nothing runs, or what runs has been running
  // long enough to be presumed blocked.
  bool may_start(Clock::time_point now) const {
    return !queue_.empty() && (running_ == 0 || now - last_start_ >= kTakeOver);
  }

  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    auto idle_since = Clock::now();
    for (;;) {
      ++idle_;
      if (queue_.empty()) {
        cv_.wait_for(lock, std::chrono::seconds(10), [&] { return !queue_.empty(); });
      } else if (!may_start(Clock::now())) {
        cv_.wait_for(lock, kTakeOver, [&] { return running_ == 0; });
      }
      --idle_;
      auto now = Clock::now();
      if (!may_start(now)) {
        if (queue_.empty() && now - idle_since >= std::chrono::seconds(10) && threads_ > 1) {
          --threads_;
          return;
        }
        continue;
      }
      auto task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
      last_start_ = now;
      lock.unlock();
      task();
      task = nullptr;  // drop what it captured before parking
      lock.lock();
      --running_;
      idle_since = Clock::now();
      cv_.notify_all();
      if (running_ == 0 && queue_.empty()) idle_cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;       // work to do, or a task finished
  std::condition_variable idle_cv_;  // nothing queued or running (drain)
  std::deque<std::function<void()>> queue_;
  size_t idle_ = 0;     // threads parked in serve()
  size_t running_ = 0;  // tasks running
  size_t threads_ = 0;
  Clock::time_point last_start_{};
};

}  // namespace tdist::torch_plugin
