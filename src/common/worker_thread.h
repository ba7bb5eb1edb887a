#pragma once

// One thread that runs the tasks posted to it, in order. For work a call
// hands off and waits for later, on a thread that lives as long as its
// owner: a thread started per call would lose the per-thread scratch cache
// (common/scratch.h) and pay for its start every time.

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace tdist::detail {

class WorkerThread {
 public:
  WorkerThread();
  /// Runs what is still queued, then joins.
  ~WorkerThread();
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

  /// Queues `task`. It must not throw (catch inside and report otherwise).
  void post(std::function<void()> task);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tdist::detail
