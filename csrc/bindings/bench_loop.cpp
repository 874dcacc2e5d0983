// A timing loop for benchmarks/: runs one collective `iters` times on a c10d
// backend from C++, without the GIL or torch's Python wrappers in the loop, so
// benchmarks can report a backend's own per-call cost (what nccl-tests and MPI
// benchmarks report). Any backend works, so fastcomm and Gloo are timed alike.
#include <chrono>

#include <pybind11/pybind11.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/extension.h>

namespace fastcomm {

namespace py = pybind11;

namespace {

c10::intrusive_ptr<c10d::Work> launch_once(c10d::Backend& backend, const std::string& op, at::Tensor& input,
                                           at::Tensor& output) {
  std::vector<at::Tensor> tensors{input};
  if (op == "all_reduce") return backend.allreduce(tensors);
  if (op == "broadcast") return backend.broadcast(tensors);  // root 0
  if (op == "reduce") return backend.reduce(tensors);        // root 0
  if (op == "all_gather") return backend._allgather_base(output, input);
  if (op == "reduce_scatter") return backend._reduce_scatter_base(output, input);
  if (op == "all_to_all") {
    std::vector<int64_t> even;
    return backend.alltoall_base(output, input, even, even);
  }
  if (op == "barrier") return backend.barrier();
  TORCH_CHECK(false, "fastcomm bench_loop: unknown op '", op, "'");
}

}  // namespace

void bind_bench_loop(py::module& m) {
  m.def(
      "bench_loop",
      [](const c10::intrusive_ptr<c10d::Backend>& backend, const std::string& op, at::Tensor input, at::Tensor output,
         int64_t iters) {
        TORCH_CHECK(iters >= 1, "fastcomm bench_loop: iters must be >= 1, got ", iters);
        py::gil_scoped_release no_gil;
        const auto start = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < iters; ++i) launch_once(*backend, op, input, output)->wait();
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
        return elapsed.count() / static_cast<double>(iters);
      },
      py::arg("backend"), py::arg("op"), py::arg("input"), py::arg("output"), py::arg("iters"),
      "Seconds per call of `op` on `backend`, looping in C++ (benchmarks only).");
}

}  // namespace fastcomm
