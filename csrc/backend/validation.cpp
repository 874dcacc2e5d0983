#include "backend/validation.h"

#include <cmath>

#include <ATen/MemoryOverlap.h>

#include "core/errors.h"
#include "core/support.h"

namespace fastcomm {

namespace {

using c10d::OpType;
using c10d::ReduceOp;

void check_count(const char* op, const char* what, size_t got, size_t expected) {
  FC_CHECK(got == expected, op, "expected ", expected, " ", what, ", got ", got);
}

void check_same_dtype(const char* op, const at::Tensor& t, const at::Tensor& reference, const char* what) {
  FC_CHECK(t.scalar_type() == reference.scalar_type(), op, what, " has dtype ", t.scalar_type(),
           " but the input has dtype ", reference.scalar_type());
}

void check_numel(const char* op, const at::Tensor& t, int64_t expected, const char* what) {
  FC_CHECK(t.numel() == expected, op, what, " has ", t.numel(), " elements (shape ", t.sizes(), "), expected ",
           expected);
}

void check_root(const char* op, int64_t root, int world_size) {
  FC_CHECK(root >= 0 && root < world_size, op, "invalid root rank ", root, " for a group of size ", world_size);
}

// Lists of world_size tensors that must each match `reference` in dtype and numel.
void check_peer_list(const char* op, const std::vector<at::Tensor>& list, const at::Tensor& reference, int world_size,
                     const char* what) {
  check_count(op, c10::str(what, " tensors (one per rank)").c_str(), list.size(), world_size);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string label = c10::str(what, "[", i, "]");
    check_same_dtype(op, list[i], reference, label.c_str());
    check_numel(op, list[i], reference.numel(), label.c_str());
  }
}

void check_tensors(const Collective& c) {
  size_t i = 0;
  c.any_tensor([&](const at::Tensor& t) {
    FC_CHECK(t.defined(), c.name, "tensor ", i, " is undefined");
    // Sparse COO is passed through for all_reduce SUM on CPU (Gloo's sparse
    // allreduce, which DDP uses for sparse embedding gradients).
    const bool sparse_ok = c.type == OpType::ALLREDUCE && c.reduce_op == ReduceOp::SUM &&
                           c.device == c10::DeviceType::CPU && t.layout() == c10::kSparse;
    FC_CHECK(t.layout() == c10::kStrided || sparse_ok, c.name,
             "only dense (strided) tensors are supported here (sparse COO: all_reduce SUM on CPU only), got layout ",
             t.layout());
    const auto dtype = t.scalar_type();
    FC_CHECK(is_reducible_dtype(dtype) || is_move_only_dtype(dtype), c.name, "unsupported dtype ", dtype,
             " (supported: float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8, bool; "
             "for data movement also uint16, uint32, uint64 and the float8 types)");
    FC_CHECK(!c.is_reduction() || is_reducible_dtype(dtype), c.name, "dtype ", dtype,
             " can be moved but not reduced (reducible: float32, float64, float16, bfloat16, int8, int16, int32, "
             "int64, uint8, bool)");
    FC_CHECK(t.device().type() == c.device, c.name, "all tensors must be on one device type; tensor ", i, " is on ",
             t.device(), " but the first is on ", c10::DeviceTypeName(c.device));
    ++i;
    return false;  // every tensor
  });
  if (c.is_p2p() && c.inputs.size() == 1) {
    FC_CHECK(c.inputs[0].is_contiguous(), c.name, "the tensor must be contiguous (shape ", c.inputs[0].sizes(),
             ", strides ", c.inputs[0].strides(), ")");
  }
}

// The tensors the op writes: none whose elements share memory, none that overlap another.
void check_written(const Collective& c, int rank) {
  // What the op writes: the broadcast root's tensor is only read.
  const bool written = !(c.type == OpType::BROADCAST && c.peer == rank);
  const std::vector<at::Tensor> outputs = written ? c.written_tensors() : std::vector<at::Tensor>{};
  for (size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor& t = outputs[i];
    if (t.layout() != c10::kStrided) continue;
    // An expand()ed view (stride 0) or the like: several results would land on one memory location.
    FC_CHECK(at::has_internal_overlap(t) != at::MemOverlap::Yes, c.name,
             "a tensor the op writes has elements that share memory (shape ", t.sizes(), ", strides ", t.strides(),
             ", e.g. an expand()ed view): clone() it first");
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      const at::MemOverlapStatus overlap = at::get_overlap_status(t, outputs[j]);
      FC_CHECK(overlap != at::MemOverlapStatus::Full && overlap != at::MemOverlapStatus::Partial, c.name,
               "output tensors ", i, " and ", j, " overlap: each output needs memory of its own");
    }
  }
}

void check_shapes(const Collective& c, int rank, int n) {
  const char* op = c.name;
  switch (c.type) {
    case OpType::BROADCAST:
    case OpType::REDUCE:
      check_count(op, "tensor", c.inputs.size(), 1);
      check_root(op, c.peer, n);
      break;
    case OpType::ALLREDUCE:
      check_count(op, "tensor", c.inputs.size(), 1);
      break;
    case OpType::ALLREDUCE_COALESCED:
      FC_CHECK(!c.inputs.empty(), op, "needs at least one tensor");
      break;
    case OpType::ALLGATHER:
      check_count(op, "input tensor", c.inputs.size(), 1);
      check_count(op, "output list", c.output_lists.size(), 1);
      check_peer_list(op, c.output_lists[0], c.inputs[0], n, "output");
      break;
    case OpType::_ALLGATHER_BASE:
      check_same_dtype(op, c.outputs[0], c.inputs[0], "output");
      check_numel(op, c.outputs[0], c.inputs[0].numel() * n, "output (world_size * input)");
      break;
    case OpType::ALLGATHER_COALESCED:
      if (!c.output_lists.empty()) {  // list form: output_lists[r][i] receives rank r's inputs[i]
        check_count(op, "output lists (one per rank)", c.output_lists.size(), n);
        for (size_t r = 0; r < c.output_lists.size(); ++r) {
          check_count(op, c10::str("tensors in output list ", r).c_str(), c.output_lists[r].size(), c.inputs.size());
          for (size_t i = 0; i < c.inputs.size(); ++i) {
            const std::string label = c10::str("output[", r, "][", i, "]");
            check_same_dtype(op, c.output_lists[r][i], c.inputs[i], label.c_str());
            check_numel(op, c.output_lists[r][i], c.inputs[i].numel(), label.c_str());
          }
        }
        break;
      }
      [[fallthrough]];
    case kReduceScatterTensorCoalesced: {
      check_count(op, "outputs (one per input)", c.outputs.size(), c.inputs.size());
      const bool gather = c.type == OpType::ALLGATHER_COALESCED;
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        const std::string label = c10::str("output[", i, "]");
        check_same_dtype(op, c.outputs[i], c.inputs[i], label.c_str());
        if (gather) {
          check_numel(op, c.outputs[i], c.inputs[i].numel() * n, label.c_str());
        } else {
          check_numel(op, c.inputs[i], c.outputs[i].numel() * n, c10::str("input[", i, "]").c_str());
        }
      }
      break;
    }
    case OpType::GATHER:
      check_count(op, "input tensor", c.inputs.size(), 1);
      check_root(op, c.peer, n);
      if (rank == c.peer) {
        check_count(op, "output list on the root", c.output_lists.size(), 1);
        check_peer_list(op, c.output_lists[0], c.inputs[0], n, "gather_list");
      } else {
        FC_CHECK(c.output_lists.empty() || c.output_lists[0].empty(), op, "only the root (rank ", c.peer,
                 ") may pass a gather_list; rank ", rank, " passed one");
      }
      break;
    case OpType::SCATTER:
      check_count(op, "output tensor", c.outputs.size(), 1);
      check_root(op, c.peer, n);
      if (rank == c.peer) {
        check_count(op, "input list on the root", c.input_lists.size(), 1);
        check_peer_list(op, c.input_lists[0], c.outputs[0], n, "scatter_list");
      } else {
        FC_CHECK(c.input_lists.empty() || c.input_lists[0].empty(), op, "only the root (rank ", c.peer,
                 ") may pass a scatter_list; rank ", rank, " passed one");
      }
      break;
    case OpType::REDUCE_SCATTER:
      check_count(op, "output tensor", c.outputs.size(), 1);
      check_count(op, "input list", c.input_lists.size(), 1);
      check_peer_list(op, c.input_lists[0], c.outputs[0], n, "input");
      break;
    case OpType::_REDUCE_SCATTER_BASE:
      check_same_dtype(op, c.outputs[0], c.inputs[0], "output");
      check_numel(op, c.inputs[0], c.outputs[0].numel() * n, "input (world_size * output)");
      break;
    case OpType::ALLTOALL_BASE:
      check_same_dtype(op, c.outputs[0], c.inputs[0], "output");
      check_split_sizes(op, "input", c.input_splits, c.inputs[0], n);
      check_split_sizes(op, "output", c.output_splits, c.outputs[0], n);
      if (c.inputs[0].dim() > 0 && c.outputs[0].dim() > 0) {
        FC_CHECK(c.inputs[0].sizes().slice(1) == c.outputs[0].sizes().slice(1), op,
                 "input and output must have the same shape past dim 0, got ", c.inputs[0].sizes(), " and ",
                 c.outputs[0].sizes());
      }
      if (c.input_splits.empty() && c.output_splits.empty()) {
        check_numel(op, c.outputs[0], c.inputs[0].numel(), "output (even split)");
      }
      break;
    case OpType::ALLTOALL:
      check_count(op, "output tensors (one per rank)", c.outputs.size(), n);
      check_count(op, "input tensors (one per rank)", c.inputs.size(), n);
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        check_same_dtype(op, c.inputs[i], c.inputs[0], c10::str("input[", i, "]").c_str());
        check_same_dtype(op, c.outputs[i], c.inputs[0], c10::str("output[", i, "]").c_str());
      }
      break;
    case OpType::SEND:
    case OpType::RECV:
      check_count(op, "tensor", c.inputs.size(), 1);
      FC_CHECK(c.peer >= 0 && c.peer < n, op, "invalid peer rank ", c.peer, " for a group of size ", n);
      FC_CHECK(c.peer != rank, op, "rank ", rank, " cannot ", op, " to or from itself");
      break;
    case OpType::RECVANYSOURCE:
      check_count(op, "tensor", c.inputs.size(), 1);
      break;
    default:
      break;
  }
}

// The low-precision all_reduce's own rules (LowPrecisionWire, core/collective.h).
void check_wire(const Collective& c) {
  const LowPrecisionWire& wire = *c.wire;
  const char* op = c.name;
  FC_CHECK(c.type == OpType::ALLREDUCE && c.reduce_op == ReduceOp::SUM, op, "sums only");
  FC_CHECK(c.device == c10::DeviceType::CPU, op,
           "takes CPU tensors only (CUDA buckets: the hooks' compress "
           "kernels around an NCCL all_reduce), got a tensor on ",
           c10::DeviceTypeName(c.device));
  const at::Tensor& t = c.inputs[0];
  FC_CHECK(is_low_precision_source_dtype(t.scalar_type()), op,
           "the tensor must be float32, float64, float16 or "
           "bfloat16, got ",
           t.scalar_type());
  FC_CHECK(t.is_contiguous(), op, "the tensor must be contiguous (shape ", t.sizes(), ", strides ", t.strides(), ")");
  FC_CHECK(is_low_precision_wire_dtype(wire.dtype), op, "the wire dtype must be float16 or bfloat16, got ", wire.dtype);
  FC_CHECK(std::isfinite(wire.scale), op, "scale must be finite, got ", wire.scale);
  FC_CHECK(wire.limit > 0, op, "limit must be positive (inf: clamp nothing), got ", wire.limit);
  if (wire.clamped.defined()) {
    FC_CHECK(wire.clamped.scalar_type() == at::kLong && wire.clamped.numel() == 1 && wire.clamped.is_cpu(), op,
             "clamped must be a one-element int64 CPU tensor, got ", wire.clamped.scalar_type(), " of shape ",
             wire.clamped.sizes(), " on ", wire.clamped.device());
  }
}

}  // namespace

void check_split_sizes(const char* op_name, const char* which, const std::vector<int64_t>& splits, const at::Tensor& t,
                       int world_size) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  if (splits.empty()) {
    FC_CHECK(rows % world_size == 0, op_name, which, " tensor dim 0 (", rows, ") must be divisible by the group size ",
             world_size, " when no split sizes are given");
    return;
  }
  FC_CHECK(static_cast<int64_t>(splits.size()) == world_size, op_name, which, "_split_sizes has ", splits.size(),
           " entries, expected one per rank (", world_size, ")");
  int64_t sum = 0;
  for (size_t i = 0; i < splits.size(); ++i) {
    FC_CHECK(splits[i] >= 0, op_name, which, "_split_sizes[", i, "] is negative (", splits[i], ")");
    sum += splits[i];
  }
  FC_CHECK(sum == rows, op_name, which, "_split_sizes add up to ", sum, " but the ", which, " tensor has ", rows,
           " rows in dim 0");
}

void validate(const Collective& c, int rank, int world_size) {
  check_tensors(c);
  check_shapes(c, rank, world_size);
  check_written(c, rank);
  if (c.is_reduction()) check_reduce_op(c.name, c.reduce_op, c.dtype(), c.device);
  if (c.wire) check_wire(c);
}

}  // namespace fastcomm
