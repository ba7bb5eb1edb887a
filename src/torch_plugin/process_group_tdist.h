#pragma once

// ProcessGroupTdist: a c10d::Backend (what torch 2's ProcessGroup dispatches
// CPU tensors to) that runs every operation on a tdist process group. It rendezvouses
// through the c10d store torch gives it, maps each c10d call onto tdist's
// ProcessGroup (include/tdist/process_group.h) with the torch tensors' memory
// wrapped in place, and returns WorkTdist handles.
//
// Point-to-point messages describe themselves: each send is a small header
// (dtype, element count, sequence number) followed by the payload on a tag
// private to that message, so a receive can check what came, convert the
// dtype like Tensor.copy_ when the two sides differ, and name both sides when
// the sizes do not match, instead of failing on a byte count.
//
// Each call records one profiler event "tdist:<op>" (c10d::Work's
// constructor, with the input tensors for record_shapes, async) and torch's
// "record_param_comms" event with its arguments (profiling.h). Under
// TDIST_DEBUG=DETAIL every collective is first checked across ranks
// (detail_check.h).

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "detail_check.h"
#include "issue_order.h"
#include "profiling.h"
#include "tdist/process_group.h"

namespace tdist::torch_plugin {

class WorkTdist;

/// "R" in the default group; "R (global rank G)" in a subgroup, so a message
/// read in one rank's log can be matched to the others'.
inline std::string rank_name(const tdist::ProcessGroup& pg, int r) {
  const auto& global = pg.global_ranks();
  if (global.empty() || global[static_cast<size_t>(r)] == r) return std::to_string(r);
  return std::to_string(r) + " (global rank " + std::to_string(global[static_cast<size_t>(r)]) + ")";
}

/// Every collective opens a tdist::ScopedCallTimeout with its options'
/// `timeout` (torch's per-call timeout), so that the tdist calls it makes
/// are bounded by it; torch's kUnsetTimeout (-1 ms) leaves the group's.
class ProcessGroupTdist final : public c10d::Backend {
 public:
  /// Creates tdist's process group over `store` (blocking until every rank
  /// has joined or `timeout` passed). `global_ranks` are the members' ranks in
  /// the default group, in group-rank order (empty: 0..size-1).
  ProcessGroupTdist(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout, std::vector<int64_t> global_ranks = {},
                    std::string group_name = "");
  ~ProcessGroupTdist() override;
  /// torch's destroy_process_group() (torch >= 2.4) calls it: the tdist
  /// group's threads end and its connections close now, while Python still
  /// runs. Left to the destructor, which for a group a DDP model still holds
  /// runs as the interpreter finalizes, a tdist thread dropping a tensor
  /// would die taking the GIL and abort the process.
  void shutdown() override;

  const std::string getBackendName() const override { return "tdist"; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& group_name() const { return group_name_; }
  /// True if every collective is checked across ranks first (DETAIL).
  bool detail_checks() const { return detail_; }

  /// Nothing to agree on: like NCCL's, a tdist group numbers its collectives
  /// from 0 at creation, alike on every rank, so the number works without
  /// this call (torch makes it only for gloo and nccl groups).
  void setSequenceNumberForGroup() override {}
  /// How many collectives the group has started: tdist's own count
  /// (tdist::ProcessGroup::sequence_number()), the number its errors and
  /// flight recorder give each call.
  uint64_t getSequenceNumberForGroup() override { return pg_->sequence_number(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // torch_npu's additions: npu_extras.cc.
  /// Rank r contributes output_split_sizes[r] rows of `output`; empty: equal parts.
  c10::intrusive_ptr<c10d::Work> all_gather_into_tensor_uneven(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t> output_split_sizes);
  /// Rank r receives the reduction of input_split_sizes[r] rows; empty: equal parts.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_uneven(at::Tensor& output, at::Tensor& input,
                                                              std::vector<int64_t> input_split_sizes,
                                                              const c10d::ReduceOp& reduce_op);
  /// tdist::ProcessGroup::reinit, with the plugin's own counts following.
  void reinit(bool rebuild_link);
  /// tdist::ProcessGroup::comm_name.
  std::string comm_name() const;
  /// torch 2's ProcessGroup.abort(): aborts the tdist group, as NCCL's
  /// aborts its communicator (docs/fault-tolerance.md).
  void abort() override;

  // Point to point and the monitored barrier: p2p.cc.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  /// Rank 0 waits for every rank (up to opts.timeout, else the group's) and
  /// names the ranks that did not arrive: the first one, or all of them with
  /// `wait_all_ranks`. torch 1.13's monitored_barrier() function only lets
  /// gloo through; this is reached by calling group.monitored_barrier(...).
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  /// torch's _coalescing_manager(device=...): the operations issued until
  /// endCoalescing() run as they come, and endCoalescing() returns one work
  /// that completes when all of them have (with the first error).
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

 private:
  c10::intrusive_ptr<c10d::Work> receive(std::vector<at::Tensor>& tensors, int src_rank, int tag,
                                         const char* op, c10d::OpType type);
  /// `profiled`: the tensors the "tdist:<title or op>" profiler event shows.
  c10::intrusive_ptr<WorkTdist> make_work(c10d::OpType type, const char* op, std::vector<at::Tensor> outputs,
                                          std::vector<at::Tensor> keep_alive,
                                          const std::vector<at::Tensor>& profiled = {},
                                          const char* title = nullptr);
  /// Issues `work`'s tdist collectives (`issue` returns them) now, or in call
  /// order after a staged operation (issue_order.h), and completes `work`
  /// once they finish and `finalize` has run. `caller_waits`: torch waits
  /// for `work` at once (waits_at_once in process_group_tdist.cc), so the
  /// first collective may run on this thread.
  void launch(const c10::intrusive_ptr<WorkTdist>& work, bool caller_waits,
              std::function<std::vector<WorkPtr>()> issue, std::function<void()> finalize = {});
  /// After an issue that threw: issued_ catches up with a call that took its
  /// sequence number on this thread before it failed.
  void count_failed_issue();
  /// Issues one collective as launch() does and waits for it (DETAIL checks).
  void run_collective(const std::function<WorkPtr()>& issue);
  /// DETAIL: raises on every rank unless all ranks describe `call` alike.
  void check_call(const detail_check::Call& call);
  /// The record_param_comms event's arguments, for the scope of the result.
  ParamCommsRecord record_comms(const CommsArgs& args) const {
    // The description torch sets on the group after creating it (group_desc).
    return ParamCommsRecord(args, getRank(), getSize(), group_name_, getGroupDesc(), global_ranks_,
                            issued_.load());
  }
  c10::intrusive_ptr<c10d::Work> sparse_allreduce(at::Tensor& tensor, const c10d::AllreduceOptions& opts);
  /// Issues the gathers of indices and values once every rank's description
  /// (`metas`) has arrived; completes `work` with any error instead of
  /// throwing.
  void sparse_second_stage(const c10::intrusive_ptr<WorkTdist>& work, const at::Tensor& tensor,
                           const at::Tensor& input, const at::Tensor& metas, Future& gathered);

  Group pg_;
  std::chrono::milliseconds timeout_;
  std::string group_name_;
  std::vector<int64_t> global_ranks_;
  bool detail_ = false;
  // Collectives issued on pg_ (only the plugin issues there): the sequence
  // number the next one will carry.
  std::atomic<uint64_t> issued_{0};
  std::shared_ptr<IssueOrder> order_ = std::make_shared<IssueOrder>();
  // Between startCoalescing and endCoalescing: the works made meanwhile.
  std::mutex coalesce_mutex_;
  std::atomic<bool> coalescing_{false};  // read without the lock on every call
  std::vector<c10::intrusive_ptr<WorkTdist>> coalesced_;
  // Sequence number of the next message to each destination; it names the
  // payload's private tag.
  std::unique_ptr<std::atomic<uint32_t>[]> send_seq_;
};

}  // namespace tdist::torch_plugin
