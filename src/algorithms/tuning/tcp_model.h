#pragma once

// Internal: choosing each collective's algorithm per call. Include as
// "algorithms/tuning/tcp_model.h".
//
// The choice is a pure function of (bytes, group size), so every rank of a
// group makes the same one. It minimises the alpha-beta-gamma cost of each
// algorithm (Hockney's model as used by Thakur, Rabenseifner & Gropp 2005,
// "Optimization of Collective Communication Operations in MPICH"; the
// formulas are in tcp_model.cc),
// except for all-to-all, where the model ignores what decides the matter
// (contention of p - 1 concurrent transfers) and MPICH's threshold is used.
//
// TDIST_ALGO_<OP> (TDIST_ALGO_ALL_REDUCE=ring, ...) forces an algorithm for
// every call of that op whose caller asked for kAuto; "auto" or an empty
// value restores the choice by cost. Every rank must see the same value.
// An unknown name raises DistInvalidArgument listing the valid ones.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "algorithms/algorithms.h"

namespace tdist::algorithms {

/// The constants of the cost model, in seconds and seconds per byte.
struct CostModel {
  /// Latency of a message on the critical path: send syscall, the receiving
  /// transport thread's wake-up, and the waiting rank's wake-up.
  double alpha;
  /// Extra cost of one more message posted together with others (they
  /// overlap, so only the per-message CPU work adds up).
  double overhead;
  /// Moving one byte between two ranks (a copy into and out of the kernel).
  double beta;
  /// Reducing one byte (reduce_into on float32 SUM, cache-resident).
  double gamma;
  /// Copying one byte locally (memcpy).
  double delta;
};

/// Measured on the development host (TCP over loopback); tcp_model.cc has
/// the figures and how they were taken.
extern const CostModel kCostModel;

/// Modelled time of each algorithm for `bytes` (the whole buffer; for
/// all_gather, gather, scatter and reduce_scatter the sum over all ranks'
/// blocks; for all_to_all what one rank sends) on `p` ranks.
double modelled_cost(AllReduceAlgo algo, size_t bytes, int p, const CostModel& model = kCostModel);
double modelled_cost(BroadcastAlgo algo, size_t bytes, int p, const CostModel& model = kCostModel);
double modelled_cost(ReduceAlgo algo, size_t bytes, int p, const CostModel& model = kCostModel);
double modelled_cost(AllGatherAlgo algo, size_t bytes, int p, const CostModel& model = kCostModel);
double modelled_cost(GatherAlgo algo, size_t bytes, int p, const CostModel& model = kCostModel);
double modelled_cost(ScatterAlgo algo, size_t bytes, int p, const CostModel& model = kCostModel);
double modelled_cost(ReduceScatterAlgo algo, size_t bytes, int p, const CostModel& model = kCostModel);

/// All-to-all switches from linear (every transfer at once) to pairwise
/// exchange when the average block reaches this size: MPICH's
/// MPIR_CVAR_ALLTOALL_MEDIUM_MSG_SIZE.
inline constexpr size_t kAllToAllPairwiseBlockBytes = size_t{32} << 10;

/// The cheapest algorithm by the model (never kAuto).
AllReduceAlgo select_all_reduce(size_t bytes, int p);
BroadcastAlgo select_broadcast(size_t bytes, int p);
ReduceAlgo select_reduce(size_t bytes, int p);
AllGatherAlgo select_all_gather(size_t total_bytes, int p);
GatherAlgo select_gather(size_t total_bytes, int p);
ScatterAlgo select_scatter(size_t total_bytes, int p);
ReduceScatterAlgo select_reduce_scatter(size_t total_bytes, int p);
AllToAllAlgo select_all_to_all(size_t send_bytes, int p);
BarrierAlgo select_barrier(int p);

/// Algo is one of the enums of algorithms.h. Explicitly instantiated for
/// each of them in tcp_model.cc.
///
/// The algorithm's name as TDIST_ALGO_<OP> spells it ("auto" for kAuto).
template <typename Algo>
const char* algo_name(Algo algo);
/// The variable that forces Algo's op: "TDIST_ALGO_ALL_REDUCE".
template <typename Algo>
const char* algo_env_var();
/// Parses a name (case-insensitive; "auto" gives kAuto). Raises
/// DistInvalidArgument naming the variable and listing the valid names.
template <typename Algo>
Algo parse_algo(std::string_view name);
/// The algorithm TDIST_ALGO_<OP> forces, or nullopt if it is unset, empty or
/// "auto".
template <typename Algo>
std::optional<Algo> env_algo();

/// What a call runs: `requested` unless kAuto, else the environment's
/// choice, else the model's; recorded as the calling thread's choice
/// (note_chosen_algorithm, tuning.h).
AllReduceAlgo resolve_algo(AllReduceAlgo requested, size_t bytes, int p);
BroadcastAlgo resolve_algo(BroadcastAlgo requested, size_t bytes, int p);
ReduceAlgo resolve_algo(ReduceAlgo requested, size_t bytes, int p);
AllGatherAlgo resolve_algo(AllGatherAlgo requested, size_t bytes, int p);
GatherAlgo resolve_algo(GatherAlgo requested, size_t bytes, int p);
ScatterAlgo resolve_algo(ScatterAlgo requested, size_t bytes, int p);
ReduceScatterAlgo resolve_algo(ReduceScatterAlgo requested, size_t bytes, int p);
AllToAllAlgo resolve_algo(AllToAllAlgo requested, size_t bytes, int p);
BarrierAlgo resolve_algo(BarrierAlgo requested, int p);

}  // namespace tdist::algorithms
