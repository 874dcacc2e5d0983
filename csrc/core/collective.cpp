#include "core/collective.h"

namespace fastcomm {

std::vector<at::Tensor> Collective::result_tensors() const {
  using c10d::OpType;
  switch (type) {
    case OpType::BROADCAST:
    case OpType::ALLREDUCE:
    case OpType::ALLREDUCE_COALESCED:
    case OpType::REDUCE:
    case OpType::SEND:
    case OpType::RECV:
    case OpType::RECVANYSOURCE:
      return inputs;
    case OpType::ALLGATHER:
    case OpType::GATHER:
    case OpType::ALLGATHER_COALESCED: {
      if (type == OpType::ALLGATHER_COALESCED && output_lists.empty()) return outputs;
      std::vector<at::Tensor> flat;
      for (const auto& list : output_lists) flat.insert(flat.end(), list.begin(), list.end());
      return flat;
    }
    case OpType::BARRIER:
      return {};
    default:
      return outputs;
  }
}

at::ScalarType Collective::dtype() const {
  const at::Tensor* t = first_defined();
  return t ? t->scalar_type() : at::ScalarType::Undefined;
}

bool Collective::is_reduction() const {
  using c10d::OpType;
  return type == OpType::ALLREDUCE || type == OpType::ALLREDUCE_COALESCED || type == OpType::REDUCE ||
         type == OpType::REDUCE_SCATTER || type == OpType::_REDUCE_SCATTER_BASE ||
         type == kReduceScatterTensorCoalesced;
}

bool Collective::is_p2p() const {
  using c10d::OpType;
  return type == OpType::SEND || type == OpType::RECV || type == OpType::RECVANYSOURCE;
}

bool Collective::is_in_place() const {
  using c10d::OpType;
  return type == OpType::BROADCAST || type == OpType::ALLREDUCE || type == OpType::ALLREDUCE_COALESCED ||
         type == OpType::REDUCE || type == OpType::RECV || type == OpType::RECVANYSOURCE;
}

std::vector<at::Tensor> Collective::written_tensors() const {
  if (is_in_place()) return inputs;
  std::vector<at::Tensor> written(outputs.begin(), outputs.end());
  for (const auto& list : output_lists) written.insert(written.end(), list.begin(), list.end());
  return written;
}

Collective map_tensors(const Collective& c, const std::function<at::Tensor(const at::Tensor&)>& fn) {
  Collective out = c;
  auto map_list = [&](std::vector<at::Tensor>& list) {
    for (auto& t : list) t = fn(t);
  };
  map_list(out.inputs);
  map_list(out.outputs);
  for (auto& list : out.input_lists) map_list(list);
  for (auto& list : out.output_lists) map_list(list);
  return out;
}

}  // namespace fastcomm
