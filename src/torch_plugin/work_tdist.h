#pragma once

// WorkTdist: the c10d::Work that torch.distributed hands back (async_op=True)
// for an operation running on tdist. It completes when the tdist work items
// behind it have finished and any copy-back step ("finalize") has run; then
// its future (Work.get_future()) completes with the output tensors, which is
// what DistributedDataParallel's communication hooks wait on.

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "tdist/work.h"

namespace tdist::torch_plugin {

class WorkTdist final : public c10d::Work {
 public:
  /// `op` names the torch.distributed function in messages ("all_reduce");
  /// `outputs` are the result() and future value; `keep_alive` holds tensors
  /// whose memory tdist reads or writes until the operation completes.
  WorkTdist(int rank, c10d::OpType type, std::string op, std::vector<at::Tensor> outputs,
            std::vector<at::Tensor> keep_alive);

  /// Waits for completion (forever for a zero timeout, as c10d's kNoTimeout)
  /// and rethrows the operation's error. Raises c10::Error naming the op if the
  /// timeout passes first; the operation itself keeps running.
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override;
  int sourceRank() const override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  void abort() override;

  /// Completes the work: with `error` (translated for torch) or successfully,
  /// then completes the future. `source_rank` is the sender of a receive.
  void complete(std::exception_ptr error, int source_rank = -1);

  const std::string& op() const { return op_; }

 private:
  const std::string op_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_alive_;  // guarded by mutex_; dropped on completion
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<int> source_rank_{-1};
};

/// Completes `work` once every tdist work item in `parts` has finished: with
/// the first error, else after `finalize` (may be empty) ran successfully.
/// Runs on the thread that finishes the last part.
void complete_when_done(const c10::intrusive_ptr<WorkTdist>& work, std::vector<WorkPtr> parts,
                        std::function<void()> finalize = {});

}  // namespace tdist::torch_plugin
