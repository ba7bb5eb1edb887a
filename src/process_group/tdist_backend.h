#pragma once

// tdist's own backend: a TCP transport plus, when every rank shares this
// host, a shared-memory domain; collectives run the algorithms of
// src/algorithms (shm/ ones on shared memory), in call order, on one worker
// thread per group so that async_op=true returns at once. A blocking call
// with nothing queued before it runs on the caller's thread instead (see
// blocking_call.h). Point-to-point operations go straight to the transport.
// Every argument is checked on the caller's thread first.

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "algorithms/algorithms.h"
#include "tdist/process_group.h"
#include "transport/shm/shm_group.h"
#include "transport/transport.h"
#include "transport_choice.h"

namespace tdist {

class ProcessGroupTdist final : public ProcessGroup {
 public:
  ProcessGroupTdist(const std::shared_ptr<Store>& store, int rank, int size,
                    const ProcessGroupOptions& options);
  ~ProcessGroupTdist() override;

  std::string backend_name() const override { return "tdist"; }
  /// True if the collectives run on shared memory (every rank on this host).
  bool collectives_on_shared_memory() const { return shm_ != nullptr; }
  /// True if all_reduce runs hierarchically (shared memory inside hosts, TCP across).
  bool hierarchical() const { return domains_.local != nullptr; }

  WorkPtr broadcast(const Tensor& tensor, int root) override;
  WorkPtr all_reduce(const Tensor& tensor, const ReduceOp& op) override;
  WorkPtr reduce(const Tensor& tensor, int root, const ReduceOp& op) override;
  WorkPtr all_gather(const std::vector<Tensor>& outputs, const Tensor& input) override;
  WorkPtr all_gather_into_tensor(const Tensor& output, const Tensor& input) override;
  WorkPtr all_gather_into_tensor_uneven(const Tensor& output, const Tensor& input,
                                        const std::vector<int64_t>& output_split_sizes) override;
  WorkPtr gather(const std::vector<Tensor>& outputs, const Tensor& input, int root) override;
  WorkPtr scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root) override;
  WorkPtr reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                         const ReduceOp& op) override;
  WorkPtr reduce_scatter_tensor(const Tensor& output, const Tensor& input, const ReduceOp& op) override;
  WorkPtr reduce_scatter_tensor_uneven(const Tensor& output, const Tensor& input,
                                       const std::vector<int64_t>& input_split_sizes,
                                       const ReduceOp& op) override;
  WorkPtr all_to_all(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs) override;
  WorkPtr all_to_all_single(const Tensor& output, const Tensor& input,
                            const std::vector<int64_t>& output_split_sizes,
                            const std::vector<int64_t>& input_split_sizes) override;
  WorkPtr barrier() override;
  WorkPtr send(const Tensor& tensor, int dst, int tag) override;
  WorkPtr recv(const Tensor& tensor, int src, int tag) override;

 private:
  using Body = std::function<void(const algorithms::CallContext&)>;
  struct Task {
    std::string op;
    uint64_t seq;
    WorkPtr work;
    Body body;
  };
  /// Queues a collective; its sequence number is taken now, in call order.
  WorkPtr enqueue(std::string op, std::vector<Tensor> outputs, Body body);
  WorkPtr gather_blocks(const char* op, std::vector<Tensor> outputs, const Tensor& input,
                        std::vector<size_t> bytes, int root);
  void run();
  /// Runs one task and finishes its work.
  void execute(Task& task);
  /// The shared-memory domain, unless absent or TDIST_ALGO_<OP> forces one
  /// of the TCP algorithms for this op.
  template <typename Algo>
  transport::shm::ShmGroup* shm_for() const;
  // The bodies shared by several ops, on shared memory or TCP.
  void all_gather_bytes(const algorithms::CallContext& ctx, const void* in, void* out,
                        const std::vector<size_t>& bytes) const;
  void reduce_scatter_elements(const algorithms::CallContext& ctx, const void* in, const Tensor& output,
                               const std::vector<size_t>& counts, const ReduceOp& op) const;
  void all_to_all_bytes(const algorithms::CallContext& ctx, const void* in,
                        const std::vector<size_t>& send_bytes, void* out,
                        const std::vector<size_t>& recv_bytes) const;

  std::unique_ptr<transport::Transport> transport_;
  // Destroyed before transport_, which the subset transports point into.
  CollectiveDomains domains_;
  transport::shm::ShmGroup* shm_ = nullptr;  // domains_.shm: every rank on this host
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  uint64_t next_seq_ = 0;
  bool stopping_ = false;
  bool running_ = false;  // a task is running (on the worker or a caller)
  std::thread worker_;
};

}  // namespace tdist
