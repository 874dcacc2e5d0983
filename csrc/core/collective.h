// One collective call, as the backend hands it to an algorithm.
//
// The backend validates the user's arguments, then copies them into a
// Collective. Which fields are used depends on `type` (c10d::OpType):
//   BROADCAST, ALLREDUCE, REDUCE, SEND, RECV, RECVANYSOURCE: inputs = {tensor}
//   ALLREDUCE_COALESCED: inputs = the tensors, reduced in place
//   ALLGATHER: inputs = {input}, output_lists = {world_size outputs}
//   _ALLGATHER_BASE: inputs = {input}, outputs = {world_size * input}
//   ALLGATHER_COALESCED: inputs[i] gathered into outputs[i] (allgather_into_tensor_coalesced),
//       or, when output_lists is set, into output_lists[r][i] (deprecated all_gather_coalesced)
//   GATHER: inputs = {input}, output_lists = {world_size outputs} on root, {} elsewhere
//   SCATTER: outputs = {output}, input_lists = {world_size inputs} on root, {} elsewhere
//   REDUCE_SCATTER: outputs = {output}, input_lists = {world_size inputs}
//   _REDUCE_SCATTER_BASE: inputs = {world_size * output}, outputs = {output}
//   kReduceScatterTensorCoalesced (torch_compat.h): inputs[i] -> outputs[i]
//   ALLTOALL_BASE: inputs = {input}, outputs = {output}, *_splits (dim-0 rows; empty = even)
//   ALLTOALL: inputs = world_size tensors, outputs = world_size tensors
//   BARRIER: no tensors
// `peer` is the root rank for rooted collectives and the peer for p2p.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "core/torch_compat.h"

namespace fastcomm {

// The wire format of fastcomm's low-precision all_reduce
// (ProcessGroupFastcomm::allreduce_low_precision, used by the fp16/bf16 DDP
// hooks). Each rank's tensor (a floating type) is multiplied by `scale`,
// finite values beyond +-limit are clamped, the values are rounded to `dtype`
// (float16 or bfloat16) and summed, and the sum is written back into the
// tensor. On one host (allreduce_low_precision_shm) the sum is taken in
// float32 in rank order and rounded once; elsewhere
// (allreduce_low_precision_via_compress) it is the group's ordinary
// all_reduce of `dtype` (Gloo rounds each partial sum). `clamped` (int64, one
// element, CPU) gains the number of this rank's values that were clamped.
struct LowPrecisionWire {
  c10::ScalarType dtype = c10::ScalarType::Half;
  double scale = 1.0;
  double limit = 0.0;
  at::Tensor clamped;
};

struct Collective {
  c10d::OpType type = c10d::OpType::UNKNOWN;
  const char* name = "";  // the user-facing op name, for messages
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> outputs;
  std::vector<std::vector<at::Tensor>> input_lists;
  std::vector<std::vector<at::Tensor>> output_lists;
  c10d::ReduceOp reduce_op = c10d::ReduceOp::SUM;
  int64_t peer = 0;
  int tag = 0;
  std::vector<int64_t> input_splits;
  std::vector<int64_t> output_splits;
  std::chrono::milliseconds timeout{0};  // always set (group timeout when the call gave none)
  // The caller waits for the result at once (torch's asyncOp false, as
  // dist.all_reduce(..., async_op=False) passes), set from every call's
  // options: an all_reduce then runs on the calling thread, never on the
  // engine's op queue, whose hand-over would only add a thread wake-up to the
  // call; the delegates get it back as asyncOp, as a call made to them
  // directly would pass it (ProcessGroupNCCL may then use the caller's
  // current stream).
  bool blocking = false;
  c10::DeviceType device = c10::DeviceType::CPU;
  // ALLREDUCE only: set for a low-precision all_reduce. Only the algorithms
  // registered first (allreduce_low_precision_*) accept a collective with a
  // wire format; every other algorithm sees only collectives without one.
  std::optional<LowPrecisionWire> wire;

  // Calls `f` on every tensor this call touches (inputs, input lists, outputs,
  // output lists) until it returns true; returns whether it did. No copies:
  // the checks that use it run on every call, in several algorithms' accepts().
  template <class F>
  bool any_tensor(F&& f) const {
    for (const auto& t : inputs) {
      if (f(t)) return true;
    }
    for (const auto& list : input_lists) {
      for (const auto& t : list) {
        if (f(t)) return true;
      }
    }
    for (const auto& t : outputs) {
      if (f(t)) return true;
    }
    for (const auto& list : output_lists) {
      for (const auto& t : list) {
        if (f(t)) return true;
      }
    }
    return false;
  }
  // The first defined tensor of any_tensor's order; null for a barrier.
  const at::Tensor* first_defined() const {
    const at::Tensor* found = nullptr;
    any_tensor([&](const at::Tensor& t) {
      if (t.defined()) found = &t;
      return t.defined();
    });
    return found;
  }
  // The tensors whose contents the user sees after completion, in a fixed order.
  std::vector<at::Tensor> result_tensors() const;
  // The dtype of the data (first tensor found); Undefined for a barrier.
  at::ScalarType dtype() const;
  bool is_reduction() const;
  bool is_p2p() const;
  // True when the op writes its results into `inputs` (allreduce, broadcast, reduce, recv).
  bool is_in_place() const;
  // The tensors the op writes: `inputs` for in-place ops, else outputs and output_lists.
  std::vector<at::Tensor> written_tensors() const;
};

// A copy of `c` with every tensor replaced by fn(tensor); lists keep their shape.
Collective map_tensors(const Collective& c, const std::function<at::Tensor(const at::Tensor&)>& fn);

}  // namespace fastcomm
