// The TCP domain: the algorithms of algorithms.h over the call's transport,
// each choosing its algorithm per call (tuning/tcp_model.h).

#include <cstring>

#include "algorithms/collective_domain.h"
#include "common/scratch.h"

namespace tdist::algorithms {
namespace {

class TcpDomain final : public CollectiveDomain {
 public:
  const char* name() const override { return "tcp"; }
  void all_reduce(const CallContext& ctx, void* data, size_t count, DType dtype,
                  const ReduceOp& op) override {
    algorithms::all_reduce(ctx, data, count, dtype, op);
  }
  void broadcast(const CallContext& ctx, void* data, size_t nbytes, int root) override {
    algorithms::broadcast(ctx, data, nbytes, root);
  }
  void reduce(const CallContext& ctx, void* data, size_t count, DType dtype, const ReduceOp& op,
              int root) override {
    if (ctx.rank() == root) return algorithms::reduce(ctx, data, count, dtype, op, root);
    // The message-passing reduce uses its buffer as scratch: a non-root
    // rank keeps its input intact by lending it a (recycled) copy.
    const size_t nbytes = count * element_size(dtype);
    tdist::detail::Scratch copy(nbytes);
    if (nbytes > 0) std::memcpy(copy.get(), data, nbytes);
    algorithms::reduce(ctx, copy.get(), count, dtype, op, root);
  }
  void all_gather(const CallContext& ctx, const void* in, void* out,
                  const std::vector<size_t>& bytes) override {
    algorithms::all_gather(ctx, in, out, bytes);
  }
  void gather(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& bytes,
              int root) override {
    algorithms::gather(ctx, in, out, bytes, root);
  }
  void scatter(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& bytes,
               int root) override {
    algorithms::scatter(ctx, in, out, bytes, root);
  }
  void reduce_scatter(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& counts,
                      DType dtype, const ReduceOp& op) override {
    algorithms::reduce_scatter(ctx, in, out, counts, dtype, op);
  }
  void all_to_all(const CallContext& ctx, const void* in, const std::vector<size_t>& send_bytes,
                  const std::vector<size_t>& send_offsets, void* out, const std::vector<size_t>& recv_bytes,
                  const std::vector<size_t>& recv_offsets) override {
    algorithms::all_to_all(ctx, in, send_bytes, send_offsets, out, recv_bytes, recv_offsets);
  }
  void barrier(const CallContext& ctx) override { algorithms::barrier(ctx); }
};

}  // namespace

CollectiveDomain& tcp_domain() {
  static TcpDomain domain;
  return domain;
}

}  // namespace tdist::algorithms
