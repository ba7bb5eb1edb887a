#pragma once

// The ops whose TCP algorithm TDIST_ALGO_<OP> forces, as a set of bits that
// a group reads once, at creation (ProcessGroupTdist::domain_for sends such
// an op to the TCP domain).

#include <cstdint>
#include <type_traits>

#include "algorithms/tuning/tcp_model.h"
#include "tdist/errors.h"

namespace tdist::detail {

// A group's bit of each op in its set of forced ops (forced_algorithms).
template <typename Algo>
constexpr uint32_t forced_bit() {
  using std::is_same_v;
  if constexpr (is_same_v<Algo, algorithms::AllReduceAlgo>) return 1U << 0;
  if constexpr (is_same_v<Algo, algorithms::BroadcastAlgo>) return 1U << 1;
  if constexpr (is_same_v<Algo, algorithms::ReduceAlgo>) return 1U << 2;
  if constexpr (is_same_v<Algo, algorithms::AllGatherAlgo>) return 1U << 3;
  if constexpr (is_same_v<Algo, algorithms::GatherAlgo>) return 1U << 4;
  if constexpr (is_same_v<Algo, algorithms::ScatterAlgo>) return 1U << 5;
  if constexpr (is_same_v<Algo, algorithms::ReduceScatterAlgo>) return 1U << 6;
  if constexpr (is_same_v<Algo, algorithms::AllToAllAlgo>) return 1U << 7;
  if constexpr (is_same_v<Algo, algorithms::BarrierAlgo>) return 1U << 8;
  return 0;
}

// forced_bit<Algo>() if TDIST_ALGO_<OP> forces a TCP algorithm. An invalid
// name counts as forced: the TCP path then raises the error naming it, at
// the call, as before the variables were read once per group.
template <typename Algo>
uint32_t forced_if_set() {
  try {
    return algorithms::env_algo<Algo>() ? forced_bit<Algo>() : 0;
  } catch (const DistInvalidArgument&) {
    return forced_bit<Algo>();
  }
}

inline uint32_t forced_algorithms() {
  return forced_if_set<algorithms::AllReduceAlgo>() | forced_if_set<algorithms::BroadcastAlgo>() |
         forced_if_set<algorithms::ReduceAlgo>() | forced_if_set<algorithms::AllGatherAlgo>() |
         forced_if_set<algorithms::GatherAlgo>() | forced_if_set<algorithms::ScatterAlgo>() |
         forced_if_set<algorithms::ReduceScatterAlgo>() | forced_if_set<algorithms::AllToAllAlgo>() |
         forced_if_set<algorithms::BarrierAlgo>();
}

}  // namespace tdist::detail
