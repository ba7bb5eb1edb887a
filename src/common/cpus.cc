#include "common/cpus.h"

#include <sched.h>

#include <cerrno>

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

}  // namespace tdist::detail
