#include "core/support.h"

#include <torch/csrc/distributed/c10d/Types.hpp>

#include "core/errors.h"
#include "core/names.h"

namespace fastcomm {

using c10d::ReduceOp;

bool is_reducible_dtype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat:
    case c10::kDouble:
    case c10::kHalf:
    case c10::kBFloat16:
    case c10::kChar:
    case c10::kShort:
    case c10::kInt:
    case c10::kLong:
    case c10::kByte:
    case c10::kBool:
      return true;
    default:
      return false;
  }
}

bool is_move_only_dtype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kUInt16:
    case c10::kUInt32:
    case c10::kUInt64:
    case c10::kFloat8_e4m3fn:
    case c10::kFloat8_e5m2:
    case c10::kFloat8_e4m3fnuz:
    case c10::kFloat8_e5m2fnuz:
      return true;
    default:
      return false;
  }
}

std::optional<ReduceKind> elementwise_kind(const ReduceOp& op) {
  switch (op.op_) {
    case ReduceOp::SUM:
      return ReduceKind::Sum;
    case ReduceOp::PRODUCT:
      return ReduceKind::Product;
    case ReduceOp::MIN:
      return ReduceKind::Min;
    case ReduceOp::MAX:
      return ReduceKind::Max;
    case ReduceOp::BAND:
      return ReduceKind::BitAnd;
    case ReduceOp::BOR:
      return ReduceKind::BitOr;
    case ReduceOp::BXOR:
      return ReduceKind::BitXor;
    default:
      return std::nullopt;
  }
}

bool cpu_kernels_reduce(c10::ScalarType dtype, ReduceKind kind) {
  const bool bitwise = kind == ReduceKind::BitAnd || kind == ReduceKind::BitOr || kind == ReduceKind::BitXor;
  switch (dtype) {
    case c10::kFloat:
    case c10::kDouble:
    case c10::kBFloat16:
    case c10::kHalf:
      return !bitwise;
    case c10::kChar:
    case c10::kByte:
    case c10::kInt:
    case c10::kLong:
      return true;
    default:
      return false;
  }
}

std::optional<ReduceKind> cpu_kernel_reduction(const ReduceOp& op, c10::ScalarType dtype) {
  const auto kind = elementwise_kind(op);
  if (!kind || !cpu_kernels_reduce(dtype, *kind)) return std::nullopt;
  return kind;
}

void check_reduce_op(const char* op_name, const ReduceOp& op, c10::ScalarType dtype, c10::DeviceType device) {
  const bool integral = c10::isIntegralType(dtype, /*includeBool=*/true);
  switch (op.op_) {
    case ReduceOp::SUM:
    case ReduceOp::PRODUCT:
    case ReduceOp::MIN:
    case ReduceOp::MAX:
      return;
    case ReduceOp::BAND:
    case ReduceOp::BOR:
    case ReduceOp::BXOR:
      FC_CHECK(integral, op_name, "ReduceOp.", reduce_op_name(op.op_), " needs an integer or bool dtype, got ", dtype);
      return;
    case ReduceOp::AVG:
      FC_CHECK(dtype != c10::kBool, op_name, "ReduceOp.AVG is undefined for bool tensors");
      return;
    case ReduceOp::PREMUL_SUM:
      FC_CHECK(device == c10::DeviceType::CUDA, op_name,
               "ReduceOp.PREMUL_SUM is supported for CUDA tensors only (it is NCCL's); use SUM and scale");
      return;
    default:
      FC_CHECK(false, op_name, "unsupported ReduceOp ", reduce_op_name(op.op_));
  }
}

bool is_low_precision_source_dtype(c10::ScalarType dtype) {
  return dtype == c10::kFloat || dtype == c10::kDouble || dtype == c10::kHalf || dtype == c10::kBFloat16;
}

bool is_low_precision_wire_dtype(c10::ScalarType dtype) {
  return dtype == c10::kHalf || dtype == c10::kBFloat16;
}

}  // namespace fastcomm
