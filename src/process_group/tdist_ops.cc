// ProcessGroupTdist (tdist_backend.h): the collectives. Each public op
// checks its arguments on the caller's thread, builds the call's signature
// and submits its body (run_<op>), which runs inline or on the worker in
// the domain domain_for() picks.

#include <cstring>
#include <numeric>

#include "algorithms/patterns/chunking.h"
#include "tdist/errors.h"
#include "tdist_backend.h"
#include "tensor_lists.h"
#include "validate.h"

namespace tdist {
namespace {

namespace sig = tdist::detail;
using detail::back_to_back;
using detail::Blocks;
using detail::count_of;
using detail::nbytes_of;
using detail::offsets_of;
using detail::Scattered;
using detail::slices_for;
using detail::to_size;
using detail::total_count;
using tdist::detail::CallKind;

}  // namespace

void ProcessGroupTdist::all_gather_bytes(const algorithms::CallContext& ctx, const void* in, void* out,
                                         const std::vector<size_t>& bytes) const {
  if (empty_call(ctx, std::accumulate(bytes.begin(), bytes.end(), size_t{0}))) return;
  domain_for<algorithms::AllGatherAlgo>().all_gather(ctx, in, out, bytes);
}

void ProcessGroupTdist::reduce_scatter_elements(const algorithms::CallContext& ctx, const void* in,
                                                const Tensor& output, const std::vector<size_t>& counts,
                                                const ReduceOp& op) const {
  if (empty_call(ctx, std::accumulate(counts.begin(), counts.end(), size_t{0}))) return;
  domain_for<algorithms::ReduceScatterAlgo>().reduce_scatter(ctx, in, output.data(), counts, output.dtype(),
                                                             op);
}

void ProcessGroupTdist::run_broadcast(const algorithms::CallContext& ctx, const Tensor& tensor, int root) {
  if (empty_call(ctx, tensor.nbytes())) return;
  domain_for<algorithms::BroadcastAlgo>().broadcast(ctx, tensor.data(), tensor.nbytes(), root);
}

WorkPtr ProcessGroupTdist::broadcast(const Tensor& tensor, int root) {
  validate::rank_in_group("broadcast", "src", root, size());
  return submit("broadcast",
                sig::collective_signature(CallKind::kBroadcast, tensor.dtype(), count_of(tensor), root),
                {.one = &tensor}, &ProcessGroupTdist::run_broadcast, tensor, root);
}

void ProcessGroupTdist::run_all_reduce(const algorithms::CallContext& ctx, const Tensor& tensor,
                                       const ReduceOp& op) {
  if (empty_call(ctx, tensor.nbytes())) return;
  domain_for<algorithms::AllReduceAlgo>().all_reduce(ctx, tensor.data(), to_size(tensor.numel()),
                                                     tensor.dtype(), op);
}

WorkPtr ProcessGroupTdist::all_reduce(const Tensor& tensor, const ReduceOp& op) {
  validate::reduce_op("all_reduce", tensor, op);
  return submit("all_reduce",
                sig::collective_signature(CallKind::kAllReduce, tensor.dtype(), count_of(tensor), -1, &op),
                {.one = &tensor}, &ProcessGroupTdist::run_all_reduce, tensor, op);
}

void ProcessGroupTdist::run_reduce(const algorithms::CallContext& ctx, const Tensor& tensor, int root,
                                   const ReduceOp& op) {
  if (empty_call(ctx, tensor.nbytes())) return;
  // Every domain leaves a non-root rank's input intact.
  domain_for<algorithms::ReduceAlgo>().reduce(ctx, tensor.data(), to_size(tensor.numel()), tensor.dtype(), op,
                                              root);
}

WorkPtr ProcessGroupTdist::reduce(const Tensor& tensor, int root, const ReduceOp& op) {
  validate::rank_in_group("reduce", "dst", root, size());
  validate::reduce_op("reduce", tensor, op);
  return submit("reduce",
                sig::collective_signature(CallKind::kReduce, tensor.dtype(), count_of(tensor), root, &op),
                {.one = &tensor}, &ProcessGroupTdist::run_reduce, tensor, root, op);
}

void ProcessGroupTdist::run_all_gather(const algorithms::CallContext& ctx, const std::vector<Tensor>& outputs,
                                       const Tensor& input) {
  const auto bytes = nbytes_of(outputs);
  const size_t total = std::accumulate(bytes.begin(), bytes.end(), size_t{0});
  if (empty_call(ctx, total)) return;
  const bool contiguous = back_to_back(outputs);
  if (!contiguous) {
    // A domain that can (shared memory) writes every block where its
    // tensor lies: no staging buffer to fault in and copy out of.
    std::vector<std::vector<algorithms::OutputSegment>> blocks(outputs.size());
    for (size_t r = 0; r < outputs.size(); ++r) blocks[r].push_back({outputs[r].data(), bytes[r]});
    if (domain_for<algorithms::AllGatherAlgo>().all_gather_in_place(ctx, input.data(), blocks)) return;
  }
  const size_t slices = slices_for(total);
  if (slices == 1 || contiguous) {
    Blocks blocks(outputs);
    all_gather_bytes(ctx, input.data(), blocks.base, bytes);
    blocks.copy_out();
    return;
  }
  size_t widest = 0;  // slice 0: the first slices are the longest
  for (size_t b : bytes) widest += patterns::chunk_elements(b, static_cast<int>(slices), 0).length;
  detail::Scratch staging(widest);
  const auto* in = static_cast<const uint8_t*>(input.data());
  const size_t me = to_size(ctx.rank());
  std::vector<size_t> begin(bytes.size()), piece(bytes.size());
  for (size_t k = 0; k < slices; ++k) {
    for (size_t r = 0; r < bytes.size(); ++r) {
      const auto slice = patterns::chunk_elements(bytes[r], static_cast<int>(slices), static_cast<int>(k));
      begin[r] = slice.offset;
      piece[r] = slice.length;
    }
    all_gather_bytes(ctx, in + begin[me], staging.get(), piece);
    size_t at = 0;
    for (size_t r = 0; r < bytes.size(); ++r) {
      if (piece[r] > 0)
        std::memcpy(static_cast<uint8_t*>(outputs[r].data()) + begin[r], staging.get() + at, piece[r]);
      at += piece[r];
    }
  }
}

WorkPtr ProcessGroupTdist::all_gather(const std::vector<Tensor>& outputs, const Tensor& input) {
  validate::list_length("all_gather", "tensor_list", outputs.size(), size());
  for (size_t r = 0; r < outputs.size(); ++r) {
    validate::same_dtype("all_gather", "tensor_list entry", outputs[r], input.dtype());
    validate::no_overlap("all_gather", "tensor_list entry", outputs[r], "tensor", input);
  }
  validate::numel_equals("all_gather", "this rank's tensor_list entry", outputs[to_size(rank())],
                         input.numel());
  const auto bytes = nbytes_of(outputs);
  return submit("all_gather",
                sig::collective_signature(CallKind::kAllGather, input.dtype(), total_count(outputs), -1,
                                          nullptr, sig::layout_of(bytes)),
                {.list = &outputs}, &ProcessGroupTdist::run_all_gather, outputs, input);
}

void ProcessGroupTdist::run_all_gather_into_tensor(const algorithms::CallContext& ctx, const Tensor& output,
                                                   const Tensor& input, size_t block) {
  all_gather_bytes(ctx, input.data(), output.data(), std::vector<size_t>(to_size(ctx.size()), block));
}

WorkPtr ProcessGroupTdist::all_gather_into_tensor(const Tensor& output, const Tensor& input) {
  validate::gathered_shape("all_gather_into_tensor", "output_tensor", output, "input_tensor", input, size());
  size_t block = input.nbytes();
  const auto* slot = static_cast<const uint8_t*>(output.data()) + block * to_size(rank());
  bool in_place = block > 0 && input.data() == slot;
  if (!in_place)
    validate::no_overlap("all_gather_into_tensor", "output_tensor", output, "input_tensor", input);
  return submit("all_gather_into_tensor",
                sig::collective_signature(CallKind::kAllGatherIntoTensor, input.dtype(), count_of(input)),
                {.one = &output}, &ProcessGroupTdist::run_all_gather_into_tensor, output, input, block);
}

void ProcessGroupTdist::run_all_gather_into_tensor_uneven(const algorithms::CallContext& ctx,
                                                          const Tensor& output, const Tensor& input,
                                                          const std::vector<size_t>& bytes) {
  all_gather_bytes(ctx, input.data(), output.data(), bytes);
}

WorkPtr ProcessGroupTdist::all_gather_into_tensor_uneven(const Tensor& output, const Tensor& input,
                                                         const std::vector<int64_t>& split_sizes) {
  const char* op = "all_gather_into_tensor_uneven";
  validate::same_dtype(op, "output", output, input.dtype());
  int64_t row = validate::row_elements(op, "output", output);
  const std::vector<int64_t> output_split_sizes =
      split_sizes.empty() ? validate::even_splits(op, "output", output.shape()[0], size()) : split_sizes;
  validate::split_sizes(op, "output_split_sizes", output_split_sizes, size(), output.shape()[0]);
  validate::numel_equals(op, "input (output_split_sizes[rank] rows)", input,
                         output_split_sizes[to_size(rank())] * row);
  std::vector<size_t> bytes;
  bytes.reserve(output_split_sizes.size());
  for (int64_t rows : output_split_sizes) bytes.push_back(to_size(rows * row) * output.element_size());
  const auto* slot = static_cast<const uint8_t*>(output.data()) + offsets_of(bytes)[to_size(rank())];
  if (!(input.nbytes() > 0 && input.data() == slot))
    validate::no_overlap(op, "output", output, "input", input);
  uint64_t total = 0;
  for (int64_t rows : output_split_sizes) total += static_cast<uint64_t>(rows * row);
  return submit(op,
                sig::collective_signature(CallKind::kAllGatherIntoTensorUneven, input.dtype(), total, -1,
                                          nullptr, sig::layout_of(bytes)),
                {.one = &output}, &ProcessGroupTdist::run_all_gather_into_tensor_uneven, output, input,
                bytes);
}

void ProcessGroupTdist::run_gather(const algorithms::CallContext& ctx, const std::vector<Tensor>& outputs,
                                   const Tensor& input, const std::vector<size_t>& bytes, int root) {
  if (empty_call(ctx, input.nbytes())) return;
  auto& domain = domain_for<algorithms::GatherAlgo>();
  if (ctx.rank() != root) return domain.gather(ctx, input.data(), nullptr, bytes, root);
  Blocks blocks(outputs);
  domain.gather(ctx, input.data(), blocks.base, bytes, root);
  blocks.copy_out();
}

WorkPtr ProcessGroupTdist::gather(const std::vector<Tensor>& outputs, const Tensor& input, int root) {
  validate::rank_in_group("gather", "dst", root, size());
  if (rank() == root) {
    validate::list_length("gather", "gather_list", outputs.size(), size());
    for (const auto& t : outputs) {
      validate::same_dtype("gather", "gather_list entry", t, input.dtype());
      validate::numel_equals("gather", "gather_list entry", t, input.numel());
      validate::no_overlap("gather", "gather_list entry", t, "tensor", input);
    }
  } else if (!outputs.empty()) {
    throw DistInvalidArgument("gather: gather_list must be empty on ranks other than dst " +
                              std::to_string(root) + " (got " + std::to_string(outputs.size()) +
                              " tensors on rank " + std::to_string(rank()) + ")");
  }
  std::vector<size_t> bytes(to_size(size()), input.nbytes());
  return submit("gather", sig::collective_signature(CallKind::kGather, input.dtype(), count_of(input), root),
                {.list = &outputs}, &ProcessGroupTdist::run_gather, outputs, input, bytes, root);
}

void ProcessGroupTdist::run_scatter(const algorithms::CallContext& ctx, const Tensor& output,
                                    const std::vector<Tensor>& inputs, const std::vector<size_t>& bytes,
                                    int root) {
  if (empty_call(ctx, output.nbytes())) return;
  auto& domain = domain_for<algorithms::ScatterAlgo>();
  if (ctx.rank() != root) return domain.scatter(ctx, nullptr, output.data(), bytes, root);
  Blocks blocks(inputs);
  blocks.copy_in();
  domain.scatter(ctx, blocks.base, output.data(), bytes, root);
}

WorkPtr ProcessGroupTdist::scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root) {
  validate::rank_in_group("scatter", "src", root, size());
  if (rank() == root) {
    validate::list_length("scatter", "scatter_list", inputs.size(), size());
    for (const auto& t : inputs) {
      validate::same_dtype("scatter", "scatter_list entry", t, output.dtype());
      validate::numel_equals("scatter", "scatter_list entry", t, output.numel());
      validate::no_overlap("scatter", "scatter_list entry", t, "tensor", output);
    }
  } else if (!inputs.empty()) {
    throw DistInvalidArgument("scatter: scatter_list must be empty on ranks other than src " +
                              std::to_string(root) + " (got " + std::to_string(inputs.size()) +
                              " tensors on rank " + std::to_string(rank()) + ")");
  }
  std::vector<size_t> bytes(to_size(size()), output.nbytes());
  return submit("scatter",
                sig::collective_signature(CallKind::kScatter, output.dtype(), count_of(output), root),
                {.one = &output}, &ProcessGroupTdist::run_scatter, output, inputs, bytes, root);
}

void ProcessGroupTdist::run_reduce_scatter(const algorithms::CallContext& ctx, const Tensor& output,
                                           const std::vector<Tensor>& inputs,
                                           const std::vector<size_t>& counts, const ReduceOp& op) {
  if (!back_to_back(inputs)) {
    // A domain that can (shared memory) reads every block where its tensor
    // lies, as run_all_gather writes them.
    if (empty_call(ctx, std::accumulate(counts.begin(), counts.end(), size_t{0}))) return;
    std::vector<std::vector<algorithms::InputSegment>> blocks(inputs.size());
    for (size_t j = 0; j < inputs.size(); ++j) blocks[j].push_back({inputs[j].data(), counts[j]});
    if (domain_for<algorithms::ReduceScatterAlgo>().reduce_scatter_in_place(ctx, blocks, output.data(),
                                                                            counts, output.dtype(), op))
      return;
  }
  Blocks blocks(inputs);
  blocks.copy_in();
  reduce_scatter_elements(ctx, blocks.base, output, counts, op);
}

WorkPtr ProcessGroupTdist::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                          const ReduceOp& op) {
  validate::list_length("reduce_scatter", "input_list", inputs.size(), size());
  validate::reduce_op("reduce_scatter", output, op);
  for (const auto& t : inputs) {
    validate::same_dtype("reduce_scatter", "input_list entry", t, output.dtype());
    validate::no_overlap("reduce_scatter", "input_list entry", t, "output", output);
  }
  validate::numel_equals("reduce_scatter", "output (this rank's input_list entry)", output,
                         inputs[to_size(rank())].numel());
  std::vector<size_t> counts;
  counts.reserve(inputs.size());
  for (const auto& t : inputs) counts.push_back(to_size(t.numel()));
  return submit("reduce_scatter",
                sig::collective_signature(CallKind::kReduceScatter, output.dtype(), total_count(inputs), -1,
                                          &op, sig::layout_of(counts)),
                {.one = &output}, &ProcessGroupTdist::run_reduce_scatter, output, inputs, counts, op);
}

void ProcessGroupTdist::run_reduce_scatter_tensor(const algorithms::CallContext& ctx, const Tensor& output,
                                                  const Tensor& input, const std::vector<size_t>& counts,
                                                  const ReduceOp& op) {
  reduce_scatter_elements(ctx, input.data(), output, counts, op);
}

WorkPtr ProcessGroupTdist::reduce_scatter_tensor(const Tensor& output, const Tensor& input,
                                                 const ReduceOp& op) {
  validate::gathered_shape("reduce_scatter_tensor", "input", input, "output", output, size());
  validate::reduce_op("reduce_scatter_tensor", output, op);
  validate::no_overlap("reduce_scatter_tensor", "input", input, "output", output);
  std::vector<size_t> counts(to_size(size()), to_size(output.numel()));
  return submit(
      "reduce_scatter_tensor",
      sig::collective_signature(CallKind::kReduceScatterTensor, output.dtype(), count_of(output), -1, &op),
      {.one = &output}, &ProcessGroupTdist::run_reduce_scatter_tensor, output, input, counts, op);
}

void ProcessGroupTdist::run_reduce_scatter_tensor_uneven(const algorithms::CallContext& ctx,
                                                         const Tensor& output, const Tensor& input,
                                                         const std::vector<size_t>& counts,
                                                         const ReduceOp& op) {
  reduce_scatter_elements(ctx, input.data(), output, counts, op);
}

WorkPtr ProcessGroupTdist::reduce_scatter_tensor_uneven(const Tensor& output, const Tensor& input,
                                                        const std::vector<int64_t>& split_sizes,
                                                        const ReduceOp& op) {
  const char* name = "reduce_scatter_tensor_uneven";
  validate::same_dtype(name, "output", output, input.dtype());
  validate::reduce_op(name, output, op);
  int64_t row = validate::row_elements(name, "input", input);
  const std::vector<int64_t> input_split_sizes =
      split_sizes.empty() ? validate::even_splits(name, "input", input.shape()[0], size()) : split_sizes;
  validate::split_sizes(name, "input_split_sizes", input_split_sizes, size(), input.shape()[0]);
  validate::numel_equals(name, "output (input_split_sizes[rank] rows)", output,
                         input_split_sizes[to_size(rank())] * row);
  validate::no_overlap(name, "input", input, "output", output);
  std::vector<size_t> counts;
  counts.reserve(input_split_sizes.size());
  for (int64_t rows : input_split_sizes) counts.push_back(to_size(rows * row));
  return submit(name,
                sig::collective_signature(CallKind::kReduceScatterTensorUneven, output.dtype(),
                                          count_of(input), -1, &op, sig::layout_of(counts)),
                {.one = &output}, &ProcessGroupTdist::run_reduce_scatter_tensor_uneven, output, input, counts,
                op);
}

void ProcessGroupTdist::run_all_to_all(const algorithms::CallContext& ctx, const std::vector<Tensor>& outputs,
                                       const std::vector<Tensor>& inputs) {
  const Scattered in(inputs);
  const Scattered out(outputs);
  domain_for<algorithms::AllToAllAlgo>().all_to_all(ctx, in.base, nbytes_of(inputs), in.offsets, out.base,
                                                    nbytes_of(outputs), out.offsets);
}

WorkPtr ProcessGroupTdist::all_to_all(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs) {
  validate::list_length("all_to_all", "output_tensor_list", outputs.size(), size());
  validate::list_length("all_to_all", "input_tensor_list", inputs.size(), size());
  for (size_t r = 0; r < inputs.size(); ++r) {
    validate::same_dtype("all_to_all", "input_tensor_list entry", inputs[r], inputs[0].dtype());
    validate::same_dtype("all_to_all", "output_tensor_list entry", outputs[r], inputs[0].dtype());
    for (const auto& out : outputs)
      validate::no_overlap("all_to_all", "an output", out, "an input", inputs[r]);
  }
  return submit(
      "all_to_all",
      sig::collective_signature(CallKind::kAllToAll, inputs.empty() ? DType::kFloat32 : inputs[0].dtype(), 0),
      {.list = &outputs}, &ProcessGroupTdist::run_all_to_all, outputs, inputs);
}

void ProcessGroupTdist::run_all_to_all_single(const algorithms::CallContext& ctx, const Tensor& output,
                                              const Tensor& input, const std::vector<size_t>& send_bytes,
                                              const std::vector<size_t>& recv_bytes) {
  domain_for<algorithms::AllToAllAlgo>().all_to_all(ctx, input.data(), send_bytes, offsets_of(send_bytes),
                                                    output.data(), recv_bytes, offsets_of(recv_bytes));
}

WorkPtr ProcessGroupTdist::all_to_all_single(const Tensor& output, const Tensor& input,
                                             const std::vector<int64_t>& output_split_sizes,
                                             const std::vector<int64_t>& input_split_sizes) {
  const char* op = "all_to_all_single";
  validate::same_dtype(op, "output", output, input.dtype());
  validate::no_overlap(op, "output", output, "input", input);
  auto splits_to_bytes = [&](const Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    std::vector<size_t> bytes;
    if (t.numel() == 0 && splits.empty()) return std::vector<size_t>(to_size(size()), 0);
    int64_t row = validate::row_elements(op, what, t);
    if (splits.empty()) {
      if (t.shape()[0] % size() != 0) {
        throw DistInvalidArgument(std::string(op) + ": " + what + " has " + std::to_string(t.shape()[0]) +
                                  " rows, not divisible by the group size " + std::to_string(size()) +
                                  "; pass split sizes");
      }
      return std::vector<size_t>(to_size(size()), to_size(t.shape()[0] / size() * row) * t.element_size());
    }
    validate::split_sizes(op, what, splits, size(), t.shape()[0]);
    bytes.reserve(splits.size());
    for (int64_t rows : splits) bytes.push_back(to_size(rows * row) * t.element_size());
    return bytes;
  };
  auto send_bytes = splits_to_bytes(input, input_split_sizes, "input_split_sizes");
  auto recv_bytes = splits_to_bytes(output, output_split_sizes, "output_split_sizes");
  return submit(op, sig::collective_signature(CallKind::kAllToAllSingle, input.dtype(), 0), {.one = &output},
                &ProcessGroupTdist::run_all_to_all_single, output, input, send_bytes, recv_bytes);
}

void ProcessGroupTdist::run_barrier(const algorithms::CallContext& ctx) {
  domain_for<algorithms::BarrierAlgo>().barrier(ctx);
}

WorkPtr ProcessGroupTdist::barrier() {
  return submit("barrier", sig::collective_signature(CallKind::kBarrier, DType::kUInt8, 0), {},
                &ProcessGroupTdist::run_barrier);
}

}  // namespace tdist
