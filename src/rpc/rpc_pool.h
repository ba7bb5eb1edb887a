#pragma once

// The threads that serve a worker's requests: at most `threads` of them,
// started as requests need them, and a queue of at most `max_queued`
// requests waiting for one. A request that finds every thread busy and the
// queue full is refused (try_post returns false) rather than queued without
// bound: its caller gets an error saying so at once. One idle thread at a
// time polls for new work before it sleeps (rpc_spin.h), so that a request
// following its predecessor closely needs no wake-up.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "rpc/rpc_spin.h"

namespace tdist::rpc::detail {

class ServingPool {
 public:
  ServingPool(int threads, int max_queued);
  /// Runs what is queued, then joins the threads.
  ~ServingPool();
  ServingPool(const ServingPool&) = delete;
  ServingPool& operator=(const ServingPool&) = delete;

  /// Queues `task` (which must not throw); false if it was refused.
  bool try_post(std::function<void()> task);
  /// Waits until no task is queued or running; false if `deadline` came first.
  bool wait_idle_until(std::chrono::steady_clock::time_point deadline);
  /// Drops the tasks not started yet; how many there were.
  size_t drop_queued();
  /// Tasks queued or running.
  size_t outstanding() const;

 private:
  void run();

  const size_t max_threads_;
  const size_t max_queued_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::deque<std::function<void()>> queue_;
  size_t idle_ = 0;     // threads waiting for work
  size_t running_ = 0;  // tasks running
  bool stopping_ = false;
  bool spinner_ = false;           // an idle thread polls queued_: posting needs no notify
  std::atomic<size_t> queued_{0};  // queue_.size(), readable without the mutex
  SpinGauge gauge_;                // how long idle threads have lately waited for work
  std::vector<std::thread> threads_;
};

}  // namespace tdist::rpc::detail
