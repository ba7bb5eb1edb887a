#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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

// A positive int at the front of `text`, which it then drops; nullopt if
// there is none (or it overflows).
std::optional<int> take_positive(std::string_view& text) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || value < 1) return std::nullopt;
  text.remove_prefix(static_cast<size_t>(end - text.data()));
  return value;
}

// Slurm's ranks per node of a step: SLURM_STEP_TASKS_PER_NODE (else
// SLURM_TASKS_PER_NODE), "2(x3),1" for nodes of 2, 2, 2 and 1 tasks; this
// node's entry is the SLURM_NODEID-th (needed only when they differ). -1
// if unset or not exactly in that form.
int slurm_tasks_on_this_node() {
  std::optional<std::string> list = env_string("SLURM_STEP_TASKS_PER_NODE");
  if (!list) list = env_string("SLURM_TASKS_PER_NODE");
  if (!list || list->empty()) return -1;
  const int node = first_set({"SLURM_NODEID"}, 0);
  int64_t nodes_before = 0;  // nodes of the entries already read
  int mine = -1;             // this node's tasks, once reached
  int first = -1;
  bool all_equal = true;
  std::string_view text(*list);
  for (;;) {
    const std::optional<int> tasks = take_positive(text);
    if (!tasks) return -1;
    int times = 1;
    if (text.substr(0, 2) == "(x") {
      text.remove_prefix(2);
      const std::optional<int> repeat = take_positive(text);
      if (!repeat || text.empty() || text.front() != ')') return -1;
      text.remove_prefix(1);
      times = *repeat;
    }
    if (first < 0) first = *tasks;
    all_equal = all_equal && *tasks == first;
    if (node >= nodes_before && node < nodes_before + times) mine = *tasks;
    nodes_before += times;
    if (text.empty()) break;
    if (text.front() != ',' || text.size() == 1) return -1;  // "2," is not a list either
    text.remove_prefix(1);
  }
  return all_equal ? first : mine;
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
