// The only PYBIND11_MODULE of fastcomm: bindings, no logic.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include "algorithms/flat_buffer.h"
#include "backend/device_registry.h"
#include "backend/process_group_fastcomm.h"

namespace py = pybind11;

namespace {

// Holder that drops the GIL while the backend is destroyed. Destroying a
// backend joins its delegates' worker threads (Gloo's), and those may need the
// GIL to release Python-owned tensors of finished works: destroying with the
// GIL held deadlocks (seen at exit under torchrun). torch binds its own
// backends with the same kind of holder; the layout is one intrusive_ptr, so
// torch's casts to intrusive_ptr<Backend> read it as it does its own.
template <typename T>
class NoGilDestructorHolder {
 public:
  NoGilDestructorHolder() = default;
  NoGilDestructorHolder(const NoGilDestructorHolder&) = default;
  NoGilDestructorHolder(NoGilDestructorHolder&&) noexcept = default;
  NoGilDestructorHolder& operator=(const NoGilDestructorHolder&) = default;
  NoGilDestructorHolder& operator=(NoGilDestructorHolder&&) noexcept = default;
  /* implicit */ NoGilDestructorHolder(c10::intrusive_ptr<T> impl) : impl_(std::move(impl)) {}
  // pybind11 builds holders from the raw pointer of a new object (pybind11 issue 2957).
  explicit NoGilDestructorHolder(T* impl) : impl_(c10::intrusive_ptr<T>::unsafe_steal_from_new(impl)) {}
  ~NoGilDestructorHolder() {
    if (impl_ && PyGILState_Check()) {
      py::gil_scoped_release release;
      impl_.reset();
    }
  }
  T* get() const noexcept {
    return impl_.get();
  }

 private:
  c10::intrusive_ptr<T> impl_;
};

}  // namespace

PYBIND11_DECLARE_HOLDER_TYPE(T, NoGilDestructorHolder<T>, true)

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "fastcomm's C++ core: the ProcessGroupFastcomm c10d backend and its kernels";
  // The c10d Backend and Store Python types must be registered before ours derive from them.
  py::module_::import("torch.distributed");

  using fastcomm::ProcessGroupFastcomm;
  py::class_<ProcessGroupFastcomm, c10d::Backend, NoGilDestructorHolder<ProcessGroupFastcomm>>(m,
                                                                                          "ProcessGroupFastcomm")
      .def(py::init<c10::intrusive_ptr<c10d::Store>, int, int, std::chrono::milliseconds,
                    c10::intrusive_ptr<c10d::Backend>, c10::intrusive_ptr<c10d::Backend>, std::string, int64_t>(),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("gloo"), py::arg("nccl"),
           py::arg("cuda_unavailable_reason"), py::arg("allreduce_allgather_max_bytes"),
           py::call_guard<py::gil_scoped_release>())
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
