#pragma once

// Runs a group's operations one at a time, in the order they were called:
// queued ones on the executor's worker thread, and a blocking call with
// nothing queued or running before it on the caller's own thread (inline:
// see tdist/blocking_call.h), which saves two thread hand-offs per call.
//
// The state is one atomic word, so that an inline call claims the group
// with one compare-and-swap and no lock:
//
//   word = owned + 2 * queued
//   owned (bit 0)  an inline call, or a caller of claim_when_idle()
//                  (reinit), owns the group; the worker starts nothing;
//   queued         operations queued or on the worker.
//
//   idle (0) --try_claim--> owned (1) --release--> idle, or queued work
//                                                  goes on (worker woken)
//   any --push--> queued + 1 --the worker runs one--> queued - 1
//   queued > 0 --take_queued (abort)--> owned bit only (the worker's
//                                        running one finishes)
//   idle --claim_when_idle (waits for idle)--> owned --release_claim--> idle
//
// Every transition that can make the word 0 wakes a claim_when_idle()
// waiter; a release that leaves queued work wakes the worker.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "algorithms/algorithms.h"
#include "common/call_signature.h"
#include "tdist/work.h"

namespace tdist::detail {

/// An operation waiting for the worker.
struct QueuedCall {
  std::string op;
  CallSignature sig;  // its seq is taken when it runs
  uint64_t seq = 0;
  WorkPtr work;
  std::function<void(const algorithms::CallContext&)> body;
  uint64_t trace_id = 0;                 // its flight recorder entry
  std::chrono::milliseconds timeout{0};  // the caller's ScopedCallTimeout, 0: the group's
};

class CallExecutor {
 public:
  /// `execute` runs one queued call on the worker and finishes its work;
  /// it must not throw.
  explicit CallExecutor(std::function<void(QueuedCall&)> execute);
  /// Stops the worker (stop()) if it still runs.
  ~CallExecutor();
  CallExecutor(const CallExecutor&) = delete;
  CallExecutor& operator=(const CallExecutor&) = delete;

  /// Starts the worker thread.
  void start();
  /// True if the caller may run its call inline now: nothing is queued,
  /// running or owning the group. It then owns the group until release().
  bool try_claim();
  /// Ends an inline call's ownership; queued work (pushed meanwhile by
  /// other threads) starts.
  void release();
  /// Queues `call` for the worker; false (and nothing queued) once stop()
  /// has begun.
  bool push(QueuedCall call);
  /// Waits until nothing is queued, running or owning the group, then owns
  /// it (as try_claim) until release_claim(); false if stop() began first.
  bool claim_when_idle();
  void release_claim();
  /// Removes every queued call that has not started (an abort fails them);
  /// the one on the worker, if any, finishes.
  std::deque<QueuedCall> take_queued();
  /// Nothing queued, and the worker's latest call (if any) finished.
  bool idle() const;
  /// Lets the worker finish what is queued, joins it, and returns what was
  /// still queued (pushed after it left). Idempotent.
  std::deque<QueuedCall> stop();
  /// The word itself, for tests: owned + 2 * queued.
  uint64_t state() const { return state_.load(); }

 private:
  void run();

  std::function<void(QueuedCall&)> execute_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;       // the worker waits on it
  std::condition_variable idle_cv_;  // claim_when_idle waits on it
  // claim_when_idle callers waiting; a release that makes the group idle
  // locks and notifies only while this is not 0 (a futex call per op saved).
  std::atomic<int> idle_waiters_{0};
  std::deque<QueuedCall> queue_;
  // The work of the call the worker took last (guarded by mutex_), for
  // idle(): the worker holds the group a moment after finishing it. Weak:
  // it must not keep the work's tensors alive.
  std::weak_ptr<Work> latest_work_;
  bool stopping_ = false;  // guarded by mutex_
  std::atomic<uint64_t> state_{0};
  std::thread worker_;
};

}  // namespace tdist::detail
