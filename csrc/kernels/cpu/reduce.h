// Elementwise reduction of n equally long buffers into one: the arithmetic of
// every shared-memory reduction (all_reduce, reduce, reduce_scatter).
//
// Contract: dst[i] = ((srcs[0][i] op srcs[1][i]) op ...) op srcs[n-1][i] for
// i < count, always in that order, so every rank that reduces the same buffers
// gets bitwise the same result. float16/bfloat16 accumulate in float32 and are
// rounded once (to nearest even; NaN stays NaN). MIN/MAX propagate NaN as
// torch.minimum/maximum do. dst may alias any source (each element is read
// before it is written). Torch-free: raw pointers and c10::ScalarType only.
//
// Vectorization: every dtype's loop is compiled three times (x86-64-v4 =
// AVX-512, x86-64-v3 = AVX2+FMA+F16C, baseline x86-64) with GCC target
// attributes; reduce() uses the best set this CPU supports (checked once at run
// time), and reduce_with() runs a chosen one, so tests cover the baseline code
// on any machine. Other architectures compile the baseline only.
#pragma once

#include <cstdint>

#include <c10/core/ScalarType.h>

namespace fastcomm::kernels {

enum class ReduceKind { Sum, Product, Min, Max, BitAnd, BitOr, BitXor };

// True when reduce() implements `op` for `dtype` (bitwise ops: integer types only).
bool reduce_supported(c10::ScalarType dtype, ReduceKind op);

enum class ReduceIsa { Baseline, Avx2, Avx512 };

void reduce(c10::ScalarType dtype, ReduceKind op, const void* const* srcs, int n, void* dst, int64_t count);
// The same with the kernels of `isa`; throws if this CPU cannot run them.
void reduce_with(ReduceIsa isa, c10::ScalarType dtype, ReduceKind op, const void* const* srcs, int n, void* dst,
                 int64_t count);

ReduceIsa best_reduce_isa();  // what reduce() uses here
bool reduce_isa_available(ReduceIsa isa);
const char* reduce_isa_name(ReduceIsa isa);

}  // namespace fastcomm::kernels
