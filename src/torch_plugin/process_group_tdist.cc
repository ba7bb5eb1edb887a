#include "process_group_tdist.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>

#include "c10d_store_adapter.h"
#include "conversions.h"
#include "work_tdist.h"

namespace tdist::torch_plugin {
namespace {

using WorkHandle = c10::intrusive_ptr<c10d::Work>;

// A root rank from c10d's int64 options, checked before narrowing to int.
int root_rank(int64_t root, int size, const char* op, const char* what) {
  check_group_rank(root, size, op, what);
  return static_cast<int>(root);
}

void check_root_tensor(int64_t root_tensor, const char* op) {
  if (root_tensor != 0) {
    fail(std::string(op) + ": root tensor " + std::to_string(root_tensor) +
         " requested; the tdist backend takes one tensor per process");
  }
}

void check_same_dtype(const std::vector<at::Tensor>& tensors, const char* op, const char* what) {
  for (const auto& t : tensors) {
    if (t.scalar_type() != tensors[0].scalar_type()) {
      fail(std::string(op) + ": every tensor of " + what + " must have one dtype; found " +
           c10::toString(tensors[0].scalar_type()) + " and " + c10::toString(t.scalar_type()));
    }
  }
}

// One flat tensor holding the tensors' elements back to back, for the
// coalesced variants, which run as one tdist operation.
at::Tensor flatten_copy(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  at::Tensor flat = at::empty({total}, tensors[0].options());
  int64_t offset = 0;
  for (const auto& t : tensors) {
    flat.narrow(0, offset, t.numel()).copy_(t.reshape({-1}));
    offset += t.numel();
  }
  return flat;
}

// The inverse: copies consecutive pieces of `flat`, from `offset` on, back
// into `tensors`.
void unflatten_into(const at::Tensor& flat, int64_t offset, const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) {
    t.view({-1}).copy_(flat.narrow(0, offset, t.numel()));
    offset += t.numel();
  }
}

// The host of the TCPStore behind `store` (through any PrefixStores), or
// empty: torch hands backends its store wrapped in one PrefixStore per group.
std::string tcp_store_host(c10::intrusive_ptr<c10d::Store> store) {
  for (int depth = 0; store && depth < 16; ++depth) {
    if (auto* tcp = dynamic_cast<c10d::TCPStore*>(store.get())) return tcp->getHost();
    auto* prefix = dynamic_cast<c10d::PrefixStore*>(store.get());
    if (!prefix) break;
    store = prefix->getUnderlyingStore();
  }
  return {};
}

}  // namespace

ProcessGroupTdist::ProcessGroupTdist(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                     std::chrono::milliseconds timeout, std::vector<int64_t> global_ranks,
                                     std::string group_name)
    : c10d::ProcessGroup(rank, size),
      timeout_(timeout),
      group_name_(std::move(group_name)),
      send_seq_(new std::atomic<uint32_t>[static_cast<size_t>(size > 0 ? size : 1)]()) {
  ProcessGroupOptions options;
  options.timeout = timeout;
  if (!global_ranks.empty()) {
    if (global_ranks.size() != static_cast<size_t>(size)) {
      fail("tdist: ProcessGroupTdist: " + std::to_string(global_ranks.size()) +
           " global ranks given for a group of " + std::to_string(size));
    }
    options.global_ranks.assign(global_ranks.begin(), global_ranks.end());
  }
  // The transport advertises the local address that reaches the store's
  // host (env://, tcp:// and TCPStore: that host; MASTER_ADDR otherwise, as
  // for file://; loopback when neither is known).
  options.master_host = tcp_store_host(store);
  if (options.master_host.empty()) {
    // NOLINTNEXTLINE(concurrency-mt-unsafe): tdist never calls setenv
    if (const char* host = std::getenv("MASTER_ADDR")) options.master_host = host;
  }
  pg_ = translate_errors([&] {
    auto adapter = std::make_shared<C10dStoreAdapter>(store);
    return create_process_group("tdist", adapter, rank, size, options);
  });
  init();
}

ProcessGroupTdist::~ProcessGroupTdist() = default;

c10::intrusive_ptr<WorkTdist> ProcessGroupTdist::make_work(c10d::OpType type, const char* op,
                                                           std::vector<at::Tensor> outputs,
                                                           std::vector<at::Tensor> keep_alive) {
  return c10::make_intrusive<WorkTdist>(getRank(), type, op, std::move(outputs), std::move(keep_alive));
}

WorkHandle ProcessGroupTdist::broadcast(std::vector<at::Tensor>& tensors,
                                        const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  return translate_errors([&]() -> WorkHandle {
    const at::Tensor& t = single_entry(tensors, op, "tensor");
    check_root_tensor(opts.rootTensor, op);
    int root = root_rank(opts.rootRank, getSize(), op, "src");
    auto work = make_work(c10d::OpType::BROADCAST, op, {t}, {});
    complete_when_done(work, {pg_->broadcast(to_tdist(t, op, "tensor"), root)});
    return work;
  });
}

WorkHandle ProcessGroupTdist::allreduce(std::vector<at::Tensor>& tensors,
                                        const c10d::AllreduceOptions& opts) {
  const char* op = "all_reduce";
  return translate_errors([&]() -> WorkHandle {
    const at::Tensor& t = single_entry(tensors, op, "tensor");
    auto work = make_work(c10d::OpType::ALLREDUCE, op, {t}, {});
    complete_when_done(work, {pg_->all_reduce(to_tdist(t, op, "tensor"), to_tdist_op(opts.reduceOp, op))});
    return work;
  });
}

WorkHandle ProcessGroupTdist::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "all_reduce_coalesced";
  return translate_errors([&]() -> WorkHandle {
    to_tdist(tensors, op, "tensors");  // checks device, layout, contiguity, dtype
    check_same_dtype(tensors, op, "tensors");
    auto work = make_work(c10d::OpType::ALLREDUCE_COALESCED, op, tensors, {});
    if (tensors.empty()) {
      complete_when_done(work, {});
      return work;
    }
    at::Tensor flat = flatten_copy(tensors);
    auto part = pg_->all_reduce(to_tdist(flat, op, "tensors"), to_tdist_op(opts.reduceOp, op));
    complete_when_done(work, {part}, [tensors, flat] { unflatten_into(flat, 0, tensors); });
    return work;
  });
}

WorkHandle ProcessGroupTdist::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  return translate_errors([&]() -> WorkHandle {
    const at::Tensor& t = single_entry(tensors, op, "tensor");
    check_root_tensor(opts.rootTensor, op);
    int root = root_rank(opts.rootRank, getSize(), op, "dst");
    auto work = make_work(c10d::OpType::REDUCE, op, {t}, {});
    complete_when_done(work, {pg_->reduce(to_tdist(t, op, "tensor"), root, to_tdist_op(opts.reduceOp, op))});
    return work;
  });
}

WorkHandle ProcessGroupTdist::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  const char* op = "all_gather";
  return translate_errors([&]() -> WorkHandle {
    const at::Tensor& input = single_entry(inputs, op, "tensor");
    std::vector<at::Tensor>& list = single_entry(outputs, op, "tensor_list");
    auto work = make_work(c10d::OpType::ALLGATHER, op, list, {input});
    complete_when_done(
        work, {pg_->all_gather(to_tdist(list, op, "tensor_list entry"), to_tdist(input, op, "tensor"))});
    return work;
  });
}

WorkHandle ProcessGroupTdist::_allgather_base(at::Tensor& output, at::Tensor& input,
                                              const c10d::AllgatherOptions&) {
  const char* op = "all_gather_into_tensor";
  return translate_errors([&]() -> WorkHandle {
    auto work = make_work(c10d::OpType::_ALLGATHER_BASE, op, {output}, {input});
    complete_when_done(work, {pg_->all_gather_into_tensor(to_tdist(output, op, "output_tensor"),
                                                          to_tdist(input, op, "input_tensor"))});
    return work;
  });
}

WorkHandle ProcessGroupTdist::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::AllgatherOptions&) {
  const char* op = "all_gather_coalesced";
  return translate_errors([&]() -> WorkHandle {
    to_tdist(inputs, op, "input_tensor_list entry");
    check_same_dtype(inputs, op, "input_tensor_list");
    if (outputs.size() != static_cast<size_t>(getSize())) {
      fail(std::string(op) + ": output_tensor_lists has " + std::to_string(outputs.size()) +
           " lists but the group has " + std::to_string(getSize()) + " ranks");
    }
    std::vector<at::Tensor> all_outputs;
    for (size_t r = 0; r < outputs.size(); ++r) {
      to_tdist(outputs[r], op, "output_tensor_lists entry");
      if (outputs[r].size() != inputs.size()) {
        fail(std::string(op) + ": output_tensor_lists[" + std::to_string(r) + "] has " +
             std::to_string(outputs[r].size()) + " tensors but input_tensor_list has " +
             std::to_string(inputs.size()));
      }
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (outputs[r][i].numel() != inputs[i].numel() ||
            outputs[r][i].scalar_type() != inputs[i].scalar_type()) {
          fail(std::string(op) + ": output_tensor_lists[" + std::to_string(r) + "][" + std::to_string(i) +
               "] is " + c10::toString(outputs[r][i].scalar_type()) + " with " +
               std::to_string(outputs[r][i].numel()) + " elements but input_tensor_list[" +
               std::to_string(i) + "] is " + c10::toString(inputs[i].scalar_type()) + " with " +
               std::to_string(inputs[i].numel()));
        }
      }
      all_outputs.insert(all_outputs.end(), outputs[r].begin(), outputs[r].end());
    }
    auto work = make_work(c10d::OpType::ALLGATHER_COALESCED, op, all_outputs, inputs);
    if (inputs.empty()) {
      complete_when_done(work, {});
      return work;
    }
    at::Tensor flat_in = flatten_copy(inputs);
    at::Tensor flat_out = at::empty({flat_in.numel() * getSize()}, flat_in.options());
    auto part = pg_->all_gather_into_tensor(to_tdist(flat_out, op, "output"), to_tdist(flat_in, op, "input"));
    complete_when_done(work, {part}, [outputs, flat_in, flat_out] {
      for (size_t r = 0; r < outputs.size(); ++r) {
        unflatten_into(flat_out, static_cast<int64_t>(r) * flat_in.numel(), outputs[r]);
      }
    });
    return work;
  });
}

WorkHandle ProcessGroupTdist::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                     std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  const char* op = "gather";
  return translate_errors([&]() -> WorkHandle {
    const at::Tensor& input = single_entry(inputs, op, "tensor");
    int root = root_rank(opts.rootRank, getSize(), op, "dst");
    std::vector<at::Tensor> list;
    if (!outputs.empty()) list = single_entry(outputs, op, "gather_list");
    auto work = make_work(c10d::OpType::GATHER, op, list, {input});
    complete_when_done(
        work, {pg_->gather(to_tdist(list, op, "gather_list entry"), to_tdist(input, op, "tensor"), root)});
    return work;
  });
}

WorkHandle ProcessGroupTdist::scatter(std::vector<at::Tensor>& outputs,
                                      std::vector<std::vector<at::Tensor>>& inputs,
                                      const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  return translate_errors([&]() -> WorkHandle {
    const at::Tensor& output = single_entry(outputs, op, "tensor");
    int root = root_rank(opts.rootRank, getSize(), op, "src");
    std::vector<at::Tensor> list;
    if (!inputs.empty()) list = single_entry(inputs, op, "scatter_list");
    auto work = make_work(c10d::OpType::SCATTER, op, {output}, list);
    complete_when_done(
        work, {pg_->scatter(to_tdist(output, op, "tensor"), to_tdist(list, op, "scatter_list entry"), root)});
    return work;
  });
}

WorkHandle ProcessGroupTdist::reduce_scatter(std::vector<at::Tensor>& outputs,
                                             std::vector<std::vector<at::Tensor>>& inputs,
                                             const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  return translate_errors([&]() -> WorkHandle {
    const at::Tensor& output = single_entry(outputs, op, "output");
    std::vector<at::Tensor>& list = single_entry(inputs, op, "input_list");
    auto work = make_work(c10d::OpType::REDUCE_SCATTER, op, {output}, list);
    complete_when_done(
        work, {pg_->reduce_scatter(to_tdist(output, op, "output"), to_tdist(list, op, "input_list entry"),
                                   to_tdist_op(opts.reduceOp, op))});
    return work;
  });
}

WorkHandle ProcessGroupTdist::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                   const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor";
  return translate_errors([&]() -> WorkHandle {
    auto work = make_work(c10d::OpType::_REDUCE_SCATTER_BASE, op, {output}, {input});
    complete_when_done(
        work, {pg_->reduce_scatter_tensor(to_tdist(output, op, "output"), to_tdist(input, op, "input"),
                                          to_tdist_op(opts.reduceOp, op))});
    return work;
  });
}

WorkHandle ProcessGroupTdist::alltoall_base(at::Tensor& output, at::Tensor& input,
                                            std::vector<int64_t>& output_split_sizes,
                                            std::vector<int64_t>& input_split_sizes,
                                            const c10d::AllToAllOptions&) {
  const char* op = "all_to_all_single";
  return translate_errors([&]() -> WorkHandle {
    auto work = make_work(c10d::OpType::ALLTOALL_BASE, op, {output}, {input});
    complete_when_done(work,
                       {pg_->all_to_all_single(to_tdist(output, op, "output"), to_tdist(input, op, "input"),
                                               output_split_sizes, input_split_sizes)});
    return work;
  });
}

WorkHandle ProcessGroupTdist::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                       const c10d::AllToAllOptions&) {
  const char* op = "all_to_all";
  return translate_errors([&]() -> WorkHandle {
    auto work = make_work(c10d::OpType::ALLTOALL, op, outputs, inputs);
    complete_when_done(work, {pg_->all_to_all(to_tdist(outputs, op, "output_tensor_list entry"),
                                              to_tdist(inputs, op, "input_tensor_list entry"))});
    return work;
  });
}

WorkHandle ProcessGroupTdist::barrier(const c10d::BarrierOptions&) {
  const char* op = "barrier";
  return translate_errors([&]() -> WorkHandle {
    auto work = make_work(c10d::OpType::BARRIER, op, {}, {});
    complete_when_done(work, {pg_->barrier()});
    return work;
  });
}

}  // namespace tdist::torch_plugin
