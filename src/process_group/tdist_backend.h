#pragma once

// tdist's own backend: a transport (TCP for now) plus the algorithms of
// src/algorithms, run in call order on one worker thread per group so that
// async_op=true returns at once. Point-to-point operations go straight to
// the transport. Every argument is checked on the caller's thread first.

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "algorithms/algorithms.h"
#include "tdist/process_group.h"
#include "transport/transport.h"

namespace tdist {

class ProcessGroupTdist final : public ProcessGroup {
 public:
  ProcessGroupTdist(const std::shared_ptr<Store>& store, int rank, int size,
                    const ProcessGroupOptions& options);
  ~ProcessGroupTdist() override;

  std::string backend_name() const override { return "tdist"; }

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

  std::unique_ptr<transport::Transport> transport_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  uint64_t next_seq_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace tdist
