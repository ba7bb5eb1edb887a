#pragma once

// The CPUs a thread may run on, for the shared-memory transport (do the
// ranks outnumber their CPUs?) and the launcher (tdistrun --bind-to core).

#include <vector>

namespace tdist::detail {

/// The CPUs the calling thread may run on (sched_getaffinity), in
/// increasing order; empty if the kernel would not say.
std::vector<int> allowed_cpus();

}  // namespace tdist::detail
