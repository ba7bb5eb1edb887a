#pragma once

// Where a collective runs: one seam with the same op signatures for each
// way a group can move its bytes.
//
//   tcp_domain()                  the algorithms of algorithms.h over the
//                                 group's transport (any group);
//   make_shm_domain(group)        shm/shm_collectives.h on one host's shared
//                                 memory (every rank on this host);
//   make_hierarchical_domain(...) shared memory inside each host, TCP across
//                                 hosts (the same number of ranks on each).
//
// The process group picks one domain per call in one function
// (ProcessGroupTdist::domain_for); each domain picks its algorithm inside
// (algorithms/tuning/tuning.h lists every choice). Contracts are
// those of the functions of the same names in algorithms.h.

#include <cstddef>
#include <memory>
#include <vector>

#include "algorithms/algorithms.h"

namespace tdist::transport::shm {
class ShmGroup;
}

namespace tdist::algorithms {

/// A place in an all_gather's output: `bytes` bytes at `data`.
struct OutputSegment {
  void* data;
  size_t bytes;
};
/// A piece of a reduce_scatter's input block: `count` elements at `data`.
struct InputSegment {
  const void* data;
  size_t count;
};

class CollectiveDomain {
 public:
  virtual ~CollectiveDomain() = default;
  /// "tcp", "shared memory" or "shared memory + tcp", for logs and traces.
  virtual const char* name() const = 0;

  virtual void all_reduce(const CallContext& ctx, void* data, size_t count, DType dtype,
                          const ReduceOp& op) = 0;
  virtual void broadcast(const CallContext& ctx, void* data, size_t nbytes, int root) = 0;
  /// Unlike algorithms::reduce, leaves a non-root rank's `data` intact.
  virtual void reduce(const CallContext& ctx, void* data, size_t count, DType dtype, const ReduceOp& op,
                      int root) = 0;
  virtual void all_gather(const CallContext& ctx, const void* in, void* out,
                          const std::vector<size_t>& bytes) = 0;
  virtual void gather(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& bytes,
                      int root) = 0;
  virtual void scatter(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& bytes,
                       int root) = 0;
  virtual void reduce_scatter(const CallContext& ctx, const void* in, void* out,
                              const std::vector<size_t>& counts, DType dtype, const ReduceOp& op) = 0;
  virtual void all_to_all(const CallContext& ctx, const void* in, const std::vector<size_t>& send_bytes,
                          const std::vector<size_t>& send_offsets, void* out,
                          const std::vector<size_t>& recv_bytes, const std::vector<size_t>& recv_offsets) = 0;
  virtual void barrier(const CallContext& ctx) = 0;

  /// The list forms that work where each tensor lies (rank r's block of an
  /// all_gather fills blocks[r]'s segments; block j of a reduce_scatter is
  /// blocks[j]'s segments). A domain without them returns false and does
  /// nothing: the caller then stages the list in one buffer.
  virtual bool all_gather_in_place(const CallContext& /*ctx*/, const void* /*in*/,
                                   const std::vector<std::vector<OutputSegment>>& /*blocks*/) {
    return false;
  }
  virtual bool reduce_scatter_in_place(const CallContext& /*ctx*/,
                                       const std::vector<std::vector<InputSegment>>& /*blocks*/,
                                       void* /*out*/, const std::vector<size_t>& /*counts*/, DType /*dtype*/,
                                       const ReduceOp& /*op*/) {
    return false;
  }
};

/// The TCP domain: stateless (every call brings its transport in ctx).
CollectiveDomain& tcp_domain();

/// Every rank of the group on this host: collectives in `group`'s shared
/// memory, which must outlive the domain.
std::unique_ptr<CollectiveDomain> make_shm_domain(transport::shm::ShmGroup& group);

/// What a hierarchical group is made of; what the pointers point at
/// outlives the domain.
struct Hierarchy {
  /// This host's shared memory and its ranks as a transport.
  transport::shm::ShmGroup* local = nullptr;
  transport::Transport* local_ranks = nullptr;
  /// The ranks with this rank's local index on every host.
  transport::Transport* cross_ranks = nullptr;
  /// by_host[h][j]: the group rank of local index j on host h (hosts in
  /// order of their lowest rank).
  std::vector<std::vector<int>> by_host;
  /// The pipeline's chunk, the same on every rank.
  size_t chunk_bytes = 0;
};

/// Shared memory inside each host, TCP across, for all_reduce, broadcast,
/// all_gather, reduce_scatter and all_to_all; the other ops run over TCP
/// on every rank. The domain owns the thread that runs the pipeline's TCP
/// stage.
std::unique_ptr<CollectiveDomain> make_hierarchical_domain(const Hierarchy& hierarchy);

}  // namespace tdist::algorithms
