#pragma once

// The CPUs a thread may run on, for the shared-memory transport (do the
// ranks outnumber their CPUs?) and the launcher (tdistrun --bind-to).

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

/// The core CPU `cpu` belongs to, as the lowest-numbered CPU of its core
/// (sysfs topology/core_cpus_list or thread_siblings_list); `cpu` itself
/// if the kernel does not say.
int core_of_cpu(int cpu);

/// `cpus` shared out among `parts` ranks (1 <= parts <= cpus.size()) as
/// tdistrun --bind-to auto does: the CPUs ordered by core (`core_of[i]` is
/// the core of cpus[i]), then cut into `parts` runs of equal length (the
/// first ones one shorter when it does not divide), so that a rank gets
/// whole cores when the cores divide among the ranks, and no two ranks
/// share a core's hardware threads unless there are fewer cores than ranks.
std::vector<std::vector<int>> share_cpus(const std::vector<int>& cpus, const std::vector<int>& core_of,
                                         int parts);
/// share_cpus with each CPU's core from the kernel (core_of_cpu).
std::vector<std::vector<int>> share_cpus(const std::vector<int>& cpus, int parts);

}  // namespace tdist::detail
