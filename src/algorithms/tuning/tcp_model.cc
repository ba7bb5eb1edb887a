#include "algorithms/tuning/tcp_model.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

#include "algorithms/patterns/chunking.h"
#include "algorithms/tuning/tuning.h"
#include "common/env.h"
#include "tdist/errors.h"

namespace tdist::algorithms {

// Measured on the development host (2 shared cores, TCP over loopback, two
// ranks as processes; medians of repeated runs, rounded) with this
// library's transport and kernels:
// - alpha: half the round trip of an 8-byte ping-pong, 30 us;
// - overhead: per message of a burst of 64 64-byte messages, 5 us;
// - beta: a 16 MiB transfer at ~1.2 GB/s, 0.8 ns per byte;
// - gamma: reduce_into float32 SUM on 256 KiB blocks, ~14 GB/s;
// - delta: memcpy of 256 KiB, ~25 GB/s.
// Only ratios matter for the choice: alpha/beta ~ 37 KB is the size below
// which saving a message beats saving a pass over the data.
const CostModel kCostModel{
    /*alpha=*/30e-6,
    /*overhead=*/5e-6,
    /*beta=*/0.8e-9,
    /*gamma=*/0.07e-9,
    /*delta=*/0.04e-9,
};

namespace {

struct Shape {
  double n;     // bytes
  double p;     // ranks
  double q;     // largest power of two <= p
  double lg;    // ceil(log2 p)
  double lgq;   // log2 q
  double fold;  // 1 if p is not a power of two (one more exchange on each side)
};

Shape shape(size_t bytes, int p) {
  const int q = patterns::pow2_floor(p);
  return Shape{static_cast<double>(bytes),
               static_cast<double>(p),
               static_cast<double>(q),
               static_cast<double>(patterns::ceil_log2(p)),
               static_cast<double>(patterns::floor_log2(p)),
               patterns::is_pow2(p) ? 0.0 : 1.0};
}

// The fraction of the data every rank but one must see: (p - 1) / p.
double spread(double p) {
  return (p - 1) / p;
}

template <typename Algo, size_t N>
Algo cheapest(const std::array<Algo, N>& candidates, size_t bytes, int p) {
  Algo best = candidates[0];
  double best_cost = modelled_cost(best, bytes, p);
  for (size_t i = 1; i < N; ++i) {
    const double cost = modelled_cost(candidates[i], bytes, p);
    if (cost < best_cost) {
      best = candidates[i];
      best_cost = cost;
    }
  }
  return best;
}

// ---- Names ----

template <typename Algo>
struct Names;

template <>
struct Names<AllReduceAlgo> {
  static constexpr const char* kOp = "all_reduce";
  static constexpr const char* kEnv = "TDIST_ALGO_ALL_REDUCE";
  static constexpr std::array<std::pair<const char*, AllReduceAlgo>, 4> kAll{{
      {"auto", AllReduceAlgo::kAuto},
      {"recursive_doubling", AllReduceAlgo::kRecursiveDoubling},
      {"ring", AllReduceAlgo::kRing},
      {"rabenseifner", AllReduceAlgo::kRabenseifner},
  }};
};

template <>
struct Names<BroadcastAlgo> {
  static constexpr const char* kOp = "broadcast";
  static constexpr const char* kEnv = "TDIST_ALGO_BROADCAST";
  static constexpr std::array<std::pair<const char*, BroadcastAlgo>, 3> kAll{{
      {"auto", BroadcastAlgo::kAuto},
      {"binomial", BroadcastAlgo::kBinomial},
      {"scatter_allgather", BroadcastAlgo::kScatterAllGather},
  }};
};

template <>
struct Names<ReduceAlgo> {
  static constexpr const char* kOp = "reduce";
  static constexpr const char* kEnv = "TDIST_ALGO_REDUCE";
  static constexpr std::array<std::pair<const char*, ReduceAlgo>, 3> kAll{{
      {"auto", ReduceAlgo::kAuto},
      {"binomial", ReduceAlgo::kBinomial},
      {"reduce_scatter_gather", ReduceAlgo::kReduceScatterGather},
  }};
};

template <>
struct Names<AllGatherAlgo> {
  static constexpr const char* kOp = "all_gather";
  static constexpr const char* kEnv = "TDIST_ALGO_ALL_GATHER";
  static constexpr std::array<std::pair<const char*, AllGatherAlgo>, 4> kAll{{
      {"auto", AllGatherAlgo::kAuto},
      {"ring", AllGatherAlgo::kRing},
      {"recursive_doubling", AllGatherAlgo::kRecursiveDoubling},
      {"bruck", AllGatherAlgo::kBruck},
  }};
};

template <>
struct Names<GatherAlgo> {
  static constexpr const char* kOp = "gather";
  static constexpr const char* kEnv = "TDIST_ALGO_GATHER";
  static constexpr std::array<std::pair<const char*, GatherAlgo>, 3> kAll{{
      {"auto", GatherAlgo::kAuto},
      {"binomial", GatherAlgo::kBinomial},
      {"linear", GatherAlgo::kLinear},
  }};
};

template <>
struct Names<ScatterAlgo> {
  static constexpr const char* kOp = "scatter";
  static constexpr const char* kEnv = "TDIST_ALGO_SCATTER";
  static constexpr std::array<std::pair<const char*, ScatterAlgo>, 3> kAll{{
      {"auto", ScatterAlgo::kAuto},
      {"binomial", ScatterAlgo::kBinomial},
      {"linear", ScatterAlgo::kLinear},
  }};
};

template <>
struct Names<ReduceScatterAlgo> {
  static constexpr const char* kOp = "reduce_scatter";
  static constexpr const char* kEnv = "TDIST_ALGO_REDUCE_SCATTER";
  static constexpr std::array<std::pair<const char*, ReduceScatterAlgo>, 3> kAll{{
      {"auto", ReduceScatterAlgo::kAuto},
      {"ring", ReduceScatterAlgo::kRing},
      {"recursive_halving", ReduceScatterAlgo::kRecursiveHalving},
  }};
};

template <>
struct Names<AllToAllAlgo> {
  static constexpr const char* kOp = "all_to_all";
  static constexpr const char* kEnv = "TDIST_ALGO_ALL_TO_ALL";
  static constexpr std::array<std::pair<const char*, AllToAllAlgo>, 3> kAll{{
      {"auto", AllToAllAlgo::kAuto},
      {"pairwise", AllToAllAlgo::kPairwise},
      {"linear", AllToAllAlgo::kLinear},
  }};
};

template <>
struct Names<BarrierAlgo> {
  static constexpr const char* kOp = "barrier";
  static constexpr const char* kEnv = "TDIST_ALGO_BARRIER";
  static constexpr std::array<std::pair<const char*, BarrierAlgo>, 2> kAll{{
      {"auto", BarrierAlgo::kAuto},
      {"dissemination", BarrierAlgo::kDissemination},
  }};
};

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

// ---- The model ----
// n bytes, p ranks, q = pof2 <= p. "fold" terms are the extra exchange on
// each side that makes the power-of-two patterns work for any p (MPICH).

double modelled_cost(AllReduceAlgo algo, size_t bytes, int p, const CostModel& m) {
  const Shape s = shape(bytes, p);
  switch (algo) {
    case AllReduceAlgo::kRecursiveDoubling:
      // Every step moves and reduces the whole buffer.
      return (s.lgq + 2 * s.fold) * (m.alpha + s.n * m.beta) + (s.lgq + s.fold) * s.n * m.gamma;
    case AllReduceAlgo::kRabenseifner:
      return (2 * s.lgq + 2 * s.fold) * m.alpha + 2 * spread(s.q) * s.n * m.beta +
             spread(s.q) * s.n * m.gamma + s.fold * (2 * s.n * m.beta + s.n * m.gamma);
    case AllReduceAlgo::kRing:
      return 2 * (s.p - 1) * m.alpha + 2 * spread(s.p) * s.n * m.beta + spread(s.p) * s.n * m.gamma;
    case AllReduceAlgo::kAuto:
      break;
  }
  return 0;
}

double modelled_cost(BroadcastAlgo algo, size_t bytes, int p, const CostModel& m) {
  const Shape s = shape(bytes, p);
  switch (algo) {
    case BroadcastAlgo::kBinomial:
      // The root sends the whole buffer to each of its ceil(lg p) children.
      return s.lg * (m.alpha + s.n * m.beta);
    case BroadcastAlgo::kScatterAllGather:
      // van de Geijn: binomial scatter, then ring all-gather.
      return (s.lg + s.p - 1) * m.alpha + 2 * spread(s.p) * s.n * m.beta;
    case BroadcastAlgo::kAuto:
      break;
  }
  return 0;
}

double modelled_cost(ReduceAlgo algo, size_t bytes, int p, const CostModel& m) {
  const Shape s = shape(bytes, p);
  switch (algo) {
    case ReduceAlgo::kBinomial:
      return s.lg * (m.alpha + s.n * (m.beta + m.gamma));
    case ReduceAlgo::kReduceScatterGather:
      // Rabenseifner's reduce: recursive halving, then a binomial gather.
      return (2 * s.lgq + 2 * s.fold) * m.alpha + 2 * spread(s.q) * s.n * m.beta +
             spread(s.q) * s.n * m.gamma + s.fold * s.n * (2 * m.beta + m.gamma);
    case ReduceAlgo::kAuto:
      break;
  }
  return 0;
}

double modelled_cost(AllGatherAlgo algo, size_t bytes, int p, const CostModel& m) {
  const Shape s = shape(bytes, p);
  switch (algo) {
    case AllGatherAlgo::kRecursiveDoubling:
      // The fold sends one block in and the whole result back out.
      return (s.lgq + 2 * s.fold) * m.alpha + spread(s.q) * s.n * m.beta +
             s.fold * (s.n / s.p + s.n) * m.beta;
    case AllGatherAlgo::kBruck:
      // Plus the copy into the rotated buffer and the one back out.
      return s.lg * m.alpha + spread(s.p) * s.n * m.beta + 2 * s.n * m.delta;
    case AllGatherAlgo::kRing:
      return (s.p - 1) * m.alpha + spread(s.p) * s.n * m.beta;
    case AllGatherAlgo::kAuto:
      break;
  }
  return 0;
}

double modelled_cost(GatherAlgo algo, size_t bytes, int p, const CostModel& m) {
  const Shape s = shape(bytes, p);
  switch (algo) {
    case GatherAlgo::kBinomial:
      // Inner nodes stage their subtree's blocks: each byte is copied about
      // lg(p) / 2 times on its way up.
      return s.lg * m.alpha + spread(s.p) * s.n * m.beta + s.lg / 2 * s.n * m.delta;
    case GatherAlgo::kLinear:
      // The p - 1 messages are in flight together.
      return m.alpha + (s.p - 2) * m.overhead + spread(s.p) * s.n * m.beta;
    case GatherAlgo::kAuto:
      break;
  }
  return 0;
}

double modelled_cost(ScatterAlgo algo, size_t bytes, int p, const CostModel& m) {
  switch (algo) {
    case ScatterAlgo::kBinomial:
      return modelled_cost(GatherAlgo::kBinomial, bytes, p, m);
    case ScatterAlgo::kLinear:
      return modelled_cost(GatherAlgo::kLinear, bytes, p, m);
    case ScatterAlgo::kAuto:
      break;
  }
  return 0;
}

double modelled_cost(ReduceScatterAlgo algo, size_t bytes, int p, const CostModel& m) {
  const Shape s = shape(bytes, p);
  switch (algo) {
    case ReduceScatterAlgo::kRecursiveHalving:
      // Plus the working copy of the input.
      return (s.lgq + 2 * s.fold) * m.alpha + spread(s.q) * s.n * (m.beta + m.gamma) +
             s.fold * (s.n * (m.beta + m.gamma) + s.n / s.p * m.beta) + s.n * m.delta;
    case ReduceScatterAlgo::kRing:
      return (s.p - 1) * m.alpha + spread(s.p) * s.n * (m.beta + m.gamma);
    case ReduceScatterAlgo::kAuto:
      break;
  }
  return 0;
}

// ---- Selection ----

AllReduceAlgo select_all_reduce(size_t bytes, int p) {
  return cheapest(
      std::array{AllReduceAlgo::kRecursiveDoubling, AllReduceAlgo::kRabenseifner, AllReduceAlgo::kRing},
      bytes, p);
}

BroadcastAlgo select_broadcast(size_t bytes, int p) {
  return cheapest(std::array{BroadcastAlgo::kBinomial, BroadcastAlgo::kScatterAllGather}, bytes, p);
}

ReduceAlgo select_reduce(size_t bytes, int p) {
  return cheapest(std::array{ReduceAlgo::kBinomial, ReduceAlgo::kReduceScatterGather}, bytes, p);
}

AllGatherAlgo select_all_gather(size_t total_bytes, int p) {
  return cheapest(std::array{AllGatherAlgo::kRecursiveDoubling, AllGatherAlgo::kBruck, AllGatherAlgo::kRing},
                  total_bytes, p);
}

GatherAlgo select_gather(size_t total_bytes, int p) {
  return cheapest(std::array{GatherAlgo::kBinomial, GatherAlgo::kLinear}, total_bytes, p);
}

ScatterAlgo select_scatter(size_t total_bytes, int p) {
  return cheapest(std::array{ScatterAlgo::kBinomial, ScatterAlgo::kLinear}, total_bytes, p);
}

ReduceScatterAlgo select_reduce_scatter(size_t total_bytes, int p) {
  return cheapest(std::array{ReduceScatterAlgo::kRecursiveHalving, ReduceScatterAlgo::kRing}, total_bytes, p);
}

AllToAllAlgo select_all_to_all(size_t send_bytes, int p) {
  // Both algorithms send each block as one message under the same tag, so
  // ranks whose totals fall on different sides of the threshold still match.
  return send_bytes / static_cast<size_t>(p) < kAllToAllPairwiseBlockBytes ? AllToAllAlgo::kLinear
                                                                           : AllToAllAlgo::kPairwise;
}

BarrierAlgo select_barrier(int /*p*/) {
  return BarrierAlgo::kDissemination;
}

// ---- Names and the environment ----

template <typename Algo>
const char* algo_name(Algo algo) {
  for (const auto& [name, value] : Names<Algo>::kAll) {
    if (value == algo) return name;
  }
  return "unknown";
}

template <typename Algo>
const char* algo_env_var() {
  return Names<Algo>::kEnv;
}

template <typename Algo>
Algo parse_algo(std::string_view name) {
  for (const auto& [known, value] : Names<Algo>::kAll) {
    if (equals_ignoring_case(name, known)) return value;
  }
  std::string valid;
  for (const auto& entry : Names<Algo>::kAll) {
    if (!valid.empty()) valid += ", ";
    valid += entry.first;
  }
  throw DistInvalidArgument(std::string(Names<Algo>::kEnv) + ": unknown " + Names<Algo>::kOp +
                            " algorithm '" + std::string(name) + "'; valid names: " + valid);
}

template <typename Algo>
std::optional<Algo> env_algo() {
  const std::optional<std::string> value = env_string(Names<Algo>::kEnv);
  if (!value) return std::nullopt;
  const Algo algo = parse_algo<Algo>(*value);
  if (algo == Algo::kAuto) return std::nullopt;
  return algo;
}

#define TDIST_INSTANTIATE_ALGO(Algo)                \
  template const char* algo_name<Algo>(Algo);       \
  template const char* algo_env_var<Algo>();        \
  template Algo parse_algo<Algo>(std::string_view); \
  template std::optional<Algo> env_algo<Algo>();

TDIST_INSTANTIATE_ALGO(AllReduceAlgo)
TDIST_INSTANTIATE_ALGO(BroadcastAlgo)
TDIST_INSTANTIATE_ALGO(ReduceAlgo)
TDIST_INSTANTIATE_ALGO(AllGatherAlgo)
TDIST_INSTANTIATE_ALGO(GatherAlgo)
TDIST_INSTANTIATE_ALGO(ScatterAlgo)
TDIST_INSTANTIATE_ALGO(ReduceScatterAlgo)
TDIST_INSTANTIATE_ALGO(AllToAllAlgo)
TDIST_INSTANTIATE_ALGO(BarrierAlgo)
#undef TDIST_INSTANTIATE_ALGO

namespace {

template <typename Algo, typename Select>
Algo resolve(Algo requested, Select&& select) {
  Algo chosen = requested;
  if (requested == Algo::kAuto) {
    const std::optional<Algo> forced = env_algo<Algo>();
    chosen = forced ? *forced : select();
  }
  note_chosen_algorithm(algo_name(chosen));
  return chosen;
}

}  // namespace

AllReduceAlgo resolve_algo(AllReduceAlgo requested, size_t bytes, int p) {
  return resolve(requested, [&] { return select_all_reduce(bytes, p); });
}
BroadcastAlgo resolve_algo(BroadcastAlgo requested, size_t bytes, int p) {
  return resolve(requested, [&] { return select_broadcast(bytes, p); });
}
ReduceAlgo resolve_algo(ReduceAlgo requested, size_t bytes, int p) {
  return resolve(requested, [&] { return select_reduce(bytes, p); });
}
AllGatherAlgo resolve_algo(AllGatherAlgo requested, size_t bytes, int p) {
  return resolve(requested, [&] { return select_all_gather(bytes, p); });
}
GatherAlgo resolve_algo(GatherAlgo requested, size_t bytes, int p) {
  return resolve(requested, [&] { return select_gather(bytes, p); });
}
ScatterAlgo resolve_algo(ScatterAlgo requested, size_t bytes, int p) {
  return resolve(requested, [&] { return select_scatter(bytes, p); });
}
ReduceScatterAlgo resolve_algo(ReduceScatterAlgo requested, size_t bytes, int p) {
  return resolve(requested, [&] { return select_reduce_scatter(bytes, p); });
}
AllToAllAlgo resolve_algo(AllToAllAlgo requested, size_t bytes, int p) {
  return resolve(requested, [&] { return select_all_to_all(bytes, p); });
}
BarrierAlgo resolve_algo(BarrierAlgo requested, int p) {
  return resolve(requested, [&] { return select_barrier(p); });
}

}  // namespace tdist::algorithms
