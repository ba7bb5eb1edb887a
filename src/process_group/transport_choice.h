#pragma once

// Which domain (algorithms/collective_domain.h) a tdist group's collectives
// run in: shared memory when every rank runs on this host (decided from host
// identities exchanged through the store, never guessed from
// LOCAL_WORLD_SIZE); when the ranks span hosts with the same number of ranks
// on each, the hierarchy (shared memory inside the host plus TCP across
// hosts for all_reduce, broadcast, all_gather, reduce_scatter and
// all_to_all); TCP otherwise. TDIST_TRANSPORT=auto|tcp|shm overrides
// (docs/environment.md).

#include <chrono>
#include <memory>
#include <vector>

#include "algorithms/collective_domain.h"
#include "tdist/store.h"
#include "transport/shm/shm_group.h"
#include "transport/subset_transport.h"

namespace tdist {

enum class TransportMode { kAuto, kTcp, kShm };

/// TDIST_TRANSPORT, parsed; raises DistInvalidArgument on anything else.
TransportMode transport_mode();

/// What a group's collectives may use besides TCP over all ranks.
struct CollectiveDomains {
  /// Every rank is on this host: all collectives on shared memory.
  std::unique_ptr<transport::shm::ShmGroup> shm;
  /// The hierarchy: this host's ranks (as `local_ranks` of the group's
  /// transport) and the ranks with the same local index on every host.
  std::unique_ptr<transport::shm::ShmGroup> local;
  std::unique_ptr<transport::SubsetTransport> local_ranks;
  std::unique_ptr<transport::SubsetTransport> cross_ranks;
  /// by_host[h][j]: the group rank of local index j on host h.
  std::vector<std::vector<int>> by_host;
  /// The hierarchy's pipeline chunk: group rank 0's TDIST_HIER_CHUNK_BYTES
  /// (default 2 MiB), the same on every rank.
  size_t hierarchy_chunk_bytes = 0;
  /// The domain the group's collectives run in, over the members above
  /// (null: TCP, algorithms::tcp_domain()). Declared last: destroyed first.
  std::unique_ptr<algorithms::CollectiveDomain> domain;

  algorithms::CollectiveDomain& collectives() const { return domain ? *domain : algorithms::tcp_domain(); }
};

/// Every rank must call it, with the group's TCP transport. Mode shm with
/// ranks on several hosts raises DistInvalidArgument naming a rank that is
/// elsewhere.
CollectiveDomains connect_collective_domains(Store& store, transport::Transport& tcp,
                                             std::chrono::milliseconds timeout);

}  // namespace tdist
