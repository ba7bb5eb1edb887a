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

}  // namespace

template <typename Fn>
bool StoreCallNotes::bounded(Fn&& fn) noexcept {
  const auto now = std::chrono::steady_clock::now();
  if (now < resting_until_.load()) return false;
  try {
    const StoreDeadlineScope cap(now + kCap);
    fn();
    return true;
  } catch (...) {
    resting_until_.store(std::chrono::steady_clock::now() + kRest);
    return false;
  }
}

void StoreCallNotes::failed(const std::exception_ptr& error) noexcept {
  if (error_kind(error) != ErrorKind::kOther) return;
  bounded([&] { store_->compare_set(kFailureKey, {}, to_bytes(exception_text(error))); });  // the first stays
}

std::optional<std::string> StoreCallNotes::failure() noexcept {
  std::optional<std::string> out;
  bounded([&] {
    if (store_->check({kFailureKey})) out = to_string(store_->get(kFailureKey));
  });
  return out;
}

void StoreCallNotes::arrived(const CallSignature& mine) noexcept {
  uint64_t words[4];
  std::memcpy(words, &mine, sizeof(words));
  std::string value;
  for (uint64_t w : words) value += std::to_string(w) + " ";
  bounded([&] { store_->set(arrived_key(rank_), value); });
}

std::vector<int> StoreCallNotes::missing(uint64_t seq) noexcept {
  std::vector<int> out;
  const bool read = bounded([&] {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const auto theirs = read_arrived(r);
      if (!theirs || theirs->seq < seq) out.push_back(r);
    }
  });
  return read ? out : std::vector<int>{};
}

std::optional<std::pair<int, CallSignature>> StoreCallNotes::differing(const CallSignature& mine) noexcept {
  std::optional<std::pair<int, CallSignature>> out;
  bounded([&] {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const auto theirs = read_arrived(r);
      if (theirs && theirs->seq == mine.seq && !theirs->empty() && !(*theirs == mine)) {
        out = std::make_pair(r, *theirs);
        return;
      }
    }
  });
  return out;
}

std::optional<CallSignature> StoreCallNotes::read_arrived(int r) {
  if (!store_->check({arrived_key(r)})) return std::nullopt;
  std::istringstream in(to_string(store_->get(arrived_key(r))));
  uint64_t words[4];
  for (uint64_t& w : words) {
    if (!(in >> w)) return std::nullopt;
  }
  CallSignature out;
  std::memcpy(&out, words, sizeof(out));
  return out;
}

}  // namespace tdist::detail
