// The c10d::Backend of torch 2 (process_group_tdist.h): each of torch's
// ops converted to tdist's and issued on its group. About 600 lines: one
// short method per op of c10d::Backend, which a split would only scatter.

#include "process_group_tdist.h"

#include <Python.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cctype>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "c10d_store_adapter.h"
#include "conversions.h"
#include "tdist_c10d_store.h"
#include "work_tdist.h"

namespace tdist::torch_plugin {
namespace {

namespace dc = detail_check;
using WorkHandle = c10::intrusive_ptr<c10d::Work>;

std::vector<WorkPtr> parts(WorkPtr part) {
  return {std::move(part)};
}

// torch 2.7 and later say in each call's options whether the caller waits
// for the work at once (asyncOp false: torch.distributed's functions with
// async_op=False); older torch does not, and its calls run as asynchronous ones.
template <typename Options, typename = void>
struct HasAsyncOp : std::false_type {};
template <typename Options>
struct HasAsyncOp<Options, std::void_t<decltype(std::declval<Options>().asyncOp)>> : std::true_type {};

template <typename Options>
bool waits_at_once(const Options& opts) {
  if constexpr (HasAsyncOp<Options>::value) {
    return !opts.asyncOp;
  } else {
    return false;
  }
}

int64_t total_numel(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) total += t.defined() ? t.numel() : 0;
  return total;
}

std::vector<int64_t> numels(const std::vector<at::Tensor>& tensors) {
  std::vector<int64_t> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(t.defined() ? t.numel() : 0);
  return out;
}

// What torch's comm events record for a call without tensors: kByte.
at::ScalarType first_dtype(const std::vector<at::Tensor>& tensors) {
  return tensors.empty() || !tensors[0].defined() ? at::kByte : tensors[0].scalar_type();
}

// tdist's DETAIL checks: TDIST_DEBUG=DETAIL when the group is created.
// Under torch's own DETAIL level (TORCH_DISTRIBUTED_DEBUG, or
// torch.distributed.set_debug_level) torch 2 wraps the backend in its
// checking wrapper, as it wraps gloo's, and that wrapper does the checking.
bool detail_checks_requested() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): tdist never calls setenv
  const char* env = std::getenv("TDIST_DEBUG");
  if (env == nullptr) return false;
  std::string level(env);
  for (auto& c : level) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return level == "DETAIL";
}

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

// all_gather_coalesced: one output list per rank, each like the input list.
void check_coalesced_lists(const std::vector<std::vector<at::Tensor>>& outputs,
                           const std::vector<at::Tensor>& inputs, int size, const char* op) {
  to_tdist(inputs, op, "input_tensor_list entry");
  check_same_dtype(inputs, op, "input_tensor_list");
  if (outputs.size() != static_cast<size_t>(size)) {
    fail(std::string(op) + ": output_tensor_lists has " + std::to_string(outputs.size()) +
         " lists but the group has " + std::to_string(size) + " ranks");
  }
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
             std::to_string(outputs[r][i].numel()) + " elements but input_tensor_list[" + std::to_string(i) +
             "] is " + c10::toString(inputs[i].scalar_type()) + " with " + std::to_string(inputs[i].numel()));
      }
    }
  }
}

// The (output, input) pairs of a *_tensor_coalesced call, as tdist tensors.
std::vector<std::pair<Tensor, Tensor>> coalesced_pairs(const std::vector<at::Tensor>& outputs,
                                                       const std::vector<at::Tensor>& inputs,
                                                       const char* op) {
  if (outputs.size() != inputs.size()) {
    fail(std::string(op) + ": " + std::to_string(outputs.size()) + " outputs but " +
         std::to_string(inputs.size()) + " inputs");
  }
  std::vector<std::pair<Tensor, Tensor>> pairs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    pairs.emplace_back(to_tdist(outputs[i], op, "output"), to_tdist(inputs[i], op, "input"));
  }
  return pairs;
}

// The host of the TCPStore (torch's or tdist.torch's) behind `store`
// (through any PrefixStores), or empty: torch hands backends its store
// wrapped in one PrefixStore per group.
std::string tcp_store_host(c10::intrusive_ptr<c10d::Store> store) {
  for (int depth = 0; store && depth < 16; ++depth) {
    if (auto* tcp = dynamic_cast<c10d::TCPStore*>(store.get())) return tcp->getHost();
    if (auto* ours = dynamic_cast<TdistC10dStore*>(store.get())) return ours->host();
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
    : c10d::Backend(rank, size),
      timeout_(timeout),
      group_name_(std::move(group_name)),
      global_ranks_(global_ranks),
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
  // host (env://, tcp:// and either TCPStore: that host; MASTER_ADDR
  // otherwise, as for file://; loopback when neither is known).
  options.master_host = tcp_store_host(store);
  if (options.master_host.empty()) {
    // NOLINTNEXTLINE(concurrency-mt-unsafe): tdist never calls setenv
    if (const char* host = std::getenv("MASTER_ADDR")) options.master_host = host;
  }
  pg_ = translate_errors([&] {
    auto adapter = std::make_shared<C10dStoreAdapter>(store);
    return create_process_group("tdist", adapter, rank, size, options);
  });
  issued_ = pg_->sequence_number();
  detail_ = detail_checks_requested();
}

void ProcessGroupTdist::abort() {
  translate_errors([&] { pg_->abort("ProcessGroup.abort() was called"); });
}

void ProcessGroupTdist::shutdown() {
  order_->close(std::make_exception_ptr(
      c10::Error("tdist: the process group was shut down before the operation was issued")));
  // The tdist worker may need the GIL to drop the tensors of the operations
  // it finishes while this waits for it: released here if held.
  struct ReleasedGil {
    PyThreadState* saved = Py_IsInitialized() != 0 && PyGILState_Check() != 0 ? PyEval_SaveThread() : nullptr;
    ~ReleasedGil() {
      if (saved != nullptr) PyEval_RestoreThread(saved);
    }
  } released;
  pg_->shutdown();
}

ProcessGroupTdist::~ProcessGroupTdist() {
  // Calls deferred behind a staged operation never reach tdist now.
  order_->close(std::make_exception_ptr(
      c10::Error("tdist: the process group was destroyed before the operation was issued")));
}

c10::intrusive_ptr<WorkTdist> ProcessGroupTdist::make_work(c10d::OpType type, const char* op,
                                                           std::vector<at::Tensor> outputs,
                                                           std::vector<at::Tensor> keep_alive,
                                                           const std::vector<at::Tensor>& profiled,
                                                           const char* title) {
  auto work = c10::make_intrusive<WorkTdist>(getRank(), type, op, std::move(outputs), std::move(keep_alive),
                                             profiled, title);
  work->set_group(pg_);
  if (coalescing_.load(std::memory_order_acquire)) {  // only inside _coalescing_manager(device=...)
    std::lock_guard<std::mutex> lock(coalesce_mutex_);
    if (coalescing_.load(std::memory_order_relaxed)) coalesced_.push_back(work);
  }
  return work;
}

void ProcessGroupTdist::startCoalescing() {
  std::lock_guard<std::mutex> lock(coalesce_mutex_);
  TORCH_CHECK(!coalescing_.load(), "tdist: startCoalescing() was called again before endCoalescing()");
  coalesced_.clear();
  coalescing_.store(true, std::memory_order_release);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTdist::endCoalescing() {
  std::vector<c10::intrusive_ptr<WorkTdist>> parts;
  {
    std::lock_guard<std::mutex> lock(coalesce_mutex_);
    TORCH_CHECK(coalescing_.load(), "tdist: endCoalescing() without startCoalescing()");
    coalescing_.store(false, std::memory_order_relaxed);
    parts.swap(coalesced_);
  }
  std::vector<at::Tensor> outputs;
  for (const auto& part : parts) {
    for (const at::Tensor& t : part->result()) outputs.push_back(t);
  }
  auto work = make_work(c10d::OpType::COALESCED, "coalesced", outputs, {});
  if (parts.empty()) {
    work->complete(nullptr);
    return work;
  }
  struct State {
    std::mutex mutex;
    size_t left;
    std::exception_ptr error;
  };
  auto state = std::make_shared<State>();
  state->left = parts.size();
  for (const auto& part : parts) {
    part->getFuture()->addCallback([work, state](c10::ivalue::Future& done) {
      bool last = false;
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (done.hasError() && !state->error) state->error = done.exception_ptr();
        last = --state->left == 0;
      }
      if (last) work->complete(state->error);
    });
  }
  return work;
}

WorkHandle ProcessGroupTdist::broadcast(std::vector<at::Tensor>& tensors,
                                        const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  return translate_errors([&]() -> WorkHandle {
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    const at::Tensor& t = single_entry(tensors, op, "tensor");
    check_root_tensor(opts.rootTensor, op);
    int root = root_rank(opts.rootRank, getSize(), op, "src");
    if (detail_) check_call({op, root, {dc::one("tensor", t)}});
    auto comms = record_comms({op, t.numel(), t.numel(), t.scalar_type()});
    auto work = make_work(c10d::OpType::BROADCAST, op, {t}, {}, {t});
    Tensor tensor = to_tdist(t, op, "tensor");
    launch(work, waits_at_once(opts), [this, tensor, root] { return parts(pg_->broadcast(tensor, root)); });
    return work;
  });
}

WorkHandle ProcessGroupTdist::allreduce(std::vector<at::Tensor>& tensors,
                                        const c10d::AllreduceOptions& opts) {
  const char* op = "all_reduce";
  return translate_errors([&]() -> WorkHandle {
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    at::Tensor& t = single_entry(tensors, op, "tensor");
    if (t.layout() == at::kSparse) return sparse_allreduce(t, opts);
    if (detail_) check_call({op, -1, {dc::one("tensor", t)}});
    auto comms = record_comms({op, t.numel(), t.numel(), t.scalar_type()});
    auto work = make_work(c10d::OpType::ALLREDUCE, op, {t}, {}, {t});
    Tensor tensor = to_tdist(t, op, "tensor");
    ReduceOp reduce = to_tdist_op(opts.reduceOp, op);
    launch(work, waits_at_once(opts),
           [this, tensor, reduce] { return parts(pg_->all_reduce(tensor, reduce)); });
    return work;
  });
}

WorkHandle ProcessGroupTdist::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "all_reduce_coalesced";
  return translate_errors([&]() -> WorkHandle {
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    if (detail_) check_call({op, -1, {dc::list("tensors", tensors)}});
    auto comms = record_comms({op, total_numel(tensors), total_numel(tensors), first_dtype(tensors)});
    auto work = make_work(c10d::OpType::ALLREDUCE_COALESCED, op, tensors, {}, tensors);
    to_tdist(tensors, op, "tensors");  // checks device, layout, contiguity, dtype
    check_same_dtype(tensors, op, "tensors");
    if (tensors.empty()) {
      complete_when_done(work, {});
      return work;
    }
    at::Tensor flat = flatten_copy(tensors);
    Tensor flat_t = to_tdist(flat, op, "tensors");
    ReduceOp reduce = to_tdist_op(opts.reduceOp, op);
    launch(
        work, waits_at_once(opts), [this, flat_t, reduce] { return parts(pg_->all_reduce(flat_t, reduce)); },
        [tensors, flat] { unflatten_into(flat, 0, tensors); });
    return work;
  });
}

WorkHandle ProcessGroupTdist::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  return translate_errors([&]() -> WorkHandle {
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    const at::Tensor& t = single_entry(tensors, op, "tensor");
    check_root_tensor(opts.rootTensor, op);
    int root = root_rank(opts.rootRank, getSize(), op, "dst");
    if (detail_) check_call({op, root, {dc::one("tensor", t)}});
    auto comms = record_comms({op, t.numel(), t.numel(), t.scalar_type()});
    auto work = make_work(c10d::OpType::REDUCE, op, {t}, {}, {t});
    Tensor tensor = to_tdist(t, op, "tensor");
    ReduceOp reduce = to_tdist_op(opts.reduceOp, op);
    launch(work, waits_at_once(opts),
           [this, tensor, root, reduce] { return parts(pg_->reduce(tensor, root, reduce)); });
    return work;
  });
}

WorkHandle ProcessGroupTdist::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather";
  return translate_errors([&]() -> WorkHandle {
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    const at::Tensor& input = single_entry(inputs, op, "tensor");
    std::vector<at::Tensor>& list = single_entry(outputs, op, "tensor_list");
    if (detail_) {
      check_call({op, -1, {dc::list("tensor_list", list), dc::one("tensor", input, dc::Rule::kEntryOf, 0)}});
    }
    auto comms = record_comms({op, input.numel(), total_numel(list), input.scalar_type()});
    auto work = make_work(c10d::OpType::ALLGATHER, op, list, {input}, {input});
    auto outs = to_tdist(list, op, "tensor_list entry");
    Tensor in = to_tdist(input, op, "tensor");
    launch(work, waits_at_once(opts), [this, outs, in] { return parts(pg_->all_gather(outs, in)); });
    return work;
  });
}

WorkHandle ProcessGroupTdist::_allgather_base(at::Tensor& output, at::Tensor& input,
                                              const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_into_tensor";
  return translate_errors([&]() -> WorkHandle {
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    if (detail_) check_call({op, -1, {dc::one("output_tensor", output), dc::one("input_tensor", input)}});
    auto comms = record_comms({op, input.numel(), output.numel(), input.scalar_type()});
    auto work = make_work(c10d::OpType::_ALLGATHER_BASE, op, {output}, {input}, {input});
    Tensor out = to_tdist(output, op, "output_tensor");
    Tensor in = to_tdist(input, op, "input_tensor");
    launch(work, waits_at_once(opts),
           [this, out, in] { return parts(pg_->all_gather_into_tensor(out, in)); });
    return work;
  });
}

WorkHandle ProcessGroupTdist::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const c10d::AllgatherOptions& opts) {
  // torch's functional collectives (_functional_collectives, which DTensor
  // uses), _coalescing_manager and
  // all_gather_into_tensor_coalesced: one all_gather_into_tensor per pair,
  // issued back to back, one work for them all.
  const char* op = "all_gather_into_tensor_coalesced";
  return translate_errors([&]() -> WorkHandle {
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    auto pairs = coalesced_pairs(outputs, inputs, op);
    if (detail_) check_call({op, -1, {dc::list("outputs", outputs), dc::list("inputs", inputs)}});
    auto comms = record_comms({op, total_numel(inputs), total_numel(outputs), first_dtype(inputs)});
    auto work = make_work(c10d::OpType::COALESCED, op, outputs, inputs, inputs);
    launch(work, waits_at_once(opts), [this, pairs] {
      std::vector<WorkPtr> issued;
      issued.reserve(pairs.size());
      for (const auto& [out, in] : pairs) issued.push_back(pg_->all_gather_into_tensor(out, in));
      return issued;
    });
    return work;
  });
}

WorkHandle ProcessGroupTdist::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor_coalesced";
  return translate_errors([&]() -> WorkHandle {
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    auto pairs = coalesced_pairs(outputs, inputs, op);
    if (detail_) check_call({op, -1, {dc::list("outputs", outputs), dc::list("inputs", inputs)}});
    auto comms = record_comms({op, total_numel(inputs), total_numel(outputs), first_dtype(inputs)});
    auto work = make_work(c10d::OpType::COALESCED, op, outputs, inputs, inputs);
    ReduceOp reduce = to_tdist_op(opts.reduceOp, op);
    launch(work, waits_at_once(opts), [this, pairs, reduce] {
      std::vector<WorkPtr> issued;
      issued.reserve(pairs.size());
      for (const auto& [out, in] : pairs) issued.push_back(pg_->reduce_scatter_tensor(out, in, reduce));
      return issued;
    });
    return work;
  });
}

WorkHandle ProcessGroupTdist::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_coalesced";
  return translate_errors([&]() -> WorkHandle {
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    std::vector<at::Tensor> all_outputs;
    for (const auto& list : outputs) all_outputs.insert(all_outputs.end(), list.begin(), list.end());
    if (detail_) {
      check_call(
          {op, -1, {dc::list("output_tensor_lists", all_outputs), dc::list("input_tensor_list", inputs)}});
    }
    auto comms = record_comms({op, total_numel(inputs), total_numel(all_outputs), first_dtype(inputs)});
    auto work = make_work(c10d::OpType::ALLGATHER_COALESCED, op, all_outputs, inputs, inputs);
    check_coalesced_lists(outputs, inputs, getSize(), op);
    if (inputs.empty()) {
      complete_when_done(work, {});
      return work;
    }
    at::Tensor flat_in = flatten_copy(inputs);
    at::Tensor flat_out = at::empty({flat_in.numel() * getSize()}, flat_in.options());
    Tensor out = to_tdist(flat_out, op, "output");
    Tensor in = to_tdist(flat_in, op, "input");
    launch(
        work, waits_at_once(opts), [this, out, in] { return parts(pg_->all_gather_into_tensor(out, in)); },
        [outputs, flat_in, flat_out] {
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
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    const at::Tensor& input = single_entry(inputs, op, "tensor");
    int root = root_rank(opts.rootRank, getSize(), op, "dst");
    std::vector<at::Tensor> list;
    if (!outputs.empty()) list = single_entry(outputs, op, "gather_list");
    if (detail_) {
      check_call({op,
                  root,
                  {dc::list("gather_list", list, dc::Rule::kFromOtherSide),
                   dc::one("tensor", input, dc::Rule::kEntryOf, 0, /*of_root=*/true)}});
    }
    auto comms = record_comms({op, input.numel(), total_numel(list), input.scalar_type()});
    auto work = make_work(c10d::OpType::GATHER, op, list, {input}, {input});
    auto outs = to_tdist(list, op, "gather_list entry");
    Tensor in = to_tdist(input, op, "tensor");
    launch(work, waits_at_once(opts), [this, outs, in, root] { return parts(pg_->gather(outs, in, root)); });
    return work;
  });
}

WorkHandle ProcessGroupTdist::scatter(std::vector<at::Tensor>& outputs,
                                      std::vector<std::vector<at::Tensor>>& inputs,
                                      const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  return translate_errors([&]() -> WorkHandle {
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    const at::Tensor& output = single_entry(outputs, op, "tensor");
    int root = root_rank(opts.rootRank, getSize(), op, "src");
    std::vector<at::Tensor> list;
    if (!inputs.empty()) list = single_entry(inputs, op, "scatter_list");
    if (detail_) {
      check_call({op,
                  root,
                  {dc::list("scatter_list", list, dc::Rule::kFromOtherSide),
                   dc::one("tensor", output, dc::Rule::kEntryOf, 0, /*of_root=*/true)}});
    }
    auto comms = record_comms({op, total_numel(list), output.numel(), output.scalar_type()});
    // As gloo's event, the root's scatter_list (nothing elsewhere).
    auto work = make_work(c10d::OpType::SCATTER, op, {output}, list, list);
    Tensor out = to_tdist(output, op, "tensor");
    auto ins = to_tdist(list, op, "scatter_list entry");
    launch(work, waits_at_once(opts), [this, out, ins, root] { return parts(pg_->scatter(out, ins, root)); });
    return work;
  });
}

WorkHandle ProcessGroupTdist::reduce_scatter(std::vector<at::Tensor>& outputs,
                                             std::vector<std::vector<at::Tensor>>& inputs,
                                             const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  return translate_errors([&]() -> WorkHandle {
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    const at::Tensor& output = single_entry(outputs, op, "output");
    std::vector<at::Tensor>& list = single_entry(inputs, op, "input_list");
    if (detail_) {
      check_call({op, -1, {dc::list("input_list", list), dc::one("output", output, dc::Rule::kEntryOf, 0)}});
    }
    auto comms = record_comms({op, total_numel(list), output.numel(), output.scalar_type()});
    auto work = make_work(c10d::OpType::REDUCE_SCATTER, op, {output}, list, list);
    Tensor out = to_tdist(output, op, "output");
    auto ins = to_tdist(list, op, "input_list entry");
    ReduceOp reduce = to_tdist_op(opts.reduceOp, op);
    launch(work, waits_at_once(opts),
           [this, out, ins, reduce] { return parts(pg_->reduce_scatter(out, ins, reduce)); });
    return work;
  });
}

WorkHandle ProcessGroupTdist::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                   const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor";
  return translate_errors([&]() -> WorkHandle {
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    if (detail_) check_call({op, -1, {dc::one("output", output), dc::one("input", input)}});
    auto comms = record_comms({op, input.numel(), output.numel(), input.scalar_type()});
    auto work = make_work(c10d::OpType::_REDUCE_SCATTER_BASE, op, {output}, {input}, {input});
    Tensor out = to_tdist(output, op, "output");
    Tensor in = to_tdist(input, op, "input");
    ReduceOp reduce = to_tdist_op(opts.reduceOp, op);
    launch(work, waits_at_once(opts),
           [this, out, in, reduce] { return parts(pg_->reduce_scatter_tensor(out, in, reduce)); });
    return work;
  });
}

WorkHandle ProcessGroupTdist::alltoall_base(at::Tensor& output, at::Tensor& input,
                                            std::vector<int64_t>& output_split_sizes,
                                            std::vector<int64_t>& input_split_sizes,
                                            const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all_single";
  return translate_errors([&]() -> WorkHandle {
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    // The first dimension may differ per rank (split sizes); tdist matches
    // the split sizes pairwise.
    if (detail_) {
      check_call({op,
                  -1,
                  {dc::one("output", output, dc::Rule::kSameButFirst),
                   dc::one("input", input, dc::Rule::kSameButFirst)}});
    }
    auto comms = record_comms(
        {op, input.numel(), output.numel(), input.scalar_type(), input_split_sizes, output_split_sizes});
    auto work = make_work(c10d::OpType::ALLTOALL_BASE, op, {output}, {input}, {input});
    Tensor out = to_tdist(output, op, "output");
    Tensor in = to_tdist(input, op, "input");
    launch(work, waits_at_once(opts),
           [this, out, in, out_splits = output_split_sizes, in_splits = input_split_sizes] {
             return parts(pg_->all_to_all_single(out, in, out_splits, in_splits));
           });
    return work;
  });
}

WorkHandle ProcessGroupTdist::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                       const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all";
  return translate_errors([&]() -> WorkHandle {
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    if (detail_) {
      check_call({op,
                  -1,
                  {dc::list("output_tensor_list", outputs, dc::Rule::kTransposeOf, 1),
                   dc::list("input_tensor_list", inputs, dc::Rule::kFromOtherSide)}});
    }
    auto comms = record_comms({op, total_numel(inputs), total_numel(outputs), first_dtype(inputs),
                               numels(inputs), numels(outputs)});
    auto work = make_work(c10d::OpType::ALLTOALL, op, outputs, inputs, inputs);
    auto outs = to_tdist(outputs, op, "output_tensor_list entry");
    auto ins = to_tdist(inputs, op, "input_tensor_list entry");
    launch(work, waits_at_once(opts), [this, outs, ins] { return parts(pg_->all_to_all(outs, ins)); });
    return work;
  });
}

WorkHandle ProcessGroupTdist::barrier(const c10d::BarrierOptions& opts) {
  const char* op = "barrier";
  return translate_errors([&]() -> WorkHandle {
    const tdist::ScopedCallTimeout per_call(opts.timeout);
    if (detail_) check_call({op, -1, {}});
    auto comms = record_comms({op});
    auto work = make_work(c10d::OpType::BARRIER, op, {}, {});
    launch(work, waits_at_once(opts), [this] { return parts(pg_->barrier()); });
    return work;
  });
}

}  // namespace tdist::torch_plugin
