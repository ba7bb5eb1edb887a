#include <cstdint>
#include <optional>

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
  return env;
}

}  // namespace tdist
