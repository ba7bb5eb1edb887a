#pragma once

// The CPUs a thread may run on, for the shared-memory transport (do the
// ranks outnumber their CPUs?) and the launcher (tdistrun --bind-to core).

#include <cstddef>
#include <vector>

namespace tdist::detail {

/// The CPUs the calling thread may run on (sched_getaffinity), in
/// increasing order; empty if the kernel would not say.
std::vector<int> allowed_cpus();

/// Whether `ranks` processes outnumber the `cpus` they may run on (not
/// knowing the CPUs, count one): then a waiting rank must hand its CPU over
/// at once, and copies and rounds are sized for sharing a core.
inline bool outnumber_cpus(size_t ranks, size_t cpus) {
  return ranks > (cpus > 0 ? cpus : 1);
}

}  // namespace tdist::detail
