// The only PYBIND11_MODULE of fastcomm: bindings, no logic.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include "algorithms/flat_buffer.h"
#include "backend/device_registry.h"
#include "backend/process_group_fastcomm.h"

namespace py = pybind11;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "fastcomm's C++ core: the ProcessGroupFastcomm c10d backend and its kernels";
  // The c10d Backend and Store Python types must be registered before ours derive from them.
  py::module_::import("torch.distributed");

  using fastcomm::ProcessGroupFastcomm;
  py::class_<ProcessGroupFastcomm, c10d::Backend, c10::intrusive_ptr<ProcessGroupFastcomm>>(m, "ProcessGroupFastcomm")
      .def(py::init<c10::intrusive_ptr<c10d::Store>, int, int, std::chrono::milliseconds,
                    c10::intrusive_ptr<c10d::Backend>, c10::intrusive_ptr<c10d::Backend>, std::string>(),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("gloo"), py::arg("nccl"),
           py::arg("cuda_unavailable_reason"), py::call_guard<py::gil_scoped_release>())
      .def("algorithm_names", [](const ProcessGroupFastcomm& pg) { return pg.dispatcher().names(); },
           "Registered algorithms, in the order they are asked.")
      .def("algorithm_counts", [](const ProcessGroupFastcomm& pg) { return pg.dispatcher().counts(); },
           "How many times each algorithm was launched (rewrites count their sub-collectives too).")
      .def_property_readonly("timeout", &ProcessGroupFastcomm::timeout);

  m.def("cuda_kernels_compiled", &fastcomm::cuda_kernels_compiled,
        "True when this build compiled fastcomm's CUDA kernels.");
  m.def("pack", &fastcomm::pack, py::arg("tensors"),
        "Concatenate contiguous tensors of one dtype and device into a flat tensor (multi-tensor copy kernel).");
  m.def("unpack", &fastcomm::unpack, py::arg("flat"), py::arg("tensors"),
        "Inverse of pack: copy consecutive pieces of `flat` into `tensors`.");
  m.def("pack_into", &fastcomm::pack_into, py::arg("flat"), py::arg("tensors"),
        "Copy contiguous tensors back to back into the 1-D tensor `flat`.");
}
