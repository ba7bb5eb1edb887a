#include "common/cpus.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <numeric>
#include <string>

namespace tdist::detail {

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  // A set as large as the kernel's: sched_getaffinity fails (EINVAL) with
  // a smaller one, which a fixed cpu_set_t (1024 CPUs) would be on a kernel
  // built for more.
  for (int capacity = CPU_SETSIZE; capacity <= (1 << 20); capacity *= 2) {
    cpu_set_t* set = CPU_ALLOC(capacity);
    if (set == nullptr) return cpus;
    const size_t bytes = CPU_ALLOC_SIZE(capacity);
    CPU_ZERO_S(bytes, set);
    if (sched_getaffinity(0, bytes, set) == 0) {
      for (int cpu = 0; cpu < capacity; ++cpu) {
        if (CPU_ISSET_S(cpu, bytes, set)) cpus.push_back(cpu);
      }
      CPU_FREE(set);
      return cpus;
    }
    const int error = errno;
    CPU_FREE(set);
    if (error != EINVAL) return cpus;
  }
  return cpus;
}

int core_of_cpu(int cpu) {
  for (const char* list : {"core_cpus_list", "thread_siblings_list"}) {
    std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/" + list);
    int first = -1;
    // "0-1", "0,64" or "3": the lowest CPU comes first.
    if (in >> first && first >= 0) return first;
  }
  return cpu;
}

std::vector<std::vector<int>> share_cpus(const std::vector<int>& cpus, const std::vector<int>& core_of,
                                         int parts) {
  const size_t n = cpus.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return core_of[a] != core_of[b] ? core_of[a] < core_of[b] : cpus[a] < cpus[b];
  });
  std::vector<std::vector<int>> shares(static_cast<size_t>(parts));
  const auto p = static_cast<size_t>(parts);
  for (size_t i = 0; i < p; ++i) {
    // Share i is [i * n / p, (i + 1) * n / p): lengths differ by at most one.
    for (size_t j = i * n / p; j < (i + 1) * n / p; ++j) shares[i].push_back(cpus[order[j]]);
    std::sort(shares[i].begin(), shares[i].end());
  }
  return shares;
}

std::vector<std::vector<int>> share_cpus(const std::vector<int>& cpus, int parts) {
  std::vector<int> cores(cpus.size());
  std::transform(cpus.begin(), cpus.end(), cores.begin(), core_of_cpu);
  return share_cpus(cpus, cores, parts);
}

}  // namespace tdist::detail
