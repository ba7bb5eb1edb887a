#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "common/env.h"
#include "tdist/spawn.h"

namespace tdist {
namespace {

// The first of `names` that is set, parsed; -1 if none is. `source` gets the
// name that was used.
int first_set(std::initializer_list<const char*> names, int64_t min, std::string* source = nullptr) {
  for (const char* name : names) {
    if (auto value = env_int(name, min, INT32_MAX)) {
      if (source != nullptr) *source = name;
      return static_cast<int>(*value);
    }
  }
  return -1;
}

// Slurm's ranks per node of a step: SLURM_STEP_TASKS_PER_NODE (else
// SLURM_TASKS_PER_NODE), "2(x3),1" for nodes of 2, 2, 2 and 1 tasks; this
// node's entry is the SLURM_NODEID-th. -1 if unset or not in that form.
int slurm_tasks_on_this_node() {
  std::optional<std::string> list = env_string("SLURM_STEP_TASKS_PER_NODE");
  if (!list) list = env_string("SLURM_TASKS_PER_NODE");
  if (!list) return -1;
  std::vector<int> per_node;
  for (size_t at = 0; at < list->size();) {
    size_t end = list->find(',', at);
    if (end == std::string::npos) end = list->size();
    const std::string entry = list->substr(at, end - at);
    int tasks = 0;
    int times = 1;
    char tail = 0;
    if (std::sscanf(entry.c_str(), "%d(x%d)%c", &tasks, &times, &tail) == 2 ||  // NOLINT(cert-err34-c)
        std::sscanf(entry.c_str(), "%d%c", &tasks, &tail) == 1) {               // NOLINT(cert-err34-c)
      if (tasks < 1 || times < 1 || times > 1'000'000) return -1;
      per_node.insert(per_node.end(), static_cast<size_t>(times), tasks);
    } else {
      return -1;
    }
    at = end + 1;
  }
  if (per_node.empty()) return -1;
  if (std::all_of(per_node.begin(), per_node.end(), [&](int n) { return n == per_node[0]; }))
    return per_node[0];
  const int node = first_set({"SLURM_NODEID"}, 0);
  return node >= 0 && static_cast<size_t>(node) < per_node.size() ? per_node[static_cast<size_t>(node)] : -1;
}

}  // namespace

LaunchEnvironment launch_environment() {
  // Keep the rank and world-size orders in step with env:// rendezvous
  // (src/rendezvous/rendezvous.cc).
  LaunchEnvironment env;
  env.rank = first_set({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, 0, &env.rank_source);
  env.world_size = first_set(
      {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, 1);
  env.local_rank =
      first_set({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, 0);
  env.local_world_size = first_set({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, 1);
  // srun gives no local world size of its own, only every node's tasks.
  if (env.local_world_size < 0 && env.rank_source == "SLURM_PROCID")
    env.local_world_size = slurm_tasks_on_this_node();
  return env;
}

}  // namespace tdist
