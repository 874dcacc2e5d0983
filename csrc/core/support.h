// What fastcomm supports, decided in this one place: which dtypes it moves and
// reduces, which reduce ops are defined for which dtype, and which (op, dtype)
// pairs the CPU reduction kernels compute themselves. Validation (backend/),
// the algorithms' gates, the shared-memory engine and the kernels all ask
// here, so adding a dtype or an op is one edit.
//
// Light on purpose (no ATen, no c10d headers): the torch-free kernels include it.
#pragma once

#include <optional>

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace c10d {
struct ReduceOp;
}  // namespace c10d

namespace fastcomm {

// The elementwise reductions fastcomm's kernels implement.
enum class ReduceKind { Sum, Product, Min, Max, BitAnd, BitOr, BitXor };

// Dtypes fastcomm reduces (and moves) on every device: float32/64, float16,
// bfloat16, int8/16/32/64, uint8, bool.
bool is_reducible_dtype(c10::ScalarType dtype);
// Dtypes fastcomm only moves (broadcast, gathers, scatter, all_to_all, p2p):
// unsigned 16/32/64-bit and float8 types, carried bit-exactly as a same-size type.
bool is_move_only_dtype(c10::ScalarType dtype);

// The elementwise reduction a c10d op is; nullopt for AVG (rewritten to SUM
// by avg_via_sum) and PREMUL_SUM (NCCL's).
std::optional<ReduceKind> elementwise_kind(const c10d::ReduceOp& op);

// True when the CPU reduction kernels (kernels/cpu/reduce.h) compute `kind`
// on `dtype`: float32/64, float16, bfloat16 (not the bitwise ops) and
// int8/uint8/int32/int64 (all). int16 is widened (int16_via_int32) and bool
// goes to Gloo.
bool cpu_kernels_reduce(c10::ScalarType dtype, ReduceKind kind);

// The kernel reduction for a c10d op on `dtype`, when the CPU kernels compute
// it; nullopt otherwise.
std::optional<ReduceKind> cpu_kernel_reduction(const c10d::ReduceOp& op, c10::ScalarType dtype);

// fastcomm's low-precision all_reduce (LowPrecisionWire, core/collective.h):
// the tensors it takes (float32, float64, float16, bfloat16 on CPU, converted
// by the compression kernels) and the dtypes it sends (float16, bfloat16).
bool is_low_precision_source_dtype(c10::ScalarType dtype);
bool is_low_precision_wire_dtype(c10::ScalarType dtype);

// Throws c10::Error ("fastcomm <op_name>: ...") when `op` is undefined for
// `dtype` on `device` (bitwise ops on floating types, AVG on bool, PREMUL_SUM
// off CUDA, ...).
void check_reduce_op(const char* op_name, const c10d::ReduceOp& op, c10::ScalarType dtype, c10::DeviceType device);

}  // namespace fastcomm
