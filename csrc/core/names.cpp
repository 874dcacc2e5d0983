#include "core/names.h"

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "core/torch_compat.h"

namespace fastcomm {

std::string reduce_op_name(int op) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNKNOWN(" + std::to_string(op) + ")";
  }
}

std::string op_type_name(int type) {
  const auto op = static_cast<c10d::OpType>(type);
  if (op == kReduceScatterTensorCoalesced) return "REDUCE_SCATTER_TENSOR_COALESCED";  // unnamed in torch 2.11
  return c10d::opTypeToString(op);
}

}  // namespace fastcomm
