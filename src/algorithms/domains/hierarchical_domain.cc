// The hierarchical domain: shared memory inside each host and TCP across
// (shm/shm_hierarchical.cc) for the five ops that have a hierarchical form;
// reduce, gather, scatter and barrier run over TCP on every rank, as the
// TCP domain runs them.

#include "algorithms/collective_domain.h"
#include "algorithms/shm/shm_collectives.h"
#include "algorithms/tuning/tuning.h"
#include "common/worker_thread.h"

namespace tdist::algorithms {
namespace {

class HierarchicalDomain final : public CollectiveDomain {
 public:
  explicit HierarchicalDomain(const Hierarchy& h)
      : h_(h), local_(*h.local), local_ranks_(*h.local_ranks), cross_ranks_(*h.cross_ranks) {}
  const char* name() const override { return "shared memory + tcp"; }
  void all_reduce(const CallContext& ctx, void* data, size_t count, DType dtype,
                  const ReduceOp& op) override {
    shm::hierarchical_all_reduce(ctx, local_, local_ranks_, cross_ranks_, cross_worker_, h_.chunk_bytes, data,
                                 count, dtype, op);
    note_chosen_algorithm("hierarchical");  // after: the local stages name their own
  }
  void broadcast(const CallContext& ctx, void* data, size_t nbytes, int root) override {
    shm::hierarchical_broadcast(ctx, local_, local_ranks_, cross_ranks_, cross_worker_, h_.chunk_bytes,
                                h_.by_host, data, nbytes, root);
    note_chosen_algorithm("hierarchical");  // after: the local stages name their own
  }
  void all_gather(const CallContext& ctx, const void* in, void* out,
                  const std::vector<size_t>& bytes) override {
    shm::hierarchical_all_gather(ctx, local_, local_ranks_, cross_ranks_, cross_worker_, h_.chunk_bytes,
                                 h_.by_host, in, out, bytes);
    note_chosen_algorithm("hierarchical");  // after: the local stages name their own
  }
  void reduce_scatter(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& counts,
                      DType dtype, const ReduceOp& op) override {
    shm::hierarchical_reduce_scatter(ctx, local_, local_ranks_, cross_ranks_, cross_worker_, h_.chunk_bytes,
                                     h_.by_host, in, out, counts, dtype, op);
    note_chosen_algorithm("hierarchical");  // after: the local stages name their own
  }
  void all_to_all(const CallContext& ctx, const void* in, const std::vector<size_t>& send_bytes,
                  const std::vector<size_t>& send_offsets, void* out, const std::vector<size_t>& recv_bytes,
                  const std::vector<size_t>& recv_offsets) override {
    shm::hierarchical_all_to_all(ctx, local_, local_ranks_, cross_worker_, h_.by_host, in, send_bytes,
                                 send_offsets, out, recv_bytes, recv_offsets);
    note_chosen_algorithm("hierarchical");  // after: the local stages name their own
  }
  void reduce(const CallContext& ctx, void* data, size_t count, DType dtype, const ReduceOp& op,
              int root) override {
    tcp_domain().reduce(ctx, data, count, dtype, op, root);
  }
  void gather(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& bytes,
              int root) override {
    tcp_domain().gather(ctx, in, out, bytes, root);
  }
  void scatter(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& bytes,
               int root) override {
    tcp_domain().scatter(ctx, in, out, bytes, root);
  }
  void barrier(const CallContext& ctx) override { tcp_domain().barrier(ctx); }

 private:
  Hierarchy h_;
  transport::shm::ShmGroup& local_;
  transport::Transport& local_ranks_;
  transport::Transport& cross_ranks_;
  // Runs the TCP stage of the pipelines. Its thread ends (with the domain)
  // before the links it uses close.
  tdist::detail::WorkerThread cross_worker_;
};

}  // namespace

std::unique_ptr<CollectiveDomain> make_hierarchical_domain(const Hierarchy& hierarchy) {
  return std::make_unique<HierarchicalDomain>(hierarchy);
}

}  // namespace tdist::algorithms
