// Object collectives on byte strings (distributed.h; tdist/objects.py
// pickles) and the launch environment (spawn.h).

#include <pybind11/stl.h>

#include "bindings.h"
#include "tdist/distributed.h"
#include "tdist/spawn.h"

namespace tdist::python {
namespace {

std::vector<Bytes> bytes_list(py::handle seq, const char* op) {
  std::vector<Bytes> out;
  if (seq.is_none()) return out;
  for (py::handle item : seq) out.push_back(to_bytes(item, op));
  return out;
}

py::list py_list(const std::vector<Bytes>& list) {
  py::list out;
  for (const auto& b : list) out.append(from_bytes(b));
  return out;
}

}  // namespace

void bind_objects(py::module_& m) {
  m.def(
      "broadcast_object_list",
      [](py::handle objects, size_t count, int src, const Group& group) {
        // On src `objects` holds the pickles; elsewhere `count` empty slots are filled.
        std::vector<Bytes> list = bytes_list(objects, "broadcast_object_list");
        list.resize(count);
        {
          py::gil_scoped_release release;
          broadcast_object_list(list, src, group);
        }
        return py_list(list);
      },
      py::arg("objects").none(true), py::arg("count"), py::arg("src"), py::arg("group").none(true));
  m.def(
      "all_gather_object",
      [](py::bytes obj, const Group& group) {
        Bytes mine = to_bytes(obj, "all_gather_object");
        std::vector<Bytes> list;
        {
          py::gil_scoped_release release;
          all_gather_object(list, mine, group);
        }
        return py_list(list);
      },
      py::arg("obj"), py::arg("group").none(true));
  m.def(
      "gather_object",
      [](py::bytes obj, bool is_dst, int dst, const Group& group) -> py::object {
        Bytes mine = to_bytes(obj, "gather_object");
        std::vector<Bytes> list;
        {
          py::gil_scoped_release release;
          gather_object(mine, is_dst ? &list : nullptr, dst, group);
        }
        if (!is_dst) return py::none();
        return py_list(list);
      },
      py::arg("obj"), py::arg("is_dst"), py::arg("dst"), py::arg("group").none(true));
  m.def(
      "scatter_object_list",
      [](py::handle inputs, int src, const Group& group) -> py::object {
        std::vector<Bytes> in = bytes_list(inputs, "scatter_object_list");
        std::vector<Bytes> out;
        {
          py::gil_scoped_release release;
          scatter_object_list(out, in, src, group);
        }
        if (out.empty()) return py::none();  // not a member
        return from_bytes(out[0]);
      },
      py::arg("inputs").none(true), py::arg("src"), py::arg("group").none(true));

  m.def(
      "launch_environment",
      [] {
        LaunchEnvironment env = launch_environment();
        py::dict out;
        out["rank"] = env.rank;
        out["world_size"] = env.world_size;
        out["local_rank"] = env.local_rank;
        out["local_world_size"] = env.local_world_size;
        out["rank_source"] = env.rank_source;
        return out;
      },
      "Where this process sits in its job, as its launcher says (RANK, OMPI_COMM_WORLD_RANK, ...): "
      "a dict of rank, world_size, local_rank, local_world_size (-1 if unknown) and rank_source.");
}

}  // namespace tdist::python
