#pragma once

// Polling a little before sleeping, where sleeping costs a wake-up that
// takes longer than the wait (src/rpc/rpc_spin.h has the figures), and a
// gauge that says whether the waits at one place are short enough for it.

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tdist::detail {

/// Polls `ready` until it holds (true) or `budget` has passed (false),
/// yielding the core between polls.
template <typename Ready>
bool spin_until(Ready ready, std::chrono::microseconds budget) {
  if (budget.count() <= 0) return ready();
  const auto until = std::chrono::steady_clock::now() + budget;
  while (!ready()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    sched_yield();
  }
  return true;
}

/// Whether the waits at one place have lately been short enough to poll
/// through: a moving average of how long they took. Polling through waits
/// that end after the budget anyway only takes the core from the threads
/// doing the work (a 1 MiB call took twice as long with every waiter
/// polling), so a place whose waits run long sleeps at once.
class SpinGauge {
 public:
  bool worth_polling(std::chrono::microseconds budget) const {
    return budget.count() > 0 &&
           ema_ns_.load(std::memory_order_relaxed) <= std::chrono::nanoseconds(budget).count();
  }
  void record(std::chrono::nanoseconds waited) {
    const int64_t old = ema_ns_.load(std::memory_order_relaxed);
    ema_ns_.store(old + (waited.count() - old) / 8, std::memory_order_relaxed);  // races only blur it
  }

 private:
  std::atomic<int64_t> ema_ns_{0};
};

}  // namespace tdist::detail
