#pragma once

// Collectives implemented directly on a group's shared memory
// (transport/shm/shm_group.h), for groups whose ranks share one host. Same
// contracts as the functions of the same names in algorithms.h; the process
// group chooses these when the group has a shared-memory domain.
//
// Data moves in rounds of at most one buffer per rank (pipelined: a rank
// fills its other buffer while peers still read the last one), large
// broadcasts and gathers in a ring of slots over both buffers, and blocks
// in single copy's windows straight between the ranks' memories. Messages of
// at most kPayloadBytes travel inside the flag's cache line. Reductions run
// in rank order 0..p-1 by one owner per piece, so every rank gets the same
// bits.

#include <cstddef>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/collective_domain.h"  // InputSegment, OutputSegment
#include "common/worker_thread.h"
#include "transport/shm/shm_group.h"

namespace tdist::algorithms::shm {

using transport::shm::ShmGroup;

void all_reduce(const CallContext& ctx, ShmGroup& group, void* data, size_t count, DType dtype,
                const ReduceOp& op);
void reduce(const CallContext& ctx, ShmGroup& group, void* data, size_t count, DType dtype,
            const ReduceOp& op, int root);
void reduce_scatter(const CallContext& ctx, ShmGroup& group, const void* in, void* out,
                    const std::vector<size_t>& counts, DType dtype, const ReduceOp& op);
void broadcast(const CallContext& ctx, ShmGroup& group, void* data, size_t nbytes, int root);

/// reduce_scatter whose block j is blocks[j]'s segments one after another
/// (counts[j] elements in all), read where they lie: no copy into one
/// buffer first.
void reduce_scatter_segments(const CallContext& ctx, ShmGroup& group,
                             const std::vector<std::vector<InputSegment>>& blocks, void* out,
                             const std::vector<size_t>& counts, DType dtype, const ReduceOp& op);
void all_gather(const CallContext& ctx, ShmGroup& group, const void* in, void* out,
                const std::vector<size_t>& bytes);
/// all_gather whose rank r's block fills blocks[r]'s segments one after
/// another (its size is theirs in all), written where they lie: no copy
/// out of one buffer afterwards.
void all_gather_segments(const CallContext& ctx, ShmGroup& group, const void* in,
                         const std::vector<std::vector<OutputSegment>>& blocks);
void gather(const CallContext& ctx, ShmGroup& group, const void* in, void* out,
            const std::vector<size_t>& bytes, int root);
void scatter(const CallContext& ctx, ShmGroup& group, const void* in, void* out,
             const std::vector<size_t>& bytes, int root);
void all_to_all(const CallContext& ctx, ShmGroup& group, const void* in,
                const std::vector<size_t>& send_bytes, const std::vector<size_t>& send_offsets, void* out,
                const std::vector<size_t>& recv_bytes, const std::vector<size_t>& recv_offsets);
void barrier(const CallContext& ctx, ShmGroup& group);

/// all_reduce over a group spanning hosts with the same number of ranks on
/// each: `local` is this host's shared memory, `local_ranks` its ranks as a
/// transport, `cross_ranks` the ranks with this rank's local index on every
/// host. `ctx` is the call on the whole group.
void hierarchical_all_reduce(const CallContext& ctx, ShmGroup& local, transport::Transport& local_ranks,
                             transport::Transport& cross_ranks, tdist::detail::WorkerThread& cross_worker,
                             size_t chunk_bytes, void* data, size_t count, DType dtype, const ReduceOp& op);

/// all_gather over the same kind of group: `by_host[h][j]` is the group rank
/// of local index j on host h (hosts in order of their lowest rank). Each
/// block crosses each host boundary once; pipelined in chunks of
/// `chunk_bytes` of every block.
void hierarchical_all_gather(const CallContext& ctx, ShmGroup& local, transport::Transport& local_ranks,
                             transport::Transport& cross_ranks, tdist::detail::WorkerThread& cross_worker,
                             size_t chunk_bytes, const std::vector<std::vector<int>>& by_host, const void* in,
                             void* out, const std::vector<size_t>& bytes);

/// reduce_scatter over the same kind of group (`counts` per group rank):
/// every byte of the input crosses a host boundary at most once, reduced
/// inside its host first; pipelined in chunks of `chunk_bytes` of every
/// block.
void hierarchical_reduce_scatter(const CallContext& ctx, ShmGroup& local, transport::Transport& local_ranks,
                                 transport::Transport& cross_ranks, tdist::detail::WorkerThread& cross_worker,
                                 size_t chunk_bytes, const std::vector<std::vector<int>>& by_host,
                                 const void* in, void* out, const std::vector<size_t>& counts, DType dtype,
                                 const ReduceOp& op);

/// broadcast over the same kind of group from group rank `root`: the root's
/// host sends the buffer across its link once, each local index carrying
/// its piece of every chunk of `chunk_bytes`; pipelined.
void hierarchical_broadcast(const CallContext& ctx, ShmGroup& local, transport::Transport& local_ranks,
                            transport::Transport& cross_ranks, tdist::detail::WorkerThread& cross_worker,
                            size_t chunk_bytes, const std::vector<std::vector<int>>& by_host, void* data,
                            size_t nbytes, int root);

/// all_to_all over the same kind of group:
/// blocks between ranks of one host in shared memory, the others over the
/// group's TCP transport, at once.
void hierarchical_all_to_all(const CallContext& ctx, ShmGroup& local, transport::Transport& local_ranks,
                             tdist::detail::WorkerThread& cross_worker,
                             const std::vector<std::vector<int>>& by_host, const void* in,
                             const std::vector<size_t>& send_bytes, const std::vector<size_t>& send_offsets,
                             void* out, const std::vector<size_t>& recv_bytes,
                             const std::vector<size_t>& recv_offsets);

}  // namespace tdist::algorithms::shm
