// Group rank 0's clock as seen from a rank on another host (flight_recorder.h,
// TraceGroupInfo::clock_offset_ns): Cristian's method through the group's
// store. The rank posts a ping, rank 0 answers with its CLOCK_MONOTONIC,
// and the rank takes rank 0's reading to have been made halfway through
// the round trip; of three round trips the shortest, whose error is
// smallest. Ranks on rank 0's host share its clock and skip it all.

#include <limits>

#include "flight_recorder.h"
#include "transport/shm/shm_group.h"

namespace tdist::detail {
namespace {

constexpr int kRoundTrips = 3;

std::string key(const char* what, int rank, int trip = -1) {
  return std::string("trace/clock/") + what + "/" + std::to_string(rank) +
         (trip >= 0 ? "/" + std::to_string(trip) : "");
}

}  // namespace

ClockOffset clock_offset_to_rank0(Store& store, int rank, int size) {
  const std::string mine = transport::shm::host_identity();
  store.set(key("host", rank), to_bytes(mine));
  if (rank == 0) {
    for (int r = 1; r < size; ++r) {
      if (to_string(store.get(key("host", r))) == mine) continue;
      for (int trip = 0; trip < kRoundTrips; ++trip) {
        store.get(key("ping", r, trip));  // blocks until rank r asks
        store.set(key("pong", r, trip), to_bytes(std::to_string(monotonic_ns())));
      }
    }
    return {};
  }
  if (to_string(store.get(key("host", 0))) == mine) return {};
  ClockOffset best{0, std::numeric_limits<int64_t>::max()};
  for (int trip = 0; trip < kRoundTrips; ++trip) {
    const int64_t sent = monotonic_ns();
    store.set(key("ping", rank, trip), to_bytes("?"));
    const int64_t theirs = std::stoll(to_string(store.get(key("pong", rank, trip))));
    const int64_t received = monotonic_ns();
    const int64_t half = (received - sent) / 2;
    if (half < best.uncertainty_ns) best = {theirs - (sent + half), half};
  }
  return best;
}

}  // namespace tdist::detail
