// The functional API (distributed.h): process groups, point to point and
// the collectives. Tensors are converted (zero copy) while the GIL is held;
// the GIL is released for the operation itself, so other Python threads run
// while a rank communicates. These are the low-level entry points: the
// torch-shaped signatures, docstrings and keep-alive of async arrays live in
// tdist/*.py.

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "tdist/distributed.h"

namespace tdist::python {
namespace {

using Millis = std::chrono::milliseconds;
constexpr Access R = Access::kRead;
constexpr Access W = Access::kWrite;

// Runs `op` without the GIL and returns its Work (None when it finished
// synchronously or this rank is not a member).
template <typename F>
py::object run(F&& op) {
  WorkPtr work;
  {
    py::gil_scoped_release release;
    work = op();
  }
  if (!work) return py::none();
  return py::cast(work);
}

void bind_groups(py::module_& m) {
  m.def(
      "init_process_group",
      [](const std::string& backend, const std::string& init_method, Millis timeout, int world_size, int rank,
         std::shared_ptr<Store> store, const std::string& group_name) {
        InitProcessGroupOptions options;
        options.backend = backend;
        options.init_method = init_method;
        options.timeout = timeout;
        options.world_size = world_size;
        options.rank = rank;
        options.store = std::move(store);
        options.group_name = group_name;
        py::gil_scoped_release release;
        init_process_group(options);
      },
      py::arg("backend"), py::arg("init_method"), py::arg("timeout"), py::arg("world_size"), py::arg("rank"),
      py::arg("store").none(true), py::arg("group_name"));
  m.def(
      "destroy_process_group",
      [](const Group& group) {
        py::gil_scoped_release release;
        destroy_process_group(group);
      },
      py::arg("group").none(true));
  m.def("is_initialized", &is_initialized);
  m.def("get_rank", &get_rank, py::arg("group").none(true));
  m.def("get_world_size", &get_world_size, py::arg("group").none(true));
  m.def("get_backend", &get_backend, py::arg("group").none(true));
  m.def("default_group", &default_group);
  m.def("is_member", &is_member, py::arg("group").none(true));
  m.def(
      "new_group",
      [](const std::vector<int>& ranks, std::optional<Millis> timeout, const std::string& backend,
         bool use_local_synchronization) {
        py::gil_scoped_release release;
        return new_group(ranks, timeout, backend, use_local_synchronization);
      },
      py::arg("ranks"), py::arg("timeout").none(true), py::arg("backend"),
      py::arg("use_local_synchronization"));
  m.def("get_group_rank", &get_group_rank, py::arg("group").none(true), py::arg("global_rank"));
  m.def("get_global_rank", &get_global_rank, py::arg("group").none(true), py::arg("group_rank"));
  m.def("get_process_group_ranks", &get_process_group_ranks, py::arg("group").none(true));
}

void bind_point_to_point(py::module_& m) {
  m.def(
      "isend",
      [](py::handle tensor, int dst, const Group& group, int tag) {
        Tensor t = to_tensor(tensor, "isend", "tensor", R);
        return run([&] { return isend(t, dst, group, tag); });
      },
      py::arg("tensor"), py::arg("dst"), py::arg("group").none(true), py::arg("tag"));
  m.def(
      "irecv",
      [](py::handle tensor, std::optional<int> src, const Group& group, int tag) {
        Tensor t = to_tensor(tensor, "irecv", "tensor", W);
        return run([&] { return irecv(t, src, group, tag); });
      },
      py::arg("tensor"), py::arg("src").none(true), py::arg("group").none(true), py::arg("tag"));
  m.def(
      "send",
      [](py::handle tensor, int dst, const Group& group, int tag) {
        Tensor t = to_tensor(tensor, "send", "tensor", R);
        py::gil_scoped_release release;
        send(t, dst, group, tag);
      },
      py::arg("tensor"), py::arg("dst"), py::arg("group").none(true), py::arg("tag"));
  m.def(
      "recv",
      [](py::handle tensor, std::optional<int> src, const Group& group, int tag) {
        Tensor t = to_tensor(tensor, "recv", "tensor", W);
        py::gil_scoped_release release;
        return recv(t, src, group, tag);
      },
      py::arg("tensor"), py::arg("src").none(true), py::arg("group").none(true), py::arg("tag"));
  m.def(
      "sendrecv",
      [](py::handle send_tensor, int dst, py::handle recv_tensor, std::optional<int> src, const Group& group,
         int tag) {
        Tensor s = to_tensor(send_tensor, "sendrecv", "send_tensor", R);
        Tensor r = to_tensor(recv_tensor, "sendrecv", "recv_tensor", W);
        py::gil_scoped_release release;
        return sendrecv(s, dst, r, src, group, tag);
      },
      py::arg("send_tensor"), py::arg("dst"), py::arg("recv_tensor"), py::arg("src").none(true),
      py::arg("group").none(true), py::arg("tag"));
}

void bind_collectives(py::module_& m) {
  m.def(
      "broadcast",
      [](py::handle tensor, int src, const Group& group, bool async_op) {
        Tensor t = to_tensor(tensor, "broadcast", "tensor", W);
        return run([&] { return broadcast(t, src, group, async_op); });
      },
      py::arg("tensor"), py::arg("src"), py::arg("group").none(true), py::arg("async_op"));
  m.def(
      "all_reduce",
      [](py::handle tensor, const ReduceOp& op, const Group& group, bool async_op) {
        Tensor t = to_tensor(tensor, "all_reduce", "tensor", W);
        return run([&] { return all_reduce(t, op, group, async_op); });
      },
      py::arg("tensor"), py::arg("op"), py::arg("group").none(true), py::arg("async_op"));
  m.def(
      "reduce",
      [](py::handle tensor, int dst, const ReduceOp& op, const Group& group, bool async_op) {
        Tensor t = to_tensor(tensor, "reduce", "tensor", W);
        return run([&] { return reduce(t, dst, op, group, async_op); });
      },
      py::arg("tensor"), py::arg("dst"), py::arg("op"), py::arg("group").none(true), py::arg("async_op"));
  m.def(
      "all_gather",
      [](py::handle tensor_list, py::handle tensor, const Group& group, bool async_op) {
        auto outputs = to_tensor_list(tensor_list, "all_gather", "tensor_list", W);
        Tensor input = to_tensor(tensor, "all_gather", "tensor", R);
        return run([&] { return all_gather(outputs, input, group, async_op); });
      },
      py::arg("tensor_list"), py::arg("tensor"), py::arg("group").none(true), py::arg("async_op"));
  m.def(
      "all_gather_into_tensor",
      [](py::handle output, py::handle input, const Group& group, bool async_op) {
        Tensor out = to_tensor(output, "all_gather_into_tensor", "output_tensor", W);
        Tensor in = to_tensor(input, "all_gather_into_tensor", "input_tensor", R);
        return run([&] { return all_gather_into_tensor(out, in, group, async_op); });
      },
      py::arg("output_tensor"), py::arg("input_tensor"), py::arg("group").none(true), py::arg("async_op"));
  m.def(
      "all_gather_into_tensor_uneven",
      [](py::handle output, py::handle input, const std::vector<int64_t>& splits, const Group& group,
         bool async_op) {
        Tensor out = to_tensor(output, "all_gather_into_tensor_uneven", "output", W);
        Tensor in = to_tensor(input, "all_gather_into_tensor_uneven", "input", R);
        return run([&] { return all_gather_into_tensor_uneven(out, in, splits, group, async_op); });
      },
      py::arg("output"), py::arg("input"), py::arg("output_split_sizes"), py::arg("group").none(true),
      py::arg("async_op"));
  m.def(
      "gather",
      [](py::handle tensor, py::handle gather_list, int dst, const Group& group, bool async_op) {
        Tensor in = to_tensor(tensor, "gather", "tensor", R);
        auto outputs = to_tensor_list(gather_list, "gather", "gather_list", W);
        return run([&] { return gather(in, outputs, dst, group, async_op); });
      },
      py::arg("tensor"), py::arg("gather_list").none(true), py::arg("dst"), py::arg("group").none(true),
      py::arg("async_op"));
  m.def(
      "scatter",
      [](py::handle tensor, py::handle scatter_list, int src, const Group& group, bool async_op) {
        Tensor out = to_tensor(tensor, "scatter", "tensor", W);
        auto inputs = to_tensor_list(scatter_list, "scatter", "scatter_list", R);
        return run([&] { return scatter(out, inputs, src, group, async_op); });
      },
      py::arg("tensor"), py::arg("scatter_list").none(true), py::arg("src"), py::arg("group").none(true),
      py::arg("async_op"));
  m.def(
      "reduce_scatter",
      [](py::handle output, py::handle input_list, const ReduceOp& op, const Group& group, bool async_op) {
        Tensor out = to_tensor(output, "reduce_scatter", "output", W);
        auto inputs = to_tensor_list(input_list, "reduce_scatter", "input_list", R);
        return run([&] { return reduce_scatter(out, inputs, op, group, async_op); });
      },
      py::arg("output"), py::arg("input_list"), py::arg("op"), py::arg("group").none(true),
      py::arg("async_op"));
  m.def(
      "reduce_scatter_tensor",
      [](py::handle output, py::handle input, const ReduceOp& op, const Group& group, bool async_op) {
        Tensor out = to_tensor(output, "reduce_scatter_tensor", "output", W);
        Tensor in = to_tensor(input, "reduce_scatter_tensor", "input", R);
        return run([&] { return reduce_scatter_tensor(out, in, op, group, async_op); });
      },
      py::arg("output"), py::arg("input"), py::arg("op"), py::arg("group").none(true), py::arg("async_op"));
  m.def(
      "reduce_scatter_tensor_uneven",
      [](py::handle output, py::handle input, const std::vector<int64_t>& splits, const ReduceOp& op,
         const Group& group, bool async_op) {
        Tensor out = to_tensor(output, "reduce_scatter_tensor_uneven", "output", W);
        Tensor in = to_tensor(input, "reduce_scatter_tensor_uneven", "input", R);
        return run([&] { return reduce_scatter_tensor_uneven(out, in, splits, op, group, async_op); });
      },
      py::arg("output"), py::arg("input"), py::arg("input_split_sizes"), py::arg("op"),
      py::arg("group").none(true), py::arg("async_op"));
  m.def(
      "all_to_all",
      [](py::handle output_list, py::handle input_list, const Group& group, bool async_op) {
        auto outputs = to_tensor_list(output_list, "all_to_all", "output_tensor_list", W);
        auto inputs = to_tensor_list(input_list, "all_to_all", "input_tensor_list", R);
        return run([&] { return all_to_all(outputs, inputs, group, async_op); });
      },
      py::arg("output_tensor_list"), py::arg("input_tensor_list"), py::arg("group").none(true),
      py::arg("async_op"));
  m.def(
      "all_to_all_single",
      [](py::handle output, py::handle input, const std::vector<int64_t>& output_splits,
         const std::vector<int64_t>& input_splits, const Group& group, bool async_op) {
        Tensor out = to_tensor(output, "all_to_all_single", "output", W);
        Tensor in = to_tensor(input, "all_to_all_single", "input", R);
        return run([&] { return all_to_all_single(out, in, output_splits, input_splits, group, async_op); });
      },
      py::arg("output"), py::arg("input"), py::arg("output_split_sizes"), py::arg("input_split_sizes"),
      py::arg("group").none(true), py::arg("async_op"));
  m.def(
      "barrier",
      [](const Group& group, bool async_op) { return run([&] { return barrier(group, async_op); }); },
      py::arg("group").none(true), py::arg("async_op"));
  m.def(
      "monitored_barrier",
      [](const Group& group, std::optional<Millis> timeout, bool wait_all_ranks) {
        py::gil_scoped_release release;
        monitored_barrier(group, timeout, wait_all_ranks);
      },
      py::arg("group").none(true), py::arg("timeout").none(true), py::arg("wait_all_ranks"));
  m.def(
      "reinit_process_group",
      [](const Group& group, bool rebuild_link) {
        py::gil_scoped_release release;
        reinit_process_group(group, rebuild_link);
      },
      py::arg("group").none(true), py::arg("rebuild_link"));
  m.def(
      "abort_process_group",
      [](const Group& group, const std::string& reason) {
        py::gil_scoped_release release;
        abort_process_group(group, reason);
      },
      py::arg("group").none(true), py::arg("reason"));
  // revoke / shrink / agree (python/tdist/fault_tolerance.py documents them).
  m.def(
      "revoke",
      [](const Group& group) {
        py::gil_scoped_release release;
        revoke(group);
      },
      py::arg("group").none(true));
  m.def(
      "shrink",
      [](const Group& group, std::optional<Millis> timeout) {
        py::gil_scoped_release release;
        return shrink(group, timeout);
      },
      py::arg("group").none(true), py::arg("timeout").none(true));
  m.def(
      "agree",
      [](int64_t flag, const Group& group, std::optional<Millis> timeout) {
        py::gil_scoped_release release;
        return agree(flag, group, timeout);
      },
      py::arg("flag"), py::arg("group").none(true), py::arg("timeout").none(true));
  m.def(
      "get_comm_name", [](const Group& group) { return get_comm_name(group); }, py::arg("group").none(true));
}

}  // namespace

void bind_distributed(py::module_& m) {
  bind_groups(m);
  bind_point_to_point(m);
  bind_collectives(m);
}

}  // namespace tdist::python
