// Device meshes and the layouts of sharded tensors (tdist/mesh.h,
// tdist/placement.h): the arithmetic under tdist.device_mesh and
// tdist.tensor. Placements cross as tuples -- ("shard", dim),
// ("replicate",), ("partial", ReduceOp) -- so that the Python classes Shard,
// Replicate and Partial stay plain Python objects as in torch.

#include <pybind11/stl.h>
#include "bindings.h"

#include "tdist/errors.h"
#include "tdist/placement.h"

namespace tdist::python {

namespace {

using mesh::DeviceMesh;
using mesh::Placement;
using mesh::RedistributeStep;

Placement to_placement(const py::handle& obj) {
  auto t = py::reinterpret_borrow<py::tuple>(obj);
  const auto kind = t[0].cast<std::string>();
  if (kind == "shard") return Placement::shard(t[1].cast<int>());
  if (kind == "replicate") return Placement::replicate();
  if (kind == "partial") return Placement::partial(t[1].cast<ReduceOp>());
  throw DistInvalidArgument("placement kind '" + kind + "' is not shard, replicate or partial");
}

std::vector<Placement> to_layout(const py::sequence& seq) {
  std::vector<Placement> layout;
  for (const auto& item : seq) layout.push_back(to_placement(item));
  return layout;
}

py::tuple from_placement(const Placement& p) {
  switch (p.kind) {
    case Placement::kShard:
      return py::make_tuple("shard", p.dim);
    case Placement::kPartial:
      return py::make_tuple("partial", p.op);
    case Placement::kReplicate:
      break;
  }
  return py::make_tuple("replicate");
}

const char* step_fill(RedistributeStep::Fill fill) {
  switch (fill) {
    case RedistributeStep::kZeros:
      return "zeros";
    case RedistributeStep::kOnes:
      return "ones";
    case RedistributeStep::kKeep:
      break;
  }
  return "keep";
}

}  // namespace

void bind_mesh(py::module_& m) {
  py::class_<DeviceMesh>(m, "_MeshLayout", "The rank arithmetic of a device mesh (tdist/mesh.h).")
      .def(py::init<std::vector<int64_t>, std::vector<int>, std::vector<std::string>>(), py::arg("shape"),
           py::arg("ranks"), py::arg("dim_names") = std::vector<std::string>())
      .def_property_readonly("ndim", &DeviceMesh::ndim)
      .def_property_readonly("shape", &DeviceMesh::shape)
      .def_property_readonly("ranks", &DeviceMesh::ranks)
      .def_property_readonly("dim_names", &DeviceMesh::dim_names)
      .def("size", py::overload_cast<int>(&DeviceMesh::size, py::const_), py::arg("dim"))
      .def("dim_index", &DeviceMesh::dim_index, py::arg("name"))
      .def("coordinate_of", &DeviceMesh::coordinate_of, py::arg("rank"))
      .def("rank_at", &DeviceMesh::rank_at, py::arg("coordinate"))
      .def("group_ranks", &DeviceMesh::group_ranks, py::arg("dim"), py::arg("rank"))
      .def("all_group_ranks", &DeviceMesh::all_group_ranks, py::arg("dim"))
      .def("slice", &DeviceMesh::slice, py::arg("dims"), py::arg("rank"))
      .def("__repr__", &DeviceMesh::to_string);

  m.def(
      "_chunk_extent",
      [](int64_t size, int64_t chunks, int64_t index) {
        auto e = mesh::chunk_extent(size, chunks, index);
        return py::make_tuple(e.offset, e.length);
      },
      py::arg("size"), py::arg("chunks"), py::arg("index"));
  m.def(
      "_validate_placements",
      [](const char* op, const py::sequence& placements, int mesh_ndim, int tensor_ndim) {
        mesh::validate_placements(op, to_layout(placements), mesh_ndim, tensor_ndim);
      },
      py::arg("op"), py::arg("placements"), py::arg("mesh_ndim"), py::arg("tensor_ndim"));
  m.def(
      "_local_block",
      [](const std::vector<int64_t>& global_shape, const std::vector<int64_t>& mesh_shape,
         const std::vector<int64_t>& coordinate, const py::sequence& placements) {
        py::list out;
        for (const auto& e : mesh::local_block(global_shape, mesh_shape, coordinate, to_layout(placements))) {
          out.append(py::make_tuple(e.offset, e.length));
        }
        return out;
      },
      py::arg("global_shape"), py::arg("mesh_shape"), py::arg("coordinate"), py::arg("placements"),
      "Per tensor dimension, (offset, length) of the block the rank at `coordinate` holds.");

  py::class_<RedistributeStep>(m, "_RedistributeStep")
      .def_property_readonly("kind", [](const RedistributeStep& s) { return mesh::step_kind_name(s.kind); })
      .def_property_readonly("fill", [](const RedistributeStep& s) { return step_fill(s.fill); })
      .def_readonly("mesh_dim", &RedistributeStep::mesh_dim)
      .def_property_readonly("src", [](const RedistributeStep& s) { return from_placement(s.from); })
      .def_property_readonly("dst", [](const RedistributeStep& s) { return from_placement(s.to); })
      .def_readonly("from_lengths", &RedistributeStep::from_lengths)
      .def_readonly("to_lengths", &RedistributeStep::to_lengths)
      .def_readonly("shape_before", &RedistributeStep::shape_before)
      .def_readonly("shape_after", &RedistributeStep::shape_after)
      .def_readonly("bytes", &RedistributeStep::bytes)
      .def("describe", &RedistributeStep::to_string, py::arg("mesh"));
  py::class_<mesh::RedistributePlan>(m, "_RedistributePlan")
      .def_readonly("steps", &mesh::RedistributePlan::steps)
      .def_property_readonly("total_bytes", &mesh::RedistributePlan::total_bytes)
      .def("explain", &mesh::RedistributePlan::explain, py::arg("mesh"));
  m.def(
      "_plan_redistribute",
      [](const DeviceMesh& mesh, const std::vector<int64_t>& coordinate,
         const std::vector<int64_t>& global_shape, int64_t element_size, const py::sequence& src,
         const py::sequence& dst) {
        return mesh::plan_redistribute(mesh, coordinate, global_shape, element_size, to_layout(src),
                                       to_layout(dst));
      },
      py::arg("mesh"), py::arg("coordinate"), py::arg("global_shape"), py::arg("element_size"),
      py::arg("src"), py::arg("dst"));
}

}  // namespace tdist::python
