#pragma once

// The state a Future's copies share (include/tdist/rpc.h).

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

#include "tdist/rpc.h"

namespace tdist::rpc::detail {

struct FutureState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::atomic<bool> settled{false};  // `done`, readable without the mutex (wait() polls it)
  Message result;
  std::exception_ptr error;
  std::vector<std::function<void()>> callbacks;
  // What completes this future (the agent's transport), so that wait() on
  // that very thread fails instead of hanging (common/completion_thread.h).
  const void* completer = nullptr;

  /// Completes with `result` or `error` and runs the callbacks on this
  /// thread; false (and nothing changes) if it was done already.
  bool complete(Message value, std::exception_ptr failure);
};

}  // namespace tdist::rpc::detail
