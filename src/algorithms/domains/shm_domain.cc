// The shared-memory domain: every rank of the group on this host, the
// collectives of shm/shm_collectives.h in the group's shared memory.

#include "algorithms/collective_domain.h"
#include "algorithms/shm/shm_collectives.h"

namespace tdist::algorithms {
namespace {

class ShmDomain final : public CollectiveDomain {
 public:
  explicit ShmDomain(transport::shm::ShmGroup& group) : group_(group) {}
  const char* name() const override { return "shared memory"; }
  void all_reduce(const CallContext& ctx, void* data, size_t count, DType dtype,
                  const ReduceOp& op) override {
    shm::all_reduce(ctx, group_, data, count, dtype, op);
  }
  void broadcast(const CallContext& ctx, void* data, size_t nbytes, int root) override {
    shm::broadcast(ctx, group_, data, nbytes, root);
  }
  // Never writes a non-root rank's input.
  void reduce(const CallContext& ctx, void* data, size_t count, DType dtype, const ReduceOp& op,
              int root) override {
    shm::reduce(ctx, group_, data, count, dtype, op, root);
  }
  void all_gather(const CallContext& ctx, const void* in, void* out,
                  const std::vector<size_t>& bytes) override {
    shm::all_gather(ctx, group_, in, out, bytes);
  }
  void gather(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& bytes,
              int root) override {
    shm::gather(ctx, group_, in, out, bytes, root);
  }
  void scatter(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& bytes,
               int root) override {
    shm::scatter(ctx, group_, in, out, bytes, root);
  }
  void reduce_scatter(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& counts,
                      DType dtype, const ReduceOp& op) override {
    shm::reduce_scatter(ctx, group_, in, out, counts, dtype, op);
  }
  void all_to_all(const CallContext& ctx, const void* in, const std::vector<size_t>& send_bytes,
                  const std::vector<size_t>& send_offsets, void* out, const std::vector<size_t>& recv_bytes,
                  const std::vector<size_t>& recv_offsets) override {
    shm::all_to_all(ctx, group_, in, send_bytes, send_offsets, out, recv_bytes, recv_offsets);
  }
  void barrier(const CallContext& ctx) override { shm::barrier(ctx, group_); }
  bool all_gather_in_place(const CallContext& ctx, const void* in,
                           const std::vector<std::vector<OutputSegment>>& blocks) override {
    shm::all_gather_segments(ctx, group_, in, blocks);
    return true;
  }
  bool reduce_scatter_in_place(const CallContext& ctx, const std::vector<std::vector<InputSegment>>& blocks,
                               void* out, const std::vector<size_t>& counts, DType dtype,
                               const ReduceOp& op) override {
    shm::reduce_scatter_segments(ctx, group_, blocks, out, counts, dtype, op);
    return true;
  }

 private:
  transport::shm::ShmGroup& group_;
};

}  // namespace

std::unique_ptr<CollectiveDomain> make_shm_domain(transport::shm::ShmGroup& group) {
  return std::make_unique<ShmDomain>(group);
}

}  // namespace tdist::algorithms
