#pragma once

// WorkTdist: the c10d::Work that torch.distributed hands back (async_op=True)
// for an operation running on tdist. It completes when the tdist work items
// behind it have finished and any copy-back step ("finalize") has run; then
// its future (Work.get_future()) completes with the output tensors, which is
// what DistributedDataParallel's communication hooks wait on.
//
// Header-only: torch's headers make each translation unit cost ~10 s to
// compile, so the plugin keeps to four (module.cc, process_group_tdist.cc,
// p2p.cc, issue_and_check.cc) and these small functions are compiled where
// they are used.

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <ATen/record_function.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tdist/process_group.h"
#include "tdist/work.h"

#include "completion_pool.h"
#include "conversions.h"

namespace tdist::torch_plugin {

class WorkTdist final : public c10d::Work {
 public:
  /// `op` names the torch.distributed function in messages ("all_reduce");
  /// `outputs` are the result() and future value; `keep_alive` holds tensors
  /// whose memory tdist reads or writes until the operation completes.
  /// Records the profiler event "tdist:<title>" (`title` defaults to `op`)
  /// until completion, with the shapes of `profiled` (c10d::Work marks it
  /// async: it ends on another thread).
  WorkTdist(int rank, c10d::OpType type, std::string op, std::vector<at::Tensor> outputs,
            std::vector<at::Tensor> keep_alive, const std::vector<at::Tensor>& profiled = {},
            const char* title = nullptr);

  /// Waits for completion (forever for a zero timeout, as c10d's kNoTimeout)
  /// and rethrows the operation's error. Raises c10::Error naming the op if the
  /// timeout passes first; the operation itself keeps running.
  bool wait(std::chrono::milliseconds timeout) override;
  /// The state as of the future: complete() sets the future before the work
  /// (see there), and a caller whose future.wait() has returned must find the
  /// work completed too.
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  int sourceRank() const override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  /// Aborts the tdist group the operation runs on, as NCCL's Work.abort
  /// aborts its communicator: this and every pending operation of the group
  /// fail on every reachable rank, and later calls raise until
  /// reinit_process_group (docs/fault-tolerance.md). Does nothing once the
  /// group is gone.
  void abort() override;
  /// The group abort() aborts (set by the process group that made the work).
  void set_group(std::weak_ptr<tdist::ProcessGroup> group) { group_ = std::move(group); }

  /// Completes the future, with `error` (translated for torch) or the
  /// outputs, then the work. `source_rank` is the sender of a receive.
  void complete(std::exception_ptr error, int source_rank = -1);
  /// Lets wait() move `part`, a tdist point-to-point work this one waits
  /// for, along on the waiting thread (tdist::Future::set_progress) instead
  /// of sleeping until the transport's thread has read the message.
  void drive_through(WorkPtr part);

  const std::string& op() const { return op_; }

 private:
  const std::string op_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_alive_;  // guarded by mutex_; dropped on completion
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::mutex future_mutex_;        // orders getFuture() against completion
  bool future_requested_ = false;  // guarded by future_mutex_
  std::atomic<int> source_rank_{-1};
  std::weak_ptr<tdist::ProcessGroup> group_;  // set once, before the work is handed out
  std::mutex parts_mutex_;
  std::vector<WorkPtr> parts_;  // guarded by parts_mutex_; dropped on completion
  void drive_parts(std::chrono::steady_clock::time_point deadline);
};

/// Completes `work` once every tdist work item in `parts` has finished: with
/// the first error, else after `finalize` (may be empty) ran successfully.
/// Runs on the thread that finishes the last part.
inline void complete_when_done(const c10::intrusive_ptr<WorkTdist>& work, const std::vector<WorkPtr>& parts,
                               std::function<void()> finalize = {});

// ---- Definitions (inline: see the file comment) ----

inline WorkTdist::WorkTdist(int rank, c10d::OpType type, std::string op, std::vector<at::Tensor> outputs,
                            std::vector<at::Tensor> keep_alive, const std::vector<at::Tensor>& profiled,
                            const char* title)
    // Name and tensors only if anyone may record the event: building them
    // costs on every call otherwise.
    : c10d::Work(
          rank, type,
          at::hasCallbacks() ? ("tdist:" + (title != nullptr ? std::string(title) : op)).c_str() : nullptr,
          at::hasCallbacks() ? c10::optional<std::vector<at::Tensor>>(profiled) : c10::nullopt),
      op_(std::move(op)),
      outputs_(std::move(outputs)),
      keep_alive_(std::move(keep_alive)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

inline bool WorkTdist::wait(std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = timeout == kNoTimeout ? Clock::time_point::max() : Clock::now() + timeout;
  drive_parts(deadline);
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_until(lock, deadline, [&] { return completed_; })) {
    fail("tdist: " + op_ + ": Work.wait timed out after " + std::to_string(timeout.count()) +
         " ms; the operation is still running (its own deadline is the process group's timeout)");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

inline void WorkTdist::drive_through(WorkPtr part) {
  std::lock_guard<std::mutex> lock(parts_mutex_);
  parts_.push_back(std::move(part));
}

inline void WorkTdist::drive_parts(std::chrono::steady_clock::time_point deadline) {
  using Clock = std::chrono::steady_clock;
  for (;;) {
    WorkPtr part;
    {
      std::lock_guard<std::mutex> lock(parts_mutex_);
      for (const auto& p : parts_) {
        if (!p->is_completed()) {
          part = p;
          break;
        }
      }
    }
    if (!part) return;
    // A receive's second part (the payload) is added by the first part's
    // callback, which runs on this thread once it has read the header.
    auto left = std::chrono::milliseconds::max();
    if (deadline != Clock::time_point::max()) {
      const auto now = Clock::now();
      if (now >= deadline) return;
      left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
    }
    try {
      part->get_future()->wait_for(left, op_);
    } catch (...) {
      // The part's error reaches this work through its callback; and a thread
      // that must not wait here (tdist's own) waits on completed_ as before.
      return;
    }
  }
}

inline bool WorkTdist::isCompleted() {
  return future_->completed() || c10d::Work::isCompleted();
}

inline bool WorkTdist::isSuccess() const {
  if (future_->completed()) return !future_->hasError();
  return c10d::Work::isSuccess();
}

inline std::exception_ptr WorkTdist::exception() const {
  if (future_->completed() && future_->hasError()) return future_->exception_ptr();
  return c10d::Work::exception();
}

inline std::vector<at::Tensor> WorkTdist::result() {
  return outputs_;
}

inline int WorkTdist::sourceRank() const {
  int source = source_rank_.load();
  if (source < 0) {
    fail("tdist: " + op_ + ": the source rank is known only for a completed receive from any source");
  }
  return source;
}

inline c10::intrusive_ptr<c10::ivalue::Future> WorkTdist::getFuture() {
  std::lock_guard<std::mutex> lock(future_mutex_);
  future_requested_ = true;
  return future_;
}

inline void WorkTdist::abort() {
  if (auto group = group_.lock()) group->abort("Work.abort() was called on its " + op_);
}

inline void WorkTdist::complete(std::exception_ptr error, int source_rank) {
  error = to_torch_error(error);
  if (!error && source_rank >= 0) source_rank_.store(source_rank);
  std::vector<at::Tensor> released;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    released.swap(keep_alive_);
  }
  std::vector<WorkPtr> parts;
  {
    std::lock_guard<std::mutex> lock(parts_mutex_);
    parts.swap(parts_);
  }
  // As with gloo, the future completes (and its callbacks run) before
  // Work.wait() returns, so wait() then get_future().value() is safe.
  // Callbacks may wait for further collectives, which need this thread, so
  // a future someone has asked for completes on a pool thread
  // (completion_pool.h). One nobody has asked for yet (a blocking call, a
  // plain wait) has no callbacks and completes here, saving the hand-off;
  // future_mutex_ keeps getFuture() from slipping in between.
  auto complete_future = [error](const c10::intrusive_ptr<c10::ivalue::Future>& future,
                                 const std::vector<at::Tensor>& outputs) {
    if (error) {
      future->setError(error);
    } else {
      future->markCompleted(c10::IValue(outputs));
    }
  };
  {
    std::lock_guard<std::mutex> lock(future_mutex_);
    if (!future_requested_) {
      complete_future(future_, outputs_);
      future_requested_ = true;  // completed: later callers get it as it is
      finish(error);
      return;
    }
  }
  c10::intrusive_ptr<WorkTdist> self = c10::intrusive_ptr<WorkTdist>::unsafe_reclaim_from_nonowning(this);
  CompletionPool::instance().post([self, error, complete_future] {
    complete_future(self->future_, self->outputs_);
    self->finish(error);
  });
}

inline void complete_when_done(const c10::intrusive_ptr<WorkTdist>& work, const std::vector<WorkPtr>& parts,
                               std::function<void()> finalize) {
  struct State {
    std::mutex mutex;
    size_t remaining;
    std::exception_ptr error;
    std::function<void()> finalize;
  };
  auto state = std::make_shared<State>();
  state->remaining = parts.size();
  state->finalize = std::move(finalize);
  auto finish_all = [work, state] {
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      error = state->error;
    }
    if (!error && state->finalize) {
      try {
        state->finalize();
      } catch (...) {
        error = std::current_exception();
      }
    }
    state->finalize = nullptr;  // drops the tensors it captured
    work->complete(error);
  };
  if (parts.empty()) {
    finish_all();
    return;
  }
  for (auto& part : parts) {
    part->get_future()->then([state, finish_all](Future& future) -> std::vector<Tensor> {
      bool last = false;
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (!state->error && future.error()) state->error = future.error();
        last = --state->remaining == 0;
      }
      if (last) finish_all();
      return {};
    });
  }
}

}  // namespace tdist::torch_plugin
