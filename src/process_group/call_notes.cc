#include "call_notes.h"

#include <cstring>
#include <sstream>

#include "common/error_text.h"
#include "store/store_deadline.h"

namespace tdist::detail {
namespace {

constexpr const char* kFailureKey = "tdist/failure";

std::string arrived_key(int r) {
  return "tdist/arrived/" + std::to_string(r);
}

// What rank r left: the signature of the last long call it was in.
std::optional<CallSignature> read_arrived(Store& store, int r) {
  if (!store.check({arrived_key(r)})) return std::nullopt;
  std::istringstream in(to_string(store.get(arrived_key(r))));
  uint64_t words[4];
  for (uint64_t& w : words) {
    if (!(in >> w)) return std::nullopt;
  }
  CallSignature out;
  std::memcpy(&out, words, sizeof(out));
  return out;
}

}  // namespace

template <typename T, typename Fn>
std::optional<T> StoreCallNotes::bounded(Clock::time_point until, Fn fn) noexcept {
  const auto now = Clock::now();
  until = std::min<Clock::time_point>(until, now + kCap);
  if (now < resting_until_.load() || now >= until) return std::nullopt;
  try {
    // Written by the worker, read here only once it has finished the job.
    auto out = std::make_shared<std::optional<T>>();
    const bool ran = worker_.run(
        [store = store_, fn = std::move(fn), out, until] {
          // The TCPStore client gives up at the same time, which frees the
          // worker for the next note.
          const StoreDeadlineScope cap(until);
          *out = fn(*store);
        },
        until);
    if (ran) return std::move(*out);
  } catch (...) {
    // No thread for the worker: as a store that failed.
  }
  resting_until_.store(Clock::now() + kRest);
  return std::nullopt;
}

void StoreCallNotes::failed(const std::exception_ptr& error) noexcept {
  if (error_kind(error) != ErrorKind::kOther) return;
  const Bytes text = to_bytes(exception_text(error));
  bounded<bool>(Clock::now() + algorithms::kLateNotes, [text](Store& store) {
    store.compare_set(kFailureKey, {}, text);  // the first stays
    return true;
  });
}

std::optional<std::string> StoreCallNotes::failure(Clock::time_point until) noexcept {
  auto out = bounded<std::optional<std::string>>(until, [](Store& store) -> std::optional<std::string> {
    if (!store.check({kFailureKey})) return std::nullopt;
    return to_string(store.get(kFailureKey));
  });
  return out ? *out : std::nullopt;
}

void StoreCallNotes::arrived(const CallSignature& mine, Clock::time_point until) noexcept {
  uint64_t words[4];
  std::memcpy(words, &mine, sizeof(words));
  std::string value;
  for (uint64_t w : words) value += std::to_string(w) + " ";
  const auto now = Clock::now();
  until = std::min<Clock::time_point>(until, now + kCap);
  if (now < resting_until_.load() || now >= until) return;
  // Not waited for: the call goes on reading its transport meanwhile (a
  // peer's own note may come there), and a later read of the notes finds
  // the worker busy if the store does not answer.
  try {
    worker_.post([store = store_, key = arrived_key(rank_), value, until] {
      const StoreDeadlineScope cap(until);
      store->set(key, value);
    });
  } catch (...) {
    // No thread for the worker: the note is not taken.
  }
}

std::optional<std::vector<int>> StoreCallNotes::missing(uint64_t seq, Clock::time_point until) noexcept {
  return bounded<std::vector<int>>(until, [seq, me = rank_, size = size_](Store& store) {
    std::vector<int> out;
    for (int r = 0; r < size; ++r) {
      if (r == me) continue;
      const auto theirs = read_arrived(store, r);
      if (!theirs || theirs->seq < seq) out.push_back(r);
    }
    return out;
  });
}

std::optional<std::pair<int, CallSignature>> StoreCallNotes::differing(const CallSignature& mine,
                                                                       Clock::time_point until) noexcept {
  using Found = std::optional<std::pair<int, CallSignature>>;
  auto out = bounded<Found>(until, [mine, me = rank_, size = size_](Store& store) -> Found {
    for (int r = 0; r < size; ++r) {
      if (r == me) continue;
      const auto theirs = read_arrived(store, r);
      if (theirs && theirs->seq == mine.seq && !theirs->empty() && !(*theirs == mine)) {
        return std::make_pair(r, *theirs);
      }
    }
    return std::nullopt;
  });
  return out ? *out : std::nullopt;
}

}  // namespace tdist::detail
