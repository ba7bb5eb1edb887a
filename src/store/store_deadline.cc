#include "store_deadline.h"

#include <algorithm>

namespace tdist::detail {
namespace {
thread_local std::optional<StoreDeadlineScope::Clock::time_point> cap;
}  // namespace

StoreDeadlineScope::StoreDeadlineScope(Clock::time_point deadline) : previous_(cap) {
  cap = previous_ ? std::min(*previous_, deadline) : deadline;
}

StoreDeadlineScope::~StoreDeadlineScope() {
  cap = previous_;
}

std::optional<StoreDeadlineScope::Clock::time_point> StoreDeadlineScope::current() {
  return cap;
}

StoreDeadlineScope::Clock::time_point StoreDeadlineScope::capped(Clock::time_point deadline) {
  return cap ? std::min(*cap, deadline) : deadline;
}

}  // namespace tdist::detail
