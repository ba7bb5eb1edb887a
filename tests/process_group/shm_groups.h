// Helpers of the shared-memory tests (test_shm.cc, test_shm_hosts.cc):
// groups of forked ranks that each set their environment first.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pg_harness.h"
#include "process_group/tdist_backend.h"
#include "tdist/file_store.h"

namespace tdist::testing {

inline bool uses_shm(ProcessGroup& pg) {
  return dynamic_cast<ProcessGroupTdist&>(pg).collectives_on_shared_memory();
}

// Forked ranks with a FileStore; `setup(rank)` runs first (environment).
inline std::vector<RankOutcome> forked_groups(int n, const std::string& path,
                                              const std::function<void(int)>& setup,
                                              const std::function<void(ProcessGroup&, Store&, int)>& body) {
  using namespace std::chrono_literals;
  return run_forked(
      n,
      [&](int rank) {
        setup(rank);
        auto store = std::make_shared<FileStore>(path, n);
        ProcessGroupOptions options;
        options.timeout = 30s;
        auto pg = create_process_group("tdist", store, rank, n, options);
        body(*pg, *store, rank);
      },
      60s);
}

}  // namespace tdist::testing
