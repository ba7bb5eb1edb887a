#pragma once

// A cap on how long a thread's store operations may take, whatever the
// store's own timeout: for the notes a collective leaves in its group's
// store while it waits (algorithms::CallNotes). Those are diagnostics; a
// store that cannot answer (its host stopped, its link cut) must not keep
// the call past its own deadline, nor stall its waiting for data.
//
// The TCPStore client honours it: an operation that reaches the cap fails
// as one that ran out the store's timeout (DistStoreTimeoutError). Other
// stores answer at once or not at all (HashStore, FileStore).

#include <chrono>
#include <optional>

namespace tdist::detail {

class StoreDeadlineScope {
 public:
  using Clock = std::chrono::steady_clock;
  /// Caps every store operation of this thread at `deadline` while the
  /// scope lives; an inner scope can only shorten the cap.
  explicit StoreDeadlineScope(Clock::time_point deadline);
  ~StoreDeadlineScope();
  StoreDeadlineScope(const StoreDeadlineScope&) = delete;
  StoreDeadlineScope& operator=(const StoreDeadlineScope&) = delete;
  /// The cap of this thread, if any.
  static std::optional<Clock::time_point> current();
  /// `deadline`, or the cap if that is earlier.
  static Clock::time_point capped(Clock::time_point deadline);

 private:
  std::optional<Clock::time_point> previous_;
};

}  // namespace tdist::detail
