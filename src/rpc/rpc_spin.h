#pragma once

// Waiting a little before sleeping. On the 2-vCPU VM of docs/rpc.md a thread
// woken from a futex takes tens of microseconds to run again (a pipe's round
// trip between two processes took 41 us), so a caller that sleeps until its
// answer comes, and a serving thread that sleeps until the next request,
// each add that to every call. Polling first, yielding the core between
// polls to whatever else wants it -- the caller, one idle serving thread
// and the transport's loop thread -- takes a 4-byte call from 87 us to
// 21-25 us (C++, two agents of one process). The polling is bounded: past
// spin_budget() the thread sleeps as before, so an idle worker costs
// nothing.

#include <chrono>

#include "common/env.h"
#include "common/spin_wait.h"

namespace tdist::rpc::detail {

using tdist::detail::spin_until;
using tdist::detail::SpinGauge;

/// TDIST_RPC_SPIN_US (default 150; 0: never poll), read once.
inline std::chrono::microseconds spin_budget() {
  static const std::chrono::microseconds budget{env_int("TDIST_RPC_SPIN_US", 0, 1'000'000).value_or(150)};
  return budget;
}

}  // namespace tdist::rpc::detail
