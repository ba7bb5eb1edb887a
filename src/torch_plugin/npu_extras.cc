// torch_npu's additions on the plugin's groups (tdist.torch exposes them):
// the uneven all-gather and reduce-scatter, reinit_process_group and the
// communicator name. tdist's own group does the work; this maps torch
// tensors and errors, as every other op of the plugin does.

#include "conversions.h"
#include "process_group_tdist.h"
#include "work_tdist.h"

namespace tdist::torch_plugin {
namespace {
namespace dc = detail_check;
using WorkHandle = c10::intrusive_ptr<c10d::Work>;
}  // namespace

WorkHandle ProcessGroupTdist::all_gather_into_tensor_uneven(at::Tensor& output, at::Tensor& input,
                                                            std::vector<int64_t> output_split_sizes) {
  const char* op = "all_gather_into_tensor_uneven";
  return translate_errors([&]() -> WorkHandle {
    // Inputs differ in rows by design; the rest of their shapes must agree.
    // (Split sizes that differ across ranks fail the call's own check.)
    if (detail_) {
      check_call({op, -1, {dc::one("output", output), dc::one("input", input, dc::Rule::kSameButFirst)}});
    }
    auto comms =
        record_comms({op, input.numel(), output.numel(), input.scalar_type(), {}, output_split_sizes});
    auto work = make_work(c10d::OpType::_ALLGATHER_BASE, op, {output}, {input}, {input});
    Tensor out = to_tdist(output, op, "output");
    Tensor in = to_tdist(input, op, "input");
    launch(work, false, [this, out, in, splits = std::move(output_split_sizes)] {
      return std::vector<WorkPtr>{pg_->all_gather_into_tensor_uneven(out, in, splits)};
    });
    return work;
  });
}

WorkHandle ProcessGroupTdist::reduce_scatter_tensor_uneven(at::Tensor& output, at::Tensor& input,
                                                           std::vector<int64_t> input_split_sizes,
                                                           const c10d::ReduceOp& reduce_op) {
  const char* op = "reduce_scatter_tensor_uneven";
  return translate_errors([&]() -> WorkHandle {
    if (detail_) {
      check_call({op, -1, {dc::one("output", output, dc::Rule::kSameButFirst), dc::one("input", input)}});
    }
    auto comms =
        record_comms({op, input.numel(), output.numel(), input.scalar_type(), input_split_sizes, {}});
    auto work = make_work(c10d::OpType::_REDUCE_SCATTER_BASE, op, {output}, {input}, {input});
    Tensor out = to_tdist(output, op, "output");
    Tensor in = to_tdist(input, op, "input");
    ReduceOp reduce = to_tdist_op(reduce_op, op);
    launch(work, false, [this, out, in, reduce, splits = std::move(input_split_sizes)] {
      return std::vector<WorkPtr>{pg_->reduce_scatter_tensor_uneven(out, in, splits, reduce)};
    });
    return work;
  });
}

void ProcessGroupTdist::reinit(bool rebuild_link) {
  translate_errors([&] { pg_->reinit(rebuild_link); });
  // The plugin's own counts follow the group's: a rebuilt group numbers its
  // collectives and its messages from 0 again, on every member.
  issued_ = pg_->sequence_number();
  if (rebuild_link) {
    for (int r = 0; r < getSize(); ++r) send_seq_[static_cast<size_t>(r)] = 0;
  }
}

std::string ProcessGroupTdist::comm_name() const {
  return translate_errors([&] { return pg_->comm_name(); });
}

}  // namespace tdist::torch_plugin
