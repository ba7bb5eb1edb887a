#pragma once

// Completes torch futures off tdist's threads. A future's then() callbacks
// run on the thread that completes it, and torch code (DDP communication
// hooks such as PowerSGD) waits inside them for further collectives. Run on
// tdist's worker thread, such a wait would block the only thread that can
// finish the collective. Here every completion runs on a pool thread, and a
// new thread starts whenever all are busy, so a callback waiting for the
// next completion never waits for itself. Idle threads beyond the first
// leave after a while.
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
    if (queue_.size() > idle_) {
      ++threads_;
      std::thread([this] { serve(); }).detach();
    } else {
      cv_.notify_one();
    }
  }

 private:
  CompletionPool() = default;

  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ++idle_;
      bool woke = cv_.wait_for(lock, std::chrono::seconds(10), [&] { return !queue_.empty(); });
      --idle_;
      if (!woke && threads_ > 1) {
        --threads_;
        return;
      }
      if (queue_.empty()) continue;
      auto task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
      lock.unlock();
      task();
      task = nullptr;  // drop what it captured before parking
      lock.lock();
      if (--running_ == 0 && queue_.empty()) idle_cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<std::function<void()>> queue_;
  size_t idle_ = 0;
  size_t running_ = 0;
  size_t threads_ = 0;
};

}  // namespace tdist::torch_plugin
