// A timing loop for benchmarks/: runs one collective `iters` times on a c10d
// backend from C++, without the GIL or torch's Python wrappers in the loop, so
// benchmarks can report a backend's own per-call cost (what nccl-tests and MPI
// benchmarks report). Any backend works, so fastcomm and Gloo are timed alike.
//
// The collective is named by c10d's own OpType spelling ("ALLREDUCE", ...);
// fastcomm/bench/collectives.py's table says which name each benchmarked
// collective uses (its `c10d_op`), so no second table of names lives here.
#include <chrono>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/extension.h>

#include "core/names.h"

namespace fastcomm {

namespace py = pybind11;

namespace {

using c10d::OpType;

// The OpTypes the loop can issue (one tensor in, one out; roots are rank 0).
// SEND stands for nccl-tests' sendrecv: send `input` to rank + 1 and receive
// `output` from rank - 1, both waited.
constexpr OpType kLoopable[] = {
    OpType::ALLREDUCE,     OpType::BROADCAST, OpType::REDUCE, OpType::_ALLGATHER_BASE, OpType::_REDUCE_SCATTER_BASE,
    OpType::ALLTOALL_BASE, OpType::SEND,      OpType::BARRIER};

OpType parse_op(const std::string& name) {
  std::string known;
  for (OpType type : kLoopable) {
    const std::string spelled = op_type_name(static_cast<int>(type));
    if (spelled == name) return type;
    known += (known.empty() ? "" : ", ") + spelled;
  }
  TORCH_CHECK(false, "fastcomm bench_loop: cannot loop op '", name, "' (loopable: ", known, ")");
}

c10::intrusive_ptr<c10d::Work> launch_once(c10d::Backend& backend, OpType op, at::Tensor& input, at::Tensor& output) {
  std::vector<at::Tensor> tensors{input};
  switch (op) {
    case OpType::ALLREDUCE: {
      c10d::AllreduceOptions blocking;  // the loop waits at once, as dist.all_reduce does
      blocking.asyncOp = false;
      return backend.allreduce(tensors, blocking);
    }
    case OpType::BROADCAST:
      return backend.broadcast(tensors);
    case OpType::REDUCE:
      return backend.reduce(tensors);
    case OpType::_ALLGATHER_BASE:
      return backend._allgather_base(output, input);
    case OpType::_REDUCE_SCATTER_BASE:
      return backend._reduce_scatter_base(output, input);
    case OpType::ALLTOALL_BASE: {
      std::vector<int64_t> even;
      return backend.alltoall_base(output, input, even, even);
    }
    case OpType::SEND: {
      const int rank = backend.getRank(), size = backend.getSize();
      std::vector<at::Tensor> received{output};
      auto sent = backend.send(tensors, (rank + 1) % size, 0);
      auto work = backend.recv(received, (rank + size - 1) % size, 0);
      sent->wait();
      return work;
    }
    default:
      return backend.barrier();
  }
}

}  // namespace

void bind_bench_loop(py::module& m) {
  m.def(
      "bench_loop",
      [](const c10::intrusive_ptr<c10d::Backend>& backend, const std::string& c10d_op, at::Tensor input,
         at::Tensor output, int64_t iters) {
        TORCH_CHECK(iters >= 1, "fastcomm bench_loop: iters must be >= 1, got ", iters);
        const OpType op = parse_op(c10d_op);
        py::gil_scoped_release no_gil;
        const auto start = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < iters; ++i) launch_once(*backend, op, input, output)->wait();
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
        return elapsed.count() / static_cast<double>(iters);
      },
      py::arg("backend"), py::arg("c10d_op"), py::arg("input"), py::arg("output"), py::arg("iters"),
      "Seconds per call of the collective c10d calls `c10d_op` (e.g. 'ALLREDUCE') on `backend`, looping in C++.");
  m.def(
      "bench_samples",
      [](const c10::intrusive_ptr<c10d::Backend>& backend, const std::string& c10d_op, at::Tensor input,
         at::Tensor output, int64_t iters) {
        TORCH_CHECK(iters >= 1, "fastcomm bench_samples: iters must be >= 1, got ", iters);
        const OpType op = parse_op(c10d_op);
        std::vector<double> seconds(static_cast<size_t>(iters));
        py::gil_scoped_release no_gil;
        for (auto& sample : seconds) {
          backend->barrier()->wait();  // untimed: every rank starts the op together
          const auto start = std::chrono::steady_clock::now();
          launch_once(*backend, op, input, output)->wait();
          sample = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        }
        // Untimed: no rank leaves while a peer still finishes its last op. With
        // more ranks than cores, a rank that went on to other work would hold
        // the CPU (a whole time slice, ~0.5 ms) from a peer finishing that op.
        backend->barrier()->wait();
        return seconds;
      },
      py::arg("backend"), py::arg("c10d_op"), py::arg("input"), py::arg("output"), py::arg("iters"),
      "Seconds of each of `iters` calls of `c10d_op` on `backend`, each after the backend's own barrier "
      "(untimed), looping in C++: the method of MPI latency benchmarks, per sample.");
}

}  // namespace fastcomm
