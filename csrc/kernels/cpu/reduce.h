// Elementwise reduction of n equally long buffers into one: the arithmetic of
// every shared-memory reduction (all_reduce, reduce, reduce_scatter).
//
// Contract: dst[i] = ((srcs[0][i] op srcs[1][i]) op ...) op srcs[n-1][i] for
// i < count, always in that order, so every rank that reduces the same buffers
// gets bitwise the same result. float16/bfloat16 accumulate in float32 and are
// rounded once (to nearest even; NaN stays NaN). MIN/MAX propagate NaN as
// torch.minimum/maximum do. dst may be any source, element for element (each
// element is read before it is written), not a shifted view of one. Torch-free: raw pointers and c10::ScalarType only.
//
// Which (dtype, kind) pairs are implemented is decided in core/support.h
// (cpu_kernels_reduce); anything else throws.
//
// Vectorization: every dtype's loop is compiled three times (x86-64-v4 =
// AVX-512 instructions on 256-bit vectors, x86-64-v3 = AVX2+FMA+F16C, baseline
// x86-64) with GCC target attributes; reduce() runs the level
// kernels/cpu/isa.h picks, so tests cover the baseline code on any machine by
// capping it.
#pragma once

#include <cstdint>

#include <c10/core/ScalarType.h>

#include "core/support.h"

namespace fastcomm::kernels {

void reduce(c10::ScalarType dtype, ReduceKind op, const void* const* srcs, int n, void* dst, int64_t count);

}  // namespace fastcomm::kernels
