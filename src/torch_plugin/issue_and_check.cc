// How ProcessGroupTdist issues its collectives: in call order through
// IssueOrder (issue_order.h), checked across ranks first under DETAIL
// (detail_check.h), and the sparse all_reduce, the one operation that issues
// in stages (sparse_all_reduce.h).

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <algorithm>
#include <exception>
#include <string>

#include "conversions.h"
#include "process_group_tdist.h"
#include "sparse_all_reduce.h"
#include "tdist/blocking_call.h"
#include "tdist/errors.h"
#include "work_tdist.h"

namespace tdist::torch_plugin {

void ProcessGroupTdist::launch(const c10::intrusive_ptr<WorkTdist>& work, bool caller_waits,
                               std::function<std::vector<WorkPtr>()> issue, std::function<void()> finalize) {
  // The caller's per-call timeout goes with the call when it is deferred
  // (and issued later, on the thread that completes the staged operation).
  auto start = [this, work, issue = std::move(issue), finalize = std::move(finalize),
                timeout = ScopedCallTimeout::current()] {
    const ScopedCallTimeout per_call(timeout);
    std::vector<WorkPtr> issued = issue();
    issued_ += issued.size();
    // A null work: the operation ran on this thread and is done.
    issued.erase(std::remove(issued.begin(), issued.end(), nullptr), issued.end());
    complete_when_done(work, issued, finalize);
  };
  bool deferred = order_->defer([&] {
    return IssueOrder::Pending{[work, start] {
                                 try {
                                   start();
                                 } catch (...) {
                                   work->complete(std::current_exception());
                                 }
                               },
                               [work](std::exception_ptr error) { work->complete(std::move(error)); }};
  });
  if (!deferred) {
    // torch's caller waits for this call at once (its asyncOp is false): the
    // first tdist operation it issues may then run on this thread, saving
    // the hand-offs to tdist's worker thread and back (tdist/blocking_call.h).
    // Never for a deferred call, which this thread does not wait for.
    const detail::BlockingCallScope blocking(static_cast<const ProcessGroup*>(pg_.get()), caller_waits);
    try {
      start();
    } catch (...) {
      // The error reaches the caller; the work fails with it too, for
      // whoever else holds it (endCoalescing's work waits for it).
      count_failed_issue();
      work->complete(std::current_exception());
      throw;
    }
  }
}

void ProcessGroupTdist::count_failed_issue() {
  // A call that failed on this thread took its sequence number (an error
  // before it ran took none); the group's count then covers every call
  // issued, as nothing was queued before one that ran here.
  uint64_t issued = issued_.load();
  const uint64_t started = pg_->sequence_number();
  while (started > issued && !issued_.compare_exchange_weak(issued, started)) {
  }
}

void ProcessGroupTdist::run_collective(const std::function<WorkPtr()>& issue) {
  auto done = std::make_shared<Future>();
  bool deferred = order_->defer([&] {
    return IssueOrder::Pending{[this, issue, done, timeout = ScopedCallTimeout::current()] {
                                 try {
                                   const ScopedCallTimeout per_call(timeout);
                                   WorkPtr work = issue();
                                   ++issued_;
                                   work->get_future()->then([done](Future& f) -> std::vector<Tensor> {
                                     if (f.error()) {
                                       done->set_error(f.error());
                                     } else {
                                       done->set_value({});
                                     }
                                     return {};
                                   });
                                 } catch (...) {
                                   done->set_error(std::current_exception());
                                 }
                               },
                               [done](std::exception_ptr error) { done->set_error(std::move(error)); }};
  });
  if (deferred) {
    done->wait();
    return;
  }
  // This thread waits at once: the operation may run on it (as launch()).
  WorkPtr work;
  try {
    const detail::BlockingCallScope blocking(static_cast<const ProcessGroup*>(pg_.get()), true);
    work = issue();
  } catch (...) {
    count_failed_issue();
    throw;
  }
  ++issued_;
  if (work) work->wait();  // null: done on this thread
}

void ProcessGroupTdist::check_call(const detail_check::Call& call) {
  namespace dc = detail_check;
  const int size = getSize();
  std::vector<int64_t> words = dc::encode(call);
  // First only each rank's length and hash: ranks that agree (the usual
  // case) need not send the descriptions.
  at::Tensor head =
      at::tensor(std::vector<int64_t>{static_cast<int64_t>(words.size()), dc::hash(words)}, at::kLong);
  at::Tensor heads = at::empty({size, 2}, at::kLong);
  const char* op = "DETAIL check";
  // The exchange's errors (a peer that never comes) name the user's call.
  auto exchange = [&](const std::function<WorkPtr()>& issue) {
    try {
      run_collective(issue);
    } catch (const std::exception& e) {
      fail(call.op + ": the DETAIL check before it (an all_gather of every rank's call) failed: " + e.what());
    }
  };
  exchange(
      [&] { return pg_->all_gather_into_tensor(to_tdist(heads, op, "heads"), to_tdist(head, op, "head")); });
  const int64_t* h = heads.data_ptr<int64_t>();
  bool alike = true;
  for (int64_t r = 1; r < size; ++r) alike = alike && h[2 * r] == h[0] && h[2 * r + 1] == h[1];
  std::vector<dc::Call> calls;
  if (alike) {
    calls.assign(static_cast<size_t>(size), call);
  } else {
    std::vector<int64_t> lengths;
    int64_t total = 0;
    for (int64_t r = 0; r < size; ++r) {
      lengths.push_back(h[2 * r]);
      total += h[2 * r];
    }
    at::Tensor mine = at::from_blob(words.data(), {static_cast<int64_t>(words.size())}, at::kLong);
    at::Tensor all = at::empty({total}, at::kLong);
    exchange([&] {
      return pg_->all_gather_into_tensor_uneven(to_tdist(all, op, "all"), to_tdist(mine, op, "mine"),
                                                lengths);
    });
    const int64_t* w = all.data_ptr<int64_t>();
    for (int r = 0; r < size; ++r) {
      try {
        calls.push_back(dc::Decoder(w, lengths[static_cast<size_t>(r)]).call());
      } catch (const std::exception& e) {
        fail(call.op + ": the DETAIL check cannot read the call description of rank " + rank_name(*pg_, r) +
             " (" + e.what() + "); do all ranks run the same version of tdist?");
      }
      w += lengths[static_cast<size_t>(r)];
    }
  }
  std::string report = dc::mismatch_report(calls, getRank(), [this](int r) { return rank_name(*pg_, r); });
  if (!report.empty()) fail(report);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTdist::sparse_allreduce(at::Tensor& tensor,
                                                                   const c10d::AllreduceOptions& opts) {
  const char* op = "all_reduce";
  if (opts.reduceOp.op_ != c10d::ReduceOp::SUM) {
    // gloo's words, which programs may match.
    fail(std::string(op) + ": unsupported reduction operation (allreduce of sparse tensors only works with " +
         "ReduceOp.SUM); got ReduceOp." + tdist::reduce_op_name(to_tdist_op(opts.reduceOp, op)));
  }
  if (!tensor.device().is_cpu()) {
    fail(std::string(op) + ": tensor is on device " + tensor.device().str() +
         "; the tdist backend handles CPU tensors only");
  }
  to_tdist_dtype(tensor.scalar_type(), op);
  if (tensor.dim() > sparse::kMaxDims) {
    fail(std::string(op) + ": sparse tensors of more than " + std::to_string(sparse::kMaxDims) +
         " dimensions are not supported (got " + std::to_string(tensor.dim()) + ")");
  }
  if (detail_) check_call({op, -1, {detail_check::one("tensor", tensor)}});
  auto comms = record_comms({op, tensor.numel(), tensor.numel(), tensor.scalar_type()});
  auto work = make_work(c10d::OpType::ALLREDUCE, op, {tensor}, {}, {tensor}, "sparse_all_reduce");
  at::Tensor input;
  {
    at::AutoDispatchBelowAutograd no_autograd;
    input = tensor.coalesce();  // as gloo: indices and values need it
  }
  at::Tensor meta = sparse::describe(input);
  at::Tensor metas = at::empty({getSize(), sparse::kMetaWords}, at::kLong);
  Tensor meta_t = to_tdist(meta, op, "description");
  Tensor metas_t = to_tdist(metas, op, "descriptions");
  // Stage one: every rank's description. The gathers of indices and values
  // are issued when it completes; calls made meanwhile wait behind them.
  auto first_stage = [this, work, tensor, input, meta, meta_t, metas_t, metas] {
    WorkPtr gathered = pg_->all_gather_into_tensor(metas_t, meta_t);
    ++issued_;
    order_->hold();
    std::shared_ptr<IssueOrder> order = order_;
    // `meta` is captured to keep the memory tdist reads alive until then.
    gathered->get_future()->then(
        [this, order, work, tensor, input, meta, metas](Future& done) -> std::vector<Tensor> {
          if (!order->resume([&] { sparse_second_stage(work, tensor, input, metas, done); })) {
            work->complete(std::make_exception_ptr(
                c10::Error(work->op() + ": the process group was destroyed during a sparse all_reduce")));
          }
          return {};
        });
  };
  bool deferred = order_->defer([&] {
    return IssueOrder::Pending{[work, first_stage] {
                                 try {
                                   first_stage();
                                 } catch (...) {
                                   work->complete(std::current_exception());
                                 }
                               },
                               [work](std::exception_ptr error) { work->complete(std::move(error)); }};
  });
  if (!deferred) first_stage();
  return work;
}

void ProcessGroupTdist::sparse_second_stage(const c10::intrusive_ptr<WorkTdist>& work,
                                            const at::Tensor& tensor, const at::Tensor& input,
                                            const at::Tensor& metas, Future& gathered) {
  const char* op = "all_reduce";
  try {
    if (gathered.error()) std::rethrow_exception(gathered.error());
    const int size = getSize();
    std::string bad = sparse::mismatch(metas, size, [this](int r) { return rank_name(*pg_, r); });
    if (!bad.empty()) fail(bad);  // every rank sees the same descriptions and raises
    std::vector<int64_t> counts;
    int64_t total = 0;
    for (int r = 0; r < size; ++r) {
      counts.push_back(sparse::read(metas, r).nnz);
      total += counts.back();
    }
    at::Tensor indices;
    at::Tensor values;
    {
      at::AutoDispatchBelowAutograd no_autograd;
      indices = input._indices().t().contiguous();  // one row per entry
      values = input._values().contiguous();
    }
    std::vector<int64_t> values_shape(values.sizes().begin(), values.sizes().end());
    values_shape[0] = total;
    at::Tensor all_indices = at::empty({total, input.sparse_dim()}, at::kLong);
    at::Tensor all_values = at::empty(values_shape, values.options());
    // Every rank decides alike (from the gathered descriptions) which
    // gathers move any data, so the ranks issue the same calls.
    std::vector<WorkPtr> issued;
    if (all_indices.numel() > 0) {
      issued.push_back(pg_->all_gather_into_tensor_uneven(to_tdist(all_indices, op, "indices"),
                                                          to_tdist(indices, op, "indices"), counts));
    }
    if (all_values.numel() > 0) {
      issued.push_back(pg_->all_gather_into_tensor_uneven(to_tdist(all_values, op, "values"),
                                                          to_tdist(values, op, "values"), counts));
    }
    issued_ += issued.size();
    std::vector<int64_t> sizes(input.sizes().begin(), input.sizes().end());
    complete_when_done(work, issued, [tensor, all_indices, all_values, sizes, indices, values] {
      at::AutoDispatchBelowAutograd no_autograd;
      tensor.copy_(sparse::sum(all_indices, all_values, sizes));
    });
  } catch (...) {
    work->complete(std::current_exception());
  }
}

}  // namespace tdist::torch_plugin
