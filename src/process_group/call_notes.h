#pragma once

// The notes of a group's calls (algorithms::CallNotes) in its store: the
// reason of the first failure that is not a network failure or a timeout
// (every rank times out on its own) under "tdist/failure", and the
// signature of each rank's last call that waited long under
// "tdist/arrived/<rank>". Only failing and slow calls write, so the store
// sees nothing on the fast path. The store may be gone with the rank that
// hosts it: the notes are best effort.

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/algorithms.h"
#include "tdist/store.h"

namespace tdist::detail {

class StoreCallNotes final : public algorithms::CallNotes {
 public:
  StoreCallNotes(std::shared_ptr<Store> store, int rank, int size)
      : store_(std::move(store)), rank_(rank), size_(size) {}
  void failed(const std::exception_ptr& error) noexcept override;
  /// The reason a peer left with failed(), if any.
  std::optional<std::string> failure() noexcept override;
  void arrived(const CallSignature& mine) noexcept override;
  std::vector<int> missing(uint64_t seq) noexcept override;
  std::optional<std::pair<int, CallSignature>> differing(const CallSignature& mine) noexcept override;

 private:
  // The notes are diagnostics: each use of the store gets at most kCap (a
  // live store answers in microseconds, a loaded one in milliseconds), so
  // that a store that does not answer (its host stopped, its link cut) never
  // holds a call past its deadline nor stalls its waiting for data; after
  // one such failure the notes rest for kRest, so that a waiting call's
  // polls do not each spend kCap. False if the store failed (or rests).
  static constexpr auto kCap = std::chrono::seconds(1);
  static constexpr auto kRest = std::chrono::seconds(2);
  template <typename Fn>
  bool bounded(Fn&& fn) noexcept;
  // What rank r left: the signature of the last long call it was in.
  std::optional<CallSignature> read_arrived(int r);

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::atomic<std::chrono::steady_clock::time_point> resting_until_{};
};

}  // namespace tdist::detail
