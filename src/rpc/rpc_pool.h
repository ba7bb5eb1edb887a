#pragma once

// The threads that serve a worker's requests: at most `threads` of them,
// started as requests need them, and a queue of at most `max_queued`
// requests waiting for one. A request that finds every thread busy and the
// queue full is refused (try_post returns false) rather than queued without
// bound: its caller gets an error saying so at once.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

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
  std::vector<std::thread> threads_;
};

}  // namespace tdist::rpc::detail
