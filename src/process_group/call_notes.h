#pragma once

// The notes of a group's calls (algorithms::CallNotes) in its store: the
// reason of the first failure that is not a network failure or a timeout
// (every rank times out on its own) under "tdist/failure", and the
// signature of each rank's last call that waited long under
// "tdist/arrived/<rank>". Only failing and slow calls write, so the store
// sees nothing on the fast path. The store may be gone with the rank that
// hosts it: the notes are best effort, and bounded in time (NotesWorker).

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/algorithms.h"
#include "notes_worker.h"
#include "tdist/store.h"

namespace tdist::detail {

class StoreCallNotes final : public algorithms::CallNotes {
 public:
  using Clock = algorithms::Clock;
  StoreCallNotes(std::shared_ptr<Store> store, int rank, int size)
      : store_(std::move(store)), rank_(rank), size_(size) {}
  void failed(const std::exception_ptr& error) noexcept override;
  /// The reason a peer left with failed(), if any.
  std::optional<std::string> failure(Clock::time_point until) noexcept override;
  void arrived(const CallSignature& mine, Clock::time_point until) noexcept override;
  std::optional<std::vector<int>> missing(uint64_t seq, Clock::time_point until) noexcept override;
  std::optional<std::pair<int, CallSignature>> differing(const CallSignature& mine,
                                                         Clock::time_point until) noexcept override;

 private:
  // Each use of the store gets at most kCap, and never past its `until`
  // (a live store answers in microseconds, a loaded one in milliseconds):
  // it runs on the worker, and the caller waits for it no longer, whatever
  // the store does (a store that does not answer, its host stopped or its
  // link cut, would otherwise hold a call past its deadline or stall its
  // waiting for data). After one such failure the notes rest for kRest, so
  // that a waiting call's polls do not each spend kCap.
  static constexpr auto kCap = std::chrono::seconds(1);
  static constexpr auto kRest = std::chrono::seconds(2);
  // fn(store) on the worker, bounded as above; nothing if it failed, ran
  // out of time, or the notes rest. fn must own what it touches.
  template <typename T, typename Fn>
  std::optional<T> bounded(Clock::time_point until, Fn fn) noexcept;

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::atomic<Clock::time_point> resting_until_{};
  NotesWorker worker_;
};

}  // namespace tdist::detail
